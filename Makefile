# Thin wrapper over CMake (the source of truth). `make help` lists the targets.
BUILD ?= build
CMAKE_FLAGS ?=
GENERATOR := $(shell command -v ninja >/dev/null 2>&1 && echo Ninja || echo "Unix Makefiles")

.PHONY: help setup configure build check test test-sanitize test-cuda-torch cuda-torch-venv test-pythons pythons-venvs demo bench bench-cost bench-cost-docs bench-referee wheel format clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-16s %s\n", $$1, $$2}'

setup: ## install the Debian and Python packages the build and tests need (idempotent)
	@scripts/setup.sh

# The bridges to PyTorch's allocator are built for the torch of python3 and of the venv with
# torch's CUDA build, when it is there (allocator/CMakeLists.txt): make that venv first.
configure: setup
	@mkdir -p $(BUILD) && cmake -S . -B $(BUILD) -G "$(GENERATOR)" \
	  -DMEMTRACE_TORCH_BRIDGE_PYTHONS=$(abspath $(CUDA_TORCH_VENV))/bin/python $(CMAKE_FLAGS) \
	  >$(BUILD)/configure.log 2>&1 \
	  || { cat $(BUILD)/configure.log; exit 1; }

build: configure ## build the library, the tools and the tests
	@cmake --build $(BUILD) -j$$(nproc)

# The fast tier: every ctest entry labelled `fast` (tests/CMakeLists.txt; CONTRIBUTING.md).
check: build ## the fast tier between two edits: format, unit, preload, report, the Python tests without the CUDA build of torch
	@ctest --test-dir $(BUILD) --output-on-failure -j$$(nproc) -L '^fast$$'

# make test SANITIZE=0 skips the sanitizer build, CUDA_TORCH=0 the CUDA build of torch's venv
# (quicker while iterating; CI runs both).
SANITIZE ?= 1
CUDA_TORCH ?= 1
SANITIZE_BUILD ?= build-sanitize
FUZZ_BUILD ?= build-fuzz
SANITIZE_FLAGS := -DMEMTRACE_SANITIZE=ON -DMEMTRACE_BUILD_ESTIMATOR=OFF -DMEMTRACE_BUILD_BENCH=OFF
# Python and the test programs are not all instrumented: libmemtrace.so is preloaded after
# them (verify_asan_link_order=0), and the interpreter's own allocations are not ours to
# check for leaks (detect_leaks=0).
SANITIZE_ENV := ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0:abort_on_error=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

test: ## run every test (unit, preload, Python, a CUDA build of torch, then the sanitizer build; GPU tests only with a GPU)
	@if [ "$(CUDA_TORCH)" = 1 ]; then $(MAKE) --no-print-directory cuda-torch-venv; fi
	@$(MAKE) --no-print-directory build
	@ctest --test-dir $(BUILD) --output-on-failure -j$$(nproc) -LE '^interpreters$$'
	@if [ "$(SANITIZE)" = 1 ]; then $(MAKE) --no-print-directory test-sanitize; fi

test-sanitize: setup ## the unit, preload, report and fuzz tests under ASan+UBSan (no estimator: LibTorch is not sanitizer-built)
	@mkdir -p $(SANITIZE_BUILD) && cmake -S . -B $(SANITIZE_BUILD) -G "$(GENERATOR)" $(SANITIZE_FLAGS) \
	  >$(SANITIZE_BUILD)/configure.log 2>&1 || { cat $(SANITIZE_BUILD)/configure.log; exit 1; }
	@cmake --build $(SANITIZE_BUILD) -j$$(nproc)
	@$(SANITIZE_ENV) ctest --test-dir $(SANITIZE_BUILD) --output-on-failure -j$$(nproc) \
	  -E '^(python.*|gpu.*)$$'
	@mkdir -p $(FUZZ_BUILD) && CC=clang CXX=clang++ cmake -S . -B $(FUZZ_BUILD) -G "$(GENERATOR)" \
	  $(SANITIZE_FLAGS) -DMEMTRACE_FUZZ=ON >$(FUZZ_BUILD)/configure.log 2>&1 \
	  || { cat $(FUZZ_BUILD)/configure.log; exit 1; }
	@cmake --build $(FUZZ_BUILD) --target fuzz_report -j$$(nproc)
	@$(SANITIZE_ENV) ctest --test-dir $(FUZZ_BUILD) --output-on-failure -R '^fuzz\.run$$'

# A venv with a CUDA build of torch (about 5.5 GB, about 2 minutes from the machine's package
# mirror: docs/performance.md), for the tests of what a CUDA build does differently
# (estimator.cuda_build) and the simulated GPU's; made once and kept, the stamp written only
# when pip succeeded. The stamp holds the package list: a venv made from an older list gets
# what the new one adds (pytest-xdist, for the pytest plugin's test; accelerate, which
# transformers' Trainer needs, for tests/simulator/test_library_loop.py; torchvision, whose
# Faster R-CNN tests/simulator/test_values.py runs; lightning, whose Trainer
# tests/simulator/test_library_loop.py runs; timm and scipy, without which transformers' models
# on timm backbones and its Hungarian-matching models do not build, for the referee,
# tests/estimator/referee.py) without being made again.
CUDA_TORCH_VENV ?= $(BUILD)/venv-torch-cuda
CUDA_TORCH_PACKAGES ?= torch==2.14.1 transformers==5.23.0 accelerate==1.15.0 torchvision==0.29.1 lightning==2.6.6 timm==1.0.31 scipy==1.17.1 pytest pytest-xdist numpy
cuda-torch-venv: ## make the venv with a CUDA build of torch that estimator.cuda_build runs under
	@[ -f $(CUDA_TORCH_VENV)/.complete ] && \
	  [ "$$(cat $(CUDA_TORCH_VENV)/.complete)" = "$(CUDA_TORCH_PACKAGES)" ] || { \
	  { [ -f $(CUDA_TORCH_VENV)/.complete ] || { rm -rf $(CUDA_TORCH_VENV) && \
	    python3 -m venv $(CUDA_TORCH_VENV); }; } && \
	  { $(CUDA_TORCH_VENV)/bin/pip install $(CUDA_TORCH_PACKAGES) >$(CUDA_TORCH_VENV).log 2>&1 \
	    || { tail -20 $(CUDA_TORCH_VENV).log; exit 1; }; } && \
	  echo "$(CUDA_TORCH_PACKAGES)" >$(CUDA_TORCH_VENV)/.complete; }

