#!/usr/bin/env bash
# Installs what iotest needs on a fresh Debian/Ubuntu machine: the Debian
# packages (apt-get, as root or through sudo) and the Python venv for the
# tests and tools. Idempotent: installs only what is missing.
#   tools/install-deps.sh [--libraries-only]   (no venv: what a plain
#                                               `cmake --preset release` needs)
# Without --libraries-only it also installs what tools/cluster (the virtual
# cluster the tests run jobs on) needs: Slurm, munge and iproute2; and the
# peers bench/ compares with: fio (the storage scripts) and mpi4py for the
# system python3 (bench/net_osu.sh's stand-in for OSU).
set -euo pipefail
libraries_only=false
[[ ${1:-} == --libraries-only ]] && libraries_only=true
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build pkg-config
  libfftw3-dev liblapacke-dev libhdf5-dev libhdf5-openmpi-dev libisal-dev
  libcli11-dev libfmt-dev nlohmann-json3-dev libgtest-dev
  openmpi-bin libopenmpi-dev
  python3 python3-venv
)
$libraries_only || packages+=(slurm-wlm munge iproute2 fio python3-mpi4py)
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

$libraries_only && exit 0

venv=.venv
if [[ ! -x $venv/bin/python ]]; then
  python3 -m venv "$venv"
fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check -r requirements.txt
