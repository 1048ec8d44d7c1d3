# iotest: the two commands a user needs are `make run` and `make test`; both
# install the dependencies first when they are missing.
# native: tuned for this machine, where `make run` and `make bench` run;
# `make PRESET=release` builds the portable binary (docs/install.md).
PRESET ?= native
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

# The default job: the whole pipeline on this machine, 3 ranks (1 producer,
# 2 streamers), T05_ with the VLA-A layout and its default observation
# (92 M visibilities, 1.47 GB of UVH5), then the files re-read and checked.
RUN_DIR ?= out/run
MPIRUN ?= mpirun --allow-run-as-root --oversubscribe
run: build
	@mkdir -p $(RUN_DIR) && rm -f $(RUN_DIR)/vis*.h5 $(RUN_DIR)/vis*.partial
	OMP_WAIT_POLICY=PASSIVE $(MPIRUN) -np 3 $(BUILD_DIR)/bin/iotest --rec-set=T05_ \
	  --vis-set=vlaa --source-count=10 $(RUN_DIR)/vis%d.h5 --report=$(RUN_DIR)/report.json
	$(BUILD_DIR)/bin/iotest verify $(RUN_DIR)/vis*.h5
	@echo "make run: visibilities in $(RUN_DIR)/vis*.h5, report in $(RUN_DIR)/report.json"

bench: build
	bench/recombine.sh
	$(VENV)/bin/python bench/degrid_ducc0.py
	bench/distribution.sh
	bench/write_throughput.sh

format:
	clang-format -i $$(git ls-files '*.cpp' '*.hpp')

# Address and undefined-behaviour sanitizers over the whole test suite.
sanitize: deps
	cmake --preset sanitize $(if $(shell command -v ninja),-G Ninja)
	cmake --build --preset sanitize -j $(JOBS)
	ctest --preset sanitize -j 2

clean:
	rm -rf build build-release build-debug build-sanitize
