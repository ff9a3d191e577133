#!/usr/bin/env bash
# Exports the benchmark's models (once, into $MEMTRACE_BENCH_MODELS or a temporary directory)
# and runs memtrace-estimate-bench. Usage: bench/estimator/run.sh [BUILD_DIR] [benchmark flags]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
shift || true
models=${MEMTRACE_BENCH_MODELS:-${TMPDIR:-/tmp}/memtrace-estimator-bench-models}
if [[ ! -f $models/llama_1b_traced.pt ]]; then
  python3 "$here/export_models.py" "$models"
fi
exec "$build/bench/estimator/memtrace-estimate-bench" --models "$models" "$@"
