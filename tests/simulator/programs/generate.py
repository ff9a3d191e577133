"""A GPT-2-style model (2 layers, random weights, from a transformers config) decoding greedily
until its end token or 8 new tokens: each step reads the new token back from the device, which
the simulated device answers with zeros (token 0, never the end token 7), so there the loop
always runs its 8 steps. (transformers' own generate() is not used: its stopping test reads
`unfinished.max() == 0` back as False, so on the simulated device it never stops.)"""
import torch
from transformers import GPT2Config, GPT2LMHeadModel

torch.manual_seed(0)
config = GPT2Config(n_layer=2, n_head=4, n_embd=128, vocab_size=1000, n_positions=64, bos_token_id=0,
                    eos_token_id=7)
model = GPT2LMHeadModel(config).cuda().eval()
tokens = torch.randint(0, 1000, (1, 8), device="cuda")
END_TOKEN = 7
steps = 0
with torch.no_grad():
    for steps in range(1, 9):
        logits = model(tokens, use_cache=False).logits  # forward: here
        next_token = logits[:, -1].argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, next_token], dim=1)
        if next_token.item() == END_TOKEN:  # read: end token
            break
print("steps", steps)
