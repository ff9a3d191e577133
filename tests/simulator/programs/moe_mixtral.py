"""transformers' Mixtral (2 layers, 8 experts, top-2 routing, random weights) run forward over 4
x 128 tokens on the device the first argument names, its experts as the implementation the
second names (eager: a loop over the experts each token chose, the default here; grouped_mm),
for tests/simulator/test_values.py. Prints one JSON line: each layer's tokens per expert (from
its router's choices) and, on a card, PyTorch's peak of allocated bytes over a second forward
(after the first made cuBLAS's workspaces)."""
import json
import sys

import torch
from transformers import MixtralConfig, MixtralForCausalLM

device = sys.argv[1] if len(sys.argv) > 1 else "cuda"
experts = sys.argv[2] if len(sys.argv) > 2 else "eager"
torch.manual_seed(0)
config = MixtralConfig(vocab_size=1000, hidden_size=64, intermediate_size=1024,
                       num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                       num_local_experts=8, num_experts_per_tok=2, max_position_embeddings=256,
                       experts_implementation=experts)
model = MixtralForCausalLM(config).to(device).eval()
loads = []


def count(router, inputs, outputs):
    # The router returns (logits, the chosen experts' weights, the chosen experts).
    chosen = outputs[2]
    loads.append(torch.bincount(chosen.flatten(), minlength=config.num_local_experts).tolist())


for layer in model.model.layers:
    layer.mlp.gate.register_forward_hook(count)
ids = torch.randint(0, config.vocab_size, (4, 128)).to(device)
with torch.no_grad():
    model(ids)
    loads.clear()
    if device != "cpu":
        torch.cuda.reset_peak_memory_stats()
    model(ids)
said = {"loads": loads}
if device != "cpu":
    said["peak"] = torch.cuda.max_memory_allocated()
print(json.dumps(said))
