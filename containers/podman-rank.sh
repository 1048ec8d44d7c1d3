#!/usr/bin/env bash
# One MPI rank in a podman container, started by the host's launcher (the
# hybrid model: the host's mpirun or srun starts this once per rank, and the
# Open MPI inside the image talks to that launcher through PMIx):
#
#   mpirun -np 3 containers/podman-rank.sh iotest --rec-set=T05_ ... out/vis%d.h5
#   srun --mpi=pmix -n 3 containers/podman-rank.sh iotest --rec-set=T05_ ...
#
# The container shares the host's network, IPC (/dev/shm), PID and UTS
# namespaces (TCP and shared memory between ranks as without a container;
# the host name, which iotest reports and %h expands, is the host's), runs
# as the caller's user and group (PMIx accepts only its own user), and
# gets the launcher's variables (OMPI_*, PMIX_*, OPAL_*, SLURM_*, OMP_*).
# Bound in at their own paths: /tmp (Open MPI's session folder), the
# folders PMIx names (PMIX_SERVER_TMPDIR, PMIX_SYSTEM_TMPDIR), $TMPDIR,
# the working folder (it is the container's too) and IOTEST_CONTAINER_BINDS
# (colon-separated folders, e.g. the node-local disk).
#
# IOTEST_IMAGE: the image (localhost/iotest:latest). IOTEST_PODMAN_ARGS:
# podman's global options, as for containers/build.sh (podman runs through
# containers/podman.sh, which adds what this machine needs). The container is
# named ${IOTEST_CONTAINER_PREFIX:-iotest-rank}-JOB-RANK, so that a job's
# leftovers can be removed by name (podman rm -f) if the launcher killed
# podman itself. Needs the Open MPI of the image (4.1) on the host: the
# same major version, as Debian 12's is. docs/containers.md is the guide.
set -euo pipefail
(($#)) || { echo "containers/podman-rank.sh: expected a command (iotest ...)" >&2; exit 2; }

image=${IOTEST_IMAGE:-localhost/iotest:latest}
# The job and the rank, from Open MPI's launcher, PMIx or Slurm.
job=${OMPI_MCA_orte_ess_jobid:-${PMIX_NAMESPACE:-${SLURM_JOB_ID:+$SLURM_JOB_ID.${SLURM_STEP_ID:-0}}}}
rank=${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-${SLURM_PROCID:-$$}}}
name="${IOTEST_CONTAINER_PREFIX:-iotest-rank}-${job:-$$}-$rank"
name=$(printf '%s' "$name" | tr -c 'a-zA-Z0-9_.-' '_')

binds=(/tmp "$PWD")
for d in "${PMIX_SERVER_TMPDIR:-}" "${PMIX_SYSTEM_TMPDIR:-}" "${TMPDIR:-}"; do
  [[ -n $d && -d $d ]] && binds+=("$d")
done
IFS=: read -r -a extra <<<"${IOTEST_CONTAINER_BINDS:-}"
for d in "${extra[@]}"; do [[ -n $d ]] && binds+=("$d"); done
mounts=()
declare -A seen=()
for d in "${binds[@]}"; do
  d=$(realpath -m "$d")
  [[ -n ${seen[$d]:-} ]] || mounts+=(-v "$d:$d")  # podman refuses a destination twice
  seen[$d]=1
done

exec "$(dirname "$0")/podman.sh" run --rm --name "$name" \
  --network=host --ipc=host --pid=host --uts=host \
  --user "$(id -u):$(id -g)" --workdir "$PWD" "${mounts[@]}" \
  --env 'OMPI_*' --env 'PMIX_*' --env 'OPAL_*' --env 'SLURM_*' --env 'OMP_*' \
  "$image" "$@"
