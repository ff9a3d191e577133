"""transformers' own generate() on a tiny GPT-2, for tests/simulator/test_run_gpu.py: its stop
test reads `unfinished.max() == 0` back after every token, which a kernel computes, and with
every such value read as zero (`memtrace run --values zeros`) it is false, so without a limit on
reads it would never end (Note [A run that waits on a value] in simulator/core/device.cpp)."""
import torch
from transformers import GPT2Config, GPT2LMHeadModel

config = GPT2Config(n_layer=2, n_head=4, n_embd=128, vocab_size=1000, n_positions=4096)
model = GPT2LMHeadModel(config).cuda().eval()
ids = torch.randint(0, 1000, (1, 8), device="cuda")
print("generated", model.generate(ids, max_new_tokens=3000, do_sample=False, pad_token_id=0).shape)
