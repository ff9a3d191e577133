"""transformers' generate() on a 4-layer GPT-2 (fp16, batch 4 x 32 tokens from the host), 64 new
tokens, for tests/simulator/test_values.py: greedy (the default), sampling, beam search (3
beams) or a static cache, as the first argument says, on the device the second names (cuda by
default). Prints one JSON line: the output's shape, how many forwards the model ran, the prompt
and its settings, generate()'s seconds, and the tokens' sum."""
import json
import sys
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel

MODES = {"greedy": {}, "sample": {"do_sample": True}, "beam": {"num_beams": 3},
         "static": {"cache_implementation": "static"}}
mode = sys.argv[1] if len(sys.argv) > 1 else "greedy"
device = sys.argv[2] if len(sys.argv) > 2 else "cuda"
torch.manual_seed(0)
config = GPT2Config(n_layer=4, n_head=4, n_embd=256, vocab_size=1000, n_positions=256,
                    bos_token_id=1, eos_token_id=2)
model = GPT2LMHeadModel(config).to(device, torch.float16).eval()
forwards = []
model.register_forward_hook(lambda *_: forwards.append(1))
# As a tokenizer gives them: made on the host, copied to the card.
ids = torch.randint(3, config.vocab_size, (4, 32)).to(device)
mask = torch.ones_like(ids)
start = time.perf_counter()
with torch.no_grad():
    out = model.generate(ids, attention_mask=mask, max_new_tokens=64, pad_token_id=0,
                         **MODES[mode])
seconds = time.perf_counter() - start
print(json.dumps({"mode": mode, "shape": list(out.shape), "forwards": len(forwards),
                  "batch": 4, "prompt": 32, "new": 64, "beams": MODES[mode].get("num_beams", 1),
                  "layers": config.n_layer, "heads": config.n_head,
                  "head_dim": config.n_embd // config.n_head, "seconds": round(seconds, 3),
                  "tokens": int(out.sum())}))
