# iotest: the two commands a user needs are `make run` and `make test`; both
# install the dependencies first when they are missing.
# native: tuned for this machine, where `make run` and `make bench` run;
# `make PRESET=release` builds the portable binary (docs/install.md).
PRESET ?= native
BUILD_DIR := build
VENV := .venv
DEPS_STAMP := $(VENV)/.deps-installed
JOBS ?= $(shell nproc)

.PHONY: all deps libraries configure build build-iotest test test-long run bench format sanitize clean

all: build

# Everything: the libraries, the virtual cluster's tools, the peers and the
# Python venv the tests and tools use.
deps: $(DEPS_STAMP)

$(DEPS_STAMP): tools/install-deps.sh requirements.txt
	tools/install-deps.sh
	touch $@

# What building and running iotest needs, and no more (`make run`).
LIBRARIES_STAMP := $(BUILD_DIR)/.libraries-installed
libraries: $(LIBRARIES_STAMP)

$(LIBRARIES_STAMP): tools/install-deps.sh
	tools/install-deps.sh --libraries-only
	@mkdir -p $(BUILD_DIR) && touch $@

configure: libraries
	cmake --preset $(PRESET) $(if $(shell command -v ninja),-G Ninja)

# The iotest executable alone: what `make run` runs.
build-iotest: configure
	cmake --build --preset $(PRESET) -j $(JOBS) --target iotest

# Everything, tests included.
build: deps configure
	cmake --build --preset $(PRESET) -j $(JOBS)

# The tests that answer in minutes: the C++ unit tests and the command-line
# tests (a ctest test a file), two at a time. Checks of about 10 s or more
# are marked long and left to `make test-long`.
test: build
	ctest --preset $(PRESET) -j 2 -LE long

# The long checks: the command line's long ones (cli-long) and the virtual
# cluster's suite (`cluster`, about 20 minutes). CI runs both targets.
test-long: build
	ctest --preset $(PRESET) -L long

# The default job: the whole pipeline on this machine, 3 ranks (1 producer,
# 2 streamers), T05_ with the VLA-A layout and its default observation
# (92 M visibilities, 1.47 GB of UVH5), then the files re-read and checked.
RUN_DIR ?= out/run
MPIRUN ?= mpirun --allow-run-as-root --oversubscribe
run: build-iotest
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
