"""The estimator zoo's top-1 mixture of experts (tests/estimator/zoo.py, `moe-top1`: each
expert's rows are `torch.nonzero(choice == index)` over the router's argmax), trained for two
AdamW steps on the device the first argument names, for tests/simulator/test_values.py.

Its router's weights and, unless the second argument is `drawn`, its input are copied from the
host: on the simulated card their values are known, and so is what the router computes from
them (Note [Known values on the simulated card] in python/mem_tracer/simulated_gpu/values.py);
argmax passes no gradient, so AdamW never changes the router and the routing stays known. With
`drawn` the input is drawn on the device, where no kernel computes it: the routing is a value
no kernel computed. Prints one JSON line: the rows each expert took, step after step."""
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "estimator"))
import zoo  # noqa: E402

device = sys.argv[1] if len(sys.argv) > 1 else "cuda"
drawn = len(sys.argv) > 2 and sys.argv[2] == "drawn"
torch.manual_seed(0)
model = zoo.MoE().to(device)
x = torch.randn(2, 8, 32)
x = torch.randn(2, 8, 32, device=device) if drawn else x.to(device)

loads = []  # the rows each expert took: its input's (the tokens nonzero picked)
for expert in model.experts:
    expert.register_forward_pre_hook(lambda module, args: loads.append(args[0].shape[0]))
optimizer = torch.optim.AdamW(model.parameters())
for _ in range(2):
    model(x).sum().backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
print(json.dumps({"loads": loads}))
