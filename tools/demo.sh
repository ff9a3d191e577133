#!/usr/bin/env bash
# make demo: a small GPT-style model's inference, traced and predicted, in one report.
#   With a CUDA GPU and PyTorch: the model on the GPU, memtrace as PyTorch's allocator.
#   Without one: the model on the CPU, its tensors mirrored into memtrace through the test
#   CUDA runtime by a stand-in for PyTorch's allocator; said so plainly.
# Leaves the trace, the estimate and an HTML report in BUILD/demo.
set -euo pipefail
BUILD=$(cd "${1:-build}" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
WORK="$BUILD/demo"
mkdir -p "$WORK"
cd "$WORK"
export PYTHONPATH="$HERE/../python${PYTHONPATH:+:$PYTHONPATH}"

if python3 -c "import torch, sys; sys.exit(not torch.cuda.is_available())" 2>/dev/null; then
  echo "== memtrace demo on $(python3 -c 'import torch; print(torch.cuda.get_device_name())'):"
  echo "== a small GPT-style model's inference, traced (mem_tracer.switch_allocator) and predicted."
  echo
  python3 "$HERE/demo/tiny_gpt.py"
else
  echo "== memtrace demo WITHOUT A GPU: PyTorch sees no CUDA device on this machine."
  echo "== The model runs on the CPU; a stand-in for PyTorch's CUDA allocator mirrors each of its"
  echo "== tensors into memtrace through the TEST CUDA RUNTIME (host memory behind CUDA's real entry"
  echo "== points). The measured figures are that stand-in's, not a GPU's; the prediction is what"
  echo "== memtrace-estimate says for a GPU without a cuBLAS workspace (the stand-in makes none)."
  echo
  python3 "$HERE/demo/tiny_gpt.py" "$BUILD/tests/testcudart/lib/libcudart.so.13"
fi
"$BUILD/bin/memtrace-report" html tiny_gpt.bin --estimate tiny_gpt.estimate.json --frame user \
  -o tiny_gpt.html
echo
echo "== The same as a page (timeline, flame graph, table): $WORK/tiny_gpt.html"
