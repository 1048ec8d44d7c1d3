#!/usr/bin/env bash
# Builds the iotest image (containers/Dockerfile) with podman, as root.
#
#   containers/build.sh [--pull | --local-base] [--rebuild-base] [--force]
#                       [--arch=generic|x86-64-v3|native] [--cuda[=ARCHS]]
#                       [--tag=NAME] [--oci-archive=FILE] [--quiet]
#
# The base image (debian:bookworm-slim):
#   default       the registry's (docker.io/library/debian:bookworm-slim) when
#                 docker.io answers, else a local one (below)
#   --pull        the registry's, and fail if it cannot be pulled
#   --local-base  a local base, made once by debootstrap (minbase) from the
#                 Debian archive and imported as localhost/debian:bookworm-slim;
#                 later builds reuse it (--rebuild-base makes it again)
# The image is tagged localhost/iotest:tree-HASH (HASH: the build context's
# files, so an unchanged tree is not built twice; --force rebuilds) and
# localhost/iotest:latest. Its name is the last line of stdout.
# --cuda[=ARCHS] builds the CUDA flavour: the GPU path (--device=cuda) with
# the CUDA toolkit from PyPI's wheels, for CUDA architectures ARCHS (default
# 90: H100, H200; "80;90" adds A100), tagged cuda-tree-HASH and
# localhost/iotest:cuda (docs/gpu.md).
# --oci-archive=FILE saves it as an OCI archive, for Apptainer:
#   apptainer build iotest.sif oci-archive://FILE
#
# Environment: PIP_CERT, pip's CA bundle, lent to the CUDA flavour's pip
# where HTTPS passes through a proxy with its own CA; IOTEST_PODMAN_ARGS, podman's global options for every call
# (e.g. "--storage-driver=vfs --root=/var/lib/iotest-vfs" where overlay
# cannot mount; containers/podman.sh adds what this machine needs);
# IOTEST_DEBIAN_MIRROR (http://deb.debian.org/debian).
# docs/containers.md is the guide.
set -euo pipefail

prog=containers/build.sh
repo=$(cd "$(dirname "$0")/.." && pwd)
base_mode=auto
rebuild_base=false
force=false
arch=generic
tag=""
oci_archive=""
cuda=""
quiet=false
mirror=${IOTEST_DEBIAN_MIRROR:-http://deb.debian.org/debian}
registry_base=docker.io/library/debian:bookworm-slim
local_base=localhost/debian:bookworm-slim

die() { echo "$prog: $*" >&2; exit 2; }
say() { $quiet || echo "$prog: $*" >&2; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

for a in "$@"; do
  case $a in
    --pull) base_mode=registry ;;
    --local-base) base_mode=local ;;
    --rebuild-base) rebuild_base=true ;;
    --force) force=true ;;
    --arch=*) arch=${a#*=} ;;
    --cuda) cuda=90 ;;
    --cuda=*) cuda=${a#*=} ;;
    --tag=*) tag=${a#*=} ;;
    --oci-archive=*) oci_archive=${a#*=} ;;
    --quiet) quiet=true ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown option '$a' (see $prog --help)" ;;
  esac
done
case $arch in generic|x86-64-v3|native) ;; *) die "--arch: expected generic, x86-64-v3 or native, got '$arch'" ;; esac
[[ -z $cuda || $cuda =~ ^[0-9]+(\;[0-9]+)*$ ]] || die "--cuda: expected CUDA architectures like 90 or '80;90', got '$cuda'"
[[ -z $oci_archive || -d $(dirname "$oci_archive") ]] || die "--oci-archive: no folder $(dirname "$oci_archive")"

