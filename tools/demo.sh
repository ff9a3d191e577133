#!/usr/bin/env bash
# make demo: traces a built-in example and prints the report.
#   On a machine with a CUDA GPU and PyTorch: a small transformer's inference.
#   Without one: the same pipeline on a program run against memtrace's test CUDA runtime.
set -euo pipefail
BUILD=$(cd "${1:-build}" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
REPORT="$BUILD/bin/memtrace-report"

if python3 -c "import torch, sys; sys.exit(not torch.cuda.is_available())" 2>/dev/null; then
  echo "== memtrace demo: tracing a small transformer's inference on $(python3 -c 'import torch; print(torch.cuda.get_device_name())')"
  echo "\$ LD_PRELOAD=libmemtrace.so python3 tools/demo/gpu_model.py"
  LD_PRELOAD="$BUILD/allocator/libmemtrace.so" MEMTRACE_OUTPUT="$OUT/trace.bin" \
    python3 "$HERE/demo/gpu_model.py"
else
  echo "== memtrace demo WITHOUT A GPU: PyTorch sees no CUDA device on this machine."
  echo "== This run shows the whole pipeline on a stand-in: a Python program that makes a small"
  echo "== transformer's CUDA allocations through memtrace's TEST CUDA RUNTIME (host memory behind"
  echo "== CUDA's real entry points). The figures are that program's, not a GPU's."
  echo "\$ LD_PRELOAD=libmemtrace.so python3 tools/demo/host_memory_model.py"
  LD_PRELOAD="$BUILD/allocator/libmemtrace.so" MEMTRACE_OUTPUT="$OUT/trace.bin" \
    python3 "$HERE/demo/host_memory_model.py" "$BUILD/tests/testcudart/lib/libcudart.so.13"
fi
echo
echo "\$ memtrace-report trace.bin --top 10"
"$REPORT" "$OUT/trace.bin" --top 10
