# iotest: the two commands a user needs are `make run` and `make test`; both
# install the dependencies first when they are missing.
PRESET ?= release
BUILD_DIR := build
VENV := .venv
DEPS_STAMP := $(VENV)/.deps-installed
JOBS ?= $(shell nproc)

.PHONY: all deps build test run bench format sanitize clean

all: build

deps: $(DEPS_STAMP)

$(DEPS_STAMP): tools/install-deps.sh requirements.txt
	tools/install-deps.sh
	touch $@

build: deps
	cmake --preset $(PRESET) $(if $(shell command -v ninja),-G Ninja)
	cmake --build --preset $(PRESET) -j $(JOBS)

# Every test: C++ unit tests and the command-line tests (ctest runs both).
test: build
	ctest --preset $(PRESET) -j 2

# The default job: for now the recombination check on the test set.
run: build
	$(BUILD_DIR)/bin/iotest recombine --rec-set=T05_ --source-count=10 --direction=both

bench: build
	bench/recombine.sh
	$(VENV)/bin/python bench/degrid_ducc0.py

format:
	clang-format -i $$(git ls-files '*.cpp' '*.hpp')

# Address and undefined-behaviour sanitizers over the whole test suite.
sanitize: deps
	cmake --preset sanitize $(if $(shell command -v ninja),-G Ninja)
	cmake --build --preset sanitize -j $(JOBS)
	ctest --preset sanitize -j 2

clean:
	rm -rf build build-debug build-sanitize
