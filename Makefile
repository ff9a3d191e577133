# Thin wrapper over CMake (the source of truth). `make help` lists the targets.
BUILD ?= build
CMAKE_FLAGS ?=
GENERATOR := $(shell command -v ninja >/dev/null 2>&1 && echo Ninja || echo "Unix Makefiles")

.PHONY: help setup configure build test demo bench format clean

help: ## list the targets
	@grep -E '^[a-z]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

setup: ## install the Debian and Python packages the build and tests need (idempotent)
	@tools/setup.sh

configure: setup
	@mkdir -p $(BUILD) && cmake -S . -B $(BUILD) -G "$(GENERATOR)" $(CMAKE_FLAGS) >$(BUILD)/configure.log 2>&1 \
	  || { cat $(BUILD)/configure.log; exit 1; }

build: configure ## build the library, the tools and the tests
	@cmake --build $(BUILD) -j$$(nproc)

test: build ## run every test (unit, preload, Python; GPU tests run only where there is a GPU)
	@ctest --test-dir $(BUILD) --output-on-failure -j$$(nproc)

demo: build ## trace a built-in example and print its report
	@tools/demo.sh $(BUILD)

bench: build ## run the benchmarks whose figures docs/performance.md records
	@python3 bench/run.py $(BUILD)

format: ## clang-format the C++ sources
	@find allocator format recorder reader report common tools tests bench estimator -name '*.cpp' -o -name '*.h' 2>/dev/null | xargs clang-format -i

clean: ## remove the build directory
	@rm -rf $(BUILD)
