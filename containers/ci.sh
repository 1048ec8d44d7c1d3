#!/usr/bin/env bash
# CI, the container step (apart from `make test`, which does not build the
# image): build the image with podman, then run the container tests against
# it: tests/containers (the image alone, and under this machine's mpirun)
# and tests/cluster/test_container.py (under mpirun and srun across the
# virtual cluster's three hosts). As root, on Debian 12.
#   containers/ci.sh [--no-deps] [build.sh's options, e.g. --local-base or --pull]
# --no-deps: skip tools/install-deps.sh (a machine already set up).
# Prints the build's and each test step's time at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

deps=true
build_options=()
for a in "$@"; do
  if [[ $a == --no-deps ]]; then deps=false; else build_options+=("$a"); fi
done
# podman, debootstrap, runc and the venv the tests run in (pytest, jsonschema).
if $deps; then tools/install-deps.sh --containers; fi
python=.venv/bin/python
[[ -x $python ]] || { echo "containers/ci.sh: no $python (tools/install-deps.sh makes it)" >&2; exit 2; }

t0=$SECONDS
image=$(containers/build.sh "${build_options[@]}")
t_build=$((SECONDS - t0))
export IOTEST_IMAGE=$image
echo "containers/ci.sh: testing $IOTEST_IMAGE"

status=0
t1=$SECONDS
timeout 1800 "$python" -m pytest -q -rs -p no:cacheprovider tests/containers || status=1
t_image=$((SECONDS - t1))
t2=$SECONDS
timeout 1800 "$python" -m pytest -q -rs -p no:cacheprovider tests/cluster/test_container.py \
  || status=1
t_cluster=$((SECONDS - t2))
echo "containers/ci.sh: build ${t_build} s, tests/containers ${t_image} s," \
     "tests/cluster/test_container.py ${t_cluster} s: $([[ $status == 0 ]] && echo passed || echo FAILED)"
exit $status
