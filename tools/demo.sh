#!/usr/bin/env bash
# make demo: a small GPT-style model's inference, traced and predicted, in one report.
#   With a CUDA GPU and PyTorch: the model on the GPU, memtrace as PyTorch's allocator.
#   Without one: the same, on a simulated H100 (simulator/: PyTorch's CUDA build runs unchanged,
#   its allocator sizes what it would on the card, no kernel runs), with the CUDA build of torch
#   from BUILD/venv-torch-cuda (make cuda-torch-venv); said so plainly.
# The prediction is made on the CPU, by the torch memtrace-estimate was built against (python3).
# Leaves the trace, the estimate and an HTML report in BUILD/demo.
# It runs where it was started (make demo: the checkout), and names every path as the user
# would type it from there, relative where it lies under it: the report names the model's
# lines the same way (docs/reports.md), so the screen shows tools/demo/tiny_gpt.py, not the
# absolute path of the machine it ran on.
set -euo pipefail
BUILD=$(cd "${1:-build}" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
shown() { case "$1" in "$PWD"/*) printf '%s\n' "${1#"$PWD"/}" ;; *) printf '%s\n' "$1" ;; esac; }
WORK=$(shown "$BUILD/demo")
MODEL=$(shown "$HERE/demo/tiny_gpt.py")
mkdir -p "$WORK"
export PYTHONPATH="$HERE/../python${PYTHONPATH:+:$PYTHONPATH}"
CUDA_PYTHON=$(shown "$BUILD/venv-torch-cuda/bin/python")

if python3 -c "import torch, sys; sys.exit(not torch.cuda.is_available())" 2>/dev/null; then
  name=$(python3 -c 'import torch; print(torch.cuda.get_device_name())')
  echo "== memtrace demo on $name:"
  echo "== a small GPT-style model's inference, traced (mem_tracer.switch_allocator) and predicted."
  echo
  python3 "$MODEL" trace "$WORK"
  device=auto
else
  echo "== memtrace demo on a SIMULATED NVIDIA H100 80GB (no GPU on this machine): PyTorch's CUDA"
  echo "== build runs unchanged on memtrace's simulated GPU (docs/simulated-gpu.md), its caching"
  echo "== allocator sizing every tensor as on the card; no kernel runs, so no value is computed."
  echo "== A small GPT-style model's inference, traced (mem_tracer.switch_allocator) and predicted."
  echo
  python3 -m mem_tracer.simulated_gpu h100 -- "$CUDA_PYTHON" "$MODEL" trace "$WORK"
  device=cuda-sm90
fi
python3 "$MODEL" predict "$device" "$WORK"
"$BUILD/bin/memtrace-report" html "$WORK/tiny_gpt.bin" --estimate "$WORK/tiny_gpt.estimate.json" \
  --frame user -o "$WORK/tiny_gpt.html" --force
echo
echo "== The same as a page (timeline, flame graph, table): $WORK/tiny_gpt.html"
