"""One training step of a Llama-style 7B model (transformers' LlamaConfig at the 7B sizes), bf16
weights, AdamW, batch 1 x 2048, for tests/simulator/test_run_gpu.py: made on the meta device and
given device memory with to_empty, so no weight is ever on the host. Prints the peak and the
host memory it took."""
import json
import resource

import torch
import transformers

config = transformers.LlamaConfig(hidden_size=4096, intermediate_size=11008,
                                  num_hidden_layers=32, num_attention_heads=32,
                                  num_key_value_heads=32, vocab_size=32000)
with torch.device("meta"):
    model = transformers.LlamaForCausalLM(config).to(torch.bfloat16)
model = model.to_empty(device="cuda")
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
ids = torch.randint(0, config.vocab_size, (1, 2048), device="cuda")
loss = model(input_ids=ids, labels=ids).loss
loss.backward()
optimizer.step()
optimizer.zero_grad(set_to_none=True)
torch.cuda.synchronize()
print(json.dumps({"parameters": sum(p.numel() for p in model.parameters()),
                  "peak": torch.cuda.max_memory_allocated(),
                  "max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
