#!/usr/bin/env bash
# podman as iotest's container scripts and tests call it: `podman ARGS...`
# with what this machine needs and podman does not find out by itself.
#
#   containers/podman.sh run --rm localhost/iotest:latest iotest --version
#
# - IOTEST_PODMAN_ARGS: global options first (e.g. "--storage-driver=vfs
#   --root=/var/lib/iotest-vfs" where overlay cannot mount).
# - Hybrid cgroups (cgroup v1 controllers with an empty cgroup2 at
#   /sys/fs/cgroup/unified): crun refuses ("cgroups in hybrid mode not
#   supported"), so runc runs the containers (--runtime=runc), unless
#   IOTEST_PODMAN_ARGS names a runtime.
# - Root without CAP_SYS_RESOURCE (some VMs and nested containers) cannot
#   raise a hard limit, and podman's defaults for containers (1048576 open
#   files, 4194304 processes) are above this machine's: run, create and
#   build get the caller's hard limits instead (podman's own process limit
#   is at most 32768 there).
set -euo pipefail

# shellcheck disable=SC2206  # global options, split on purpose
global=(${IOTEST_PODMAN_ARGS:-})
if [[ " ${IOTEST_PODMAN_ARGS:-} " != *" --runtime"* ]] \
   && [[ $(stat -f -c %T /sys/fs/cgroup 2>/dev/null) == tmpfs ]] \
   && [[ $(stat -f -c %T /sys/fs/cgroup/unified 2>/dev/null) == cgroup2fs ]] \
   && command -v runc >/dev/null; then
  global+=(--runtime=runc)
fi

limits=()
cap_eff=$(awk '/^CapEff:/ {print $2}' /proc/self/status)
if (( ((16#$cap_eff) >> 24 & 1) == 0 )); then  # CAP_SYS_RESOURCE
  nofile=$(ulimit -Hn)
  nproc=$(ulimit -Hu)
  [[ $nofile == unlimited || $nofile -gt 1048576 ]] && nofile=1048576
  [[ $nproc == unlimited || $nproc -gt 32768 ]] && nproc=32768
  limits=(--ulimit "nofile=$nofile:$nofile" --ulimit "nproc=$nproc:$nproc")
fi

case ${1:-} in
  run|create|build) exec podman "${global[@]}" "$1" "${limits[@]}" "${@:2}" ;;
  *) exec podman "${global[@]}" "$@" ;;
esac
