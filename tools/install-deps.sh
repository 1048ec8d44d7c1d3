#!/usr/bin/env bash
# Installs what iotest needs on a fresh Debian/Ubuntu machine: the Debian
# packages (apt-get, as root or through sudo) and the Python venv for the
# tests and tools. Idempotent: installs only what is missing.
#   tools/install-deps.sh [--libraries-only] [--mpich] [--containers] [--cuda] [--cluster]
#     --libraries-only  no venv: what a plain `cmake --preset release` needs
#     --mpich           also MPICH and its parallel HDF5, for `cmake --preset
#                       mpich` (beside Open MPI, which stays the default MPI)
#     --containers      also podman and debootstrap, for containers/build.sh
#     --cuda            also a CUDA toolkit from PyPI wheels in .venv (nvcc,
#                       runtime, cuFFT, CCCL: CUDA 13's, whose nvcc wheel
#                       holds the compiler), for `cmake --preset cuda
#                       -DIOTEST_CUDA_WHEELS=.venv` where no toolkit is
#                       installed (docs/gpu.md). The GPU driver is the
#                       system's.
#     --cluster         what tools/cluster needs (also without
#                       --libraries-only): Slurm, munge, iproute2 and, for
#                       `up --storage=cephfs`, Debian's Ceph (monitor,
#                       manager, OSD, metadata server, ceph-fuse and the
#                       ceph CLI), fio (bench/cephfs.sh's peer) and, for
#                       `up --object-gateway`, Ceph's object gateway
#                       (radosgw) and rclone (an S3 client to check it with)
# Without --libraries-only it also installs what tools/cluster (the virtual
# cluster the tests run jobs on) needs: Slurm, munge and iproute2; and the
# peers bench/ compares with: fio (the storage scripts), mpi4py for the
# system python3 (bench/net_osu.sh's stand-in for OSU), and casacore-tools
# and WSClean (the MeasurementSet checks, bench/wsclean.sh).
set -euo pipefail
libraries_only=false mpich=false containers=false cuda=false cluster=false
for option in "$@"; do
  case $option in
    --libraries-only) libraries_only=true ;;
    --mpich) mpich=true ;;
    --containers) containers=true ;;
    --cuda) cuda=true ;;
    --cluster) cluster=true ;;
    *) echo "tools/install-deps.sh: unknown option '$option' (expected --libraries-only, --mpich, --containers, --cuda or --cluster)" >&2; exit 2 ;;
  esac
done
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build pkg-config
  libfftw3-dev liblapacke-dev libhdf5-dev libhdf5-openmpi-dev libisal-dev libcfitsio-dev
  casacore-dev
  libcli11-dev libfmt-dev nlohmann-json3-dev libgtest-dev
  libcurl4-openssl-dev libxml2-dev
  openmpi-bin libopenmpi-dev
  python3 python3-venv
)
# casacore-tools (taql, showtableinfo) and WSClean, the field's imager: the
# tests and bench/wsclean.sh hold iotest's MeasurementSets and images
# against them.
$libraries_only || packages+=(fio python3-mpi4py casacore-tools wsclean)
# The virtual cluster (tools/cluster): Slurm, munge, iproute2's ip and tc,
# a real CephFS for `up --storage=cephfs`, and Ceph's object gateway with
# rclone for `up --object-gateway` (docs/cluster.md).
if ! $libraries_only || $cluster; then
  packages+=(slurm-wlm munge iproute2 fio
             ceph-mon ceph-mgr ceph-osd ceph-mds ceph-fuse ceph-common radosgw rclone)
fi
# Debian ranks Open MPI's alternatives (mpirun, mpicc, h5pcc) above MPICH's,
# so installing MPICH beside it changes no default: the mpich preset names
# MPICH's own wrappers.
$mpich && packages+=(mpich libmpich-dev libhdf5-mpich-dev)
# podman with runc (crun refuses hybrid cgroups, as on this project's VM)
# and netavark for its networks, whose firewall driver runs iptables (a
# recommendation of netavark's, which --no-install-recommends leaves out:
# without it a container on podman's default network ends with "netavark:
# No such file or directory"); debootstrap makes the Debian base where no
# registry is reachable (containers/build.sh, docs/containers.md).
$containers && packages+=(podman runc netavark aardvark-dns iptables debootstrap)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing Debian packages: ${missing[*]}"
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

venv=.venv
if $cuda; then
  # CUDA 12's wheels (nvidia-cuda-nvcc-cu12 ...) hold no nvcc driver, so
  # nothing compiles from them; CUDA 13's unpack into one toolkit,
  # .venv/lib/pythonX.Y/site-packages/nvidia/cu13 (cmake/IotestCudaWheels.cmake).
  [[ -x $venv/bin/python ]] || python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check \
    nvidia-cuda-nvcc nvidia-cuda-runtime nvidia-cufft nvidia-cuda-cccl
  echo "CUDA wheels in $venv: cmake --preset cuda -DIOTEST_CUDA_WHEELS=$PWD/$venv"
fi

$libraries_only && exit 0

if [[ ! -x $venv/bin/python ]]; then
  python3 -m venv "$venv"
fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check -r requirements.txt
