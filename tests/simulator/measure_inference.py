"""One inference row of tests/estimator/truth-h200.json, measured as the H200 measured it, for
the fidelity test (test_fidelity.py): run on a simulated card, in a fresh process.

    python measure_inference.py MODEL DTYPE BATCH OUT.json

The model is built on the CPU as tests/estimator/gpu_truth.py builds it (its published
configuration, random weights from seed 0, `.to(dtype)`), moved to the device with its input,
and run forward once under no_grad after the peak counters are reset (GPT-2 with
use_cache=False). Writes PyTorch's counters."""
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "estimator"))
from gpu_truth import build  # noqa: E402

name, dtype_name, batch, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
dtype = {"fp32": torch.float32, "fp16": torch.float16}[dtype_name]
model, example = build(name, dtype)
shape = (batch, *example.shape[1:])
inputs = torch.randint(0, model.config.vocab_size, shape) if name in ("gpt2", "bert") else \
    torch.randn(shape, dtype=dtype)
model = model.cuda()
after_weights = torch.cuda.memory_allocated()
inputs = inputs.cuda()
before = torch.cuda.memory_allocated()
torch.cuda.reset_peak_memory_stats()
with torch.no_grad():
    model(inputs, **({"use_cache": False} if name == "gpt2" else {}))
torch.cuda.synchronize()
stats = torch.cuda.memory_stats()
Path(out).write_text(json.dumps({
    "allocated_after_weights": after_weights, "allocated_before_forward": before,
    "max_allocated": stats["allocated_bytes.all.peak"],
    "max_requested": stats["requested_bytes.all.peak"],
    "max_reserved": stats["reserved_bytes.all.peak"],
    "device": torch.cuda.get_device_name(), "torch": torch.__version__}))