# ---- What it needs ----------------------------------------------------------
[[ $(id -u) -eq 0 ]] || die "needs root (podman's root storage; debootstrap for the local base)"
missing=()
command -v podman >/dev/null || missing+=(podman)
[[ $base_mode == registry ]] || command -v debootstrap >/dev/null || missing+=(debootstrap)
if ((${#missing[@]})); then
  die "${missing[*]} not found: install with tools/install-deps.sh --containers" \
      "(Debian: apt-get install podman debootstrap runc netavark aardvark-dns)"
fi
# podman with this machine's runtime and limits (containers/podman.sh).
podman=("$repo/containers/podman.sh")
if ! info=$(timeout 120 "${podman[@]}" info --format '{{.Store.GraphDriverName}} {{.Host.OCIRuntime.Name}}' 2>&1); then
  die "podman does not work here: ${info##*$'\n'}" \
      "(where overlay cannot mount, try IOTEST_PODMAN_ARGS='--storage-driver=vfs --root=/var/lib/iotest-vfs')"
fi
say "podman $(podman --version | awk '{print $3}'), storage ${info% *}, runtime ${info#* }"

# ---- The image's name: the build context's state ----------------------------
# Files as the build sees them: git's tracked and untracked-but-not-ignored
# files (.gitignore and .dockerignore leave out the same trees), else every
# file but those .dockerignore names.
context_files() {
  cd "$repo"
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files -z -c -o --exclude-standard
  else
    find . \( -name .git -o -name '.venv' -o -name 'build*' -o -path ./out -o -path ./bench/out \
              -o -name __pycache__ -o -name .pytest_cache \) -prune -o -type f ! -name '*.pyc' -print0
  fi | sort -z | while IFS= read -r -d '' f; do [[ -f $f ]] && printf '%s\0' "$f"; done
}
tree_hash=$( (cd "$repo" && context_files | xargs -0 -r sha256sum; echo "arch=$arch cuda=$cuda") \
             | sha256sum | cut -c1-12)
suffix=tree-$tree_hash
[[ $arch == generic ]] || suffix=$arch-$suffix
[[ -z $cuda ]] || suffix=cuda-$suffix
latest=localhost/iotest:latest
[[ -z $cuda ]] || latest=localhost/iotest:cuda
image=${tag:-localhost/iotest:$suffix}

save_archive() {
  [[ -n $oci_archive ]] || return 0
  say "saving $image to $oci_archive (OCI archive)"
  rm -f "$oci_archive"
  timeout 900 "${podman[@]}" save --format oci-archive -o "$oci_archive" "$image" >&2
  say "Apptainer: apptainer build iotest.sif oci-archive://$oci_archive"
}

if ! $force && "${podman[@]}" image exists "$image"; then
  say "$image is already built from this tree (--force rebuilds it)"
  save_archive
  echo "$image"
  exit 0
fi

# ---- The base ---------------------------------------------------------------
registry_answers() {
  # A TCP connection to Docker Hub's registry, in a few seconds (no curl
  # needed); a proxy-only network says no here: use --pull there.
  timeout 5 bash -c ': </dev/tcp/registry-1.docker.io/443' 2>/dev/null
}

make_local_base() {
  local dir
  dir=$(mktemp -d /var/tmp/iotest-debootstrap.XXXXXX)
  # The target's own /proc and /sys mounts are undone by debootstrap; the
  # folder goes whatever happens.
  trap 'rm -rf --one-file-system "$dir"' EXIT
  say "making $local_base: debootstrap --variant=minbase bookworm from $mirror (a minute or two)"
  if ! debootstrap --variant=minbase --components=main bookworm "$dir" "$mirror" \
        >"$dir.log" 2>&1; then
    tail -20 "$dir.log" >&2
    die "debootstrap failed (log above, whole in $dir.log)"
  fi
  rm -f "$dir.log"
  # apt inside: the three suites the registry's image lists, as a deb822
  # file, instead of debootstrap's one-line sources.list.
  rm -f "$dir/etc/apt/sources.list"
  cat >"$dir/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: ${mirror}
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: ${mirror%/debian}/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  # As a slim image: no documentation, manual pages or translations from
  # later installs; apt keeps no .deb files; no service starts in a build.
  cat >"$dir/etc/dpkg/dpkg.cfg.d/iotest-slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/locale/*
EOF
  cat >"$dir/etc/apt/apt.conf.d/iotest-slim" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/*.bin || true"; };
Acquire::Languages "none";
EOF
  printf '#!/bin/sh\nexit 101\n' >"$dir/usr/sbin/policy-rc.d"
  chmod 755 "$dir/usr/sbin/policy-rc.d"
  chroot "$dir" apt-get clean
  rm -rf "$dir"/var/lib/apt/lists/* "$dir"/var/cache/apt/*.bin "$dir"/var/log/*.log \
         "$dir"/var/log/apt/* "$dir"/tmp/* "$dir"/etc/resolv.conf "$dir"/etc/hostname
  : >"$dir/etc/machine-id"
  # An imported image has no configuration: give it the registry image's
  # PATH (the Dockerfile's ENV PATH extends it) and command.
  tar --numeric-owner -C "$dir" -c . |
    "${podman[@]}" import \
      --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change 'CMD ["bash"]' \
      --message "debootstrap --variant=minbase bookworm $mirror ($(date -u +%F))" \
      - "$local_base" >/dev/null
  rm -rf --one-file-system "$dir"
  trap - EXIT
  say "$local_base: $("${podman[@]}" image inspect --format '{{.Size}}' "$local_base" | numfmt --to=iec) imported"
}

if [[ $base_mode == auto ]]; then
  if registry_answers; then base_mode=registry; else base_mode=local; fi
  say "base: docker.io $([[ $base_mode == registry ]] && echo answers || echo "does not answer: a local base")"
fi
t0=$SECONDS
if [[ $base_mode == registry ]]; then
  base=$registry_base
  say "pulling $base"
  timeout 600 "${podman[@]}" pull -q "$base" >/dev/null || die "cannot pull $base (no registry? --local-base)"
else
  base=$local_base
  if $rebuild_base || ! "${podman[@]}" image exists "$base"; then
    make_local_base
  else
    say "reusing $base ($("${podman[@]}" image inspect --format '{{.Created}}' "$base" | cut -d' ' -f1-2))"
  fi
fi
t_base=$((SECONDS - t0))
# Can podman run a container at all here (runtime, cgroups, limits)?
if ! out=$(timeout 120 "${podman[@]}" run --rm --network=none "$base" true 2>&1); then
  die "podman cannot run a container here: ${out##*$'\n'}" \
      "(hybrid cgroups need runc: apt-get install runc; see docs/containers.md)"
fi

# ---- The image --------------------------------------------------------------
# --network=host: apt-get inside the build reaches the archive through the
# host's network as it is (no bridge, no NAT rules needed). --pull=never:
# the base is local by now.
revision=$(git -C "$repo" describe --always --dirty --abbrev=12 2>/dev/null || echo unknown)
say "building $image (IOTEST_ARCH=$arch${cuda:+, CUDA for sm_$cuda}, base $base, revision $revision)"
t1=$SECONDS
build=("${podman[@]}" build --network=host --pull=never --layers
       -f "$repo/containers/Dockerfile"
       --build-arg "DEBIAN_IMAGE=$base" --build-arg "IOTEST_ARCH=$arch"
       --build-arg "IOTEST_CUDA=$([[ -n $cuda ]] && echo ON || echo OFF)"
       --build-arg "CUDA_ARCHITECTURES=${cuda:-90}" --build-arg "IOTEST_REVISION=$revision"
       --label "org.opencontainers.image.revision=$revision"
       --label "iotest.tree=$tree_hash" --label "iotest.base=$base"
       -t "$image" -t "$latest" "$repo")
if [[ -n $cuda && -n ${PIP_CERT:-} && -f $PIP_CERT ]]; then
  build=("${build[@]:0:${#build[@]}-1}" --volume "$PIP_CERT:/run/iotest-pip-cert.pem:ro"
         --build-arg IOTEST_PIP_CERT=/run/iotest-pip-cert.pem "$repo")
fi
if $quiet; then
  log=$(mktemp /var/tmp/iotest-build.XXXXXX.log)
  if ! timeout 3600 "${build[@]}" >"$log" 2>&1; then
    tail -40 "$log" >&2
    die "podman build failed (log above, whole in $log)"
  fi
  rm -f "$log"
else
  timeout 3600 "${build[@]}" >&2 || die "podman build failed"
fi
t_build=$((SECONDS - t1))
version=$(timeout 60 "${podman[@]}" run --rm --network=none "$image" iotest --version)
say "built $image in ${t_build} s (base ${t_base} s): $version"
say "size $("${podman[@]}" image inspect --format '{{.Size}}' "$image" | numfmt --to=iec)"
save_archive
echo "$image"
