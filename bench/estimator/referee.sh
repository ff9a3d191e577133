#!/usr/bin/env bash
# The whole referee run (issue 53; docs/accuracy.md, "Held against the simulated card"): every
# model type of transformers' registry, torchvision's classification and segmentation models
# and the repository's zoo, inference at batches 1 and 2 and an AdamW step, on a simulated
# H100, estimated beside it; then the table in docs/accuracy.md made again from the data file.
# Resumable: run it again and it goes on from the rows docs/referee.jsonl already holds. First
# it estimates again, the card's side kept, the rows whose estimate came through another front
# end than estimate()'s default (referee.py --re-estimate; none once done). Each row's
# `seconds` is its wall time; the table in docs/accuracy.md gives the median and the sum, and
# docs/accuracy.md ("This run") what the last runs took on the 2-core machine.
# Usage: bench/estimator/referee.sh [BUILD_DIR] [referee.py flags: --families, --tasks, --only]
set -euo pipefail
repository=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-build}" && pwd)
shift || true
python=${MEMTRACE_CUDA_TORCH_PYTHON:-$build/venv-torch-cuda/bin/python}
if [[ ! -x $python ]]; then
  echo "bench/estimator/referee.sh: no CUDA build of torch at $python: make cuda-torch-venv" >&2
  exit 2
fi
export MEMTRACE_BIN_DIR=$build/bin MEMTRACE_SIMULATOR_DIR=$build/simulator \
  MEMTRACE_LIBRARY=$build/allocator/libmemtrace.so
cd "$repository"
started=$(date +%s)
nice "$python" tests/estimator/referee.py --re-estimate
nice "$python" tests/estimator/referee.py --resume "$@"
"$python" tests/estimator/referee_table.py --write
echo "referee run: $(($(date +%s) - started)) s; the table is in docs/accuracy.md"