test-cuda-torch: cuda-torch-venv build ## only the estimator's device tests under a CUDA build of torch
	@MEMTRACE_CUDA_TORCH_PYTHON=$(abspath $(CUDA_TORCH_VENV))/bin/python \
	  ctest --test-dir $(BUILD) --output-on-failure -R '^estimator\.cuda_build$$'

# The pythons tier (issue 48; ctest label `interpreters`, which `-L python` does not match),
# outside `make test`: the unchanged-program set
# (tests/simulator/test_unchanged.py) under the CUDA build of torch on each other CPython the
# package supports, one venv each beside the 3.11 one (about 5.5 GB and 2-4 minutes each from
# the package mirror; pyenv's interpreters), made like cuda-torch-venv: the stamp written only
# when pip succeeded. docs/reliability.md has the last run's result.
# transformers 5.23.0 and scipy 1.17 need CPython 3.11 or later: 3.10's venv has the last
# releases for 3.10.
PYTHONS_TIER ?= 3.12 3.13 3.10
PYTHONS_TIER_PACKAGES_3.10 ?= $(subst scipy==1.17.1,scipy==1.15.3,$(subst transformers==5.23.0,transformers==5.20.2,$(CUDA_TORCH_PACKAGES)))
pythons-venvs: ## make a venv with torch's CUDA build for each CPython of the pythons tier (3.10, 3.12, 3.13)
	@for version in $(PYTHONS_TIER); do \
	  venv=$(BUILD)/venv-torch-cuda-$$version; \
	  packages="$(CUDA_TORCH_PACKAGES)"; [ $$version != 3.10 ] || packages="$(PYTHONS_TIER_PACKAGES_3.10)"; \
	  [ -f $$venv/.complete ] && [ "$$(cat $$venv/.complete)" = "$$packages" ] && continue; \
	  python=$$(ls /root/.pyenv/versions/$$version.*/bin/python$$version 2>/dev/null | tail -1); \
	  [ -n "$$python" ] || python=$$(command -v python$$version); \
	  [ -x "$$python" ] || { echo "CPython $$version is not installed (pyenv install $$version)"; exit 1; }; \
	  { [ -f $$venv/.complete ] || { rm -rf $$venv && $$python -m venv $$venv; }; } && \
	  { $$venv/bin/pip install --no-cache-dir $$packages >$$venv.log 2>&1 \
	    || { tail -20 $$venv.log; exit 1; }; } && \
	  echo "$$packages" >$$venv/.complete || exit 1; \
	done

test-pythons: pythons-venvs build ## the pythons tier: every PyTorch counter traced as untraced on CPython 3.10, 3.12, 3.13 (ctest -L interpreters)
	@ctest --test-dir $(BUILD) --output-on-failure -L '^interpreters$$'

demo: cuda-torch-venv build ## trace a built-in example (on a GPU, or a simulated one) and print its report
	@tools/demo.sh $(BUILD)

bench: build ## run the benchmarks whose figures docs/performance.md records
	@python3 bench/run.py $(BUILD)

# Instructions counted around the measured work only, two repeats (issue 52): 17 minutes on the
# 2-core machine under other builds' load (three processes at once), valgrind and the CUDA build
# of torch's venv needed. Exits with an error, after the tables, when two repeats are more than
# 0.1 % apart.
bench-cost: cuda-torch-venv build ## what memtrace costs a PyTorch program on the simulated GPU, in instructions (docs/performance.md)
	@python3 bench/cost.py $(BUILD)

# The same, and its tables written into docs/performance.md (Note [The cost tables regenerated]):
# MODES=none,python re-takes those modes' rows alone and keeps the others'.
bench-cost-docs: cuda-torch-venv build ## re-take the cost tables of docs/performance.md (MODES=a,b for some modes)
	@python3 bench/cost.py $(BUILD) $(if $(MODES),--modes $(MODES)) --docs

# The referee run over every architecture that builds (issue 53; docs/accuracy.md records its
# time): resumable, it goes on from the rows docs/referee.jsonl holds.
bench-referee: cuda-torch-venv build ## the estimator against the simulated card on every model that builds (docs/accuracy.md)
	@bench/estimator/referee.sh $(BUILD)

wheel: setup ## the relocatable manylinux wheel in dist/ (pip wheel, then auditwheel)
	@MEMTRACE_TORCH_BRIDGE_PYTHONS=$(abspath $(CUDA_TORCH_VENV))/bin/python scripts/build_wheel.sh dist

format: ## clang-format the C++ sources (ctest's `format` entry checks them: scripts/format.sh --check)
	@scripts/format.sh

clean: ## remove the build directories
	@rm -rf $(BUILD) $(SANITIZE_BUILD) $(FUZZ_BUILD)
