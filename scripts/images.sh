#!/usr/bin/env bash
# Stand-in images for a machine where no image registry answers.
#
# Builds, from Debian bookworm packages (mmdebstrap --variant=minbase, docker import, and a small
# Dockerfile from scripts/images/ on top), images tagged with the names that compose.yaml and the
# Dockerfile use by default, so that the real compose.yaml runs unchanged:
#   python    python:3.11-slim           python3 (3.11), python3-venv, ca-certificates
#   postgres  postgres:15                postgresql-15; the official image's environment
#   rabbitmq  rabbitmq:3.10-management   rabbitmq-server 3.10 with the management plugin
#   patroni   jobrelay-patroni:latest    postgresql-15, patroni 3.0, etcd-server and etcd-client
#                                        (the nodes and the etcd of compose.yaml's `ha` profile;
#                                        with a registry compose builds it from postgres:15)
# and downloads, on the host, the wheels of requirements/runtime.txt for the image's platform
# into wheels/ (the Dockerfile installs from there without an index when it holds wheels):
#   wheels
#
# Usage: scripts/images.sh [--force] [--fresh] [python|postgres|rabbitmq|patroni|wheels]...
#   (no names: all five)
#   An image that exists already is left alone, as are wheels downloaded for the current lock:
#   a re-run takes a second. --force rebuilds the images (from the cached Debian tarballs) and
#   downloads the wheels again; --fresh also rebuilds the tarballs from the Debian mirror.
#
# Environment:
#   PYTHON_IMAGE, JOBRELAY_POSTGRES_IMAGE, JOBRELAY_RABBITMQ_IMAGE, JOBRELAY_PATRONI_IMAGE   the
#       tags to build (default: python:3.11-slim, postgres:15, rabbitmq:3.10-management,
#       jobrelay-patroni:latest, as in compose.yaml)
#   JOBRELAY_IMAGES_DIR   where the mmdebstrap tarballs are cached (default: .local/images)
#   DEBIAN_SUITE          default bookworm
#   DEBIAN_MIRROR         default: mmdebstrap's own (deb.debian.org)
#   PYTHON                the host Python whose pip downloads the wheels (default: python3)
#
# Needs: root (or a user in the docker group who may run mmdebstrap), docker, mmdebstrap.
set -euo pipefail
shopt -s inherit_errexit

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"

IMAGES_DIR="${JOBRELAY_IMAGES_DIR:-$ROOT/.local/images}"
SUITE="${DEBIAN_SUITE:-bookworm}"
MIRROR="${DEBIAN_MIRROR:-}"
PYTHON="${PYTHON:-python3}"
WHEELS_DIR="$ROOT/wheels"
LOCK="$ROOT/requirements/runtime.txt"

declare -A TAG=(
    [python]="${PYTHON_IMAGE:-python:3.11-slim}"
    [postgres]="${JOBRELAY_POSTGRES_IMAGE:-postgres:15}"
    [rabbitmq]="${JOBRELAY_RABBITMQ_IMAGE:-rabbitmq:3.10-management}"
    [patroni]="${JOBRELAY_PATRONI_IMAGE:-jobrelay-patroni:latest}"
)
declare -A PACKAGES=(
    [python]="python3,python3-venv,python-is-python3,ca-certificates"
    [postgres]="postgresql-15,ca-certificates,xz-utils,zstd"
    [rabbitmq]="rabbitmq-server"
    [patroni]="postgresql-15,patroni,etcd-server,etcd-client,ca-certificates"
)

force=0
fresh=0
targets=()
for arg in "$@"; do
    case "$arg" in
        --force) force=1 ;;
        --fresh) force=1 fresh=1 ;;
        python | postgres | rabbitmq | patroni | wheels) targets+=("$arg") ;;
        -h | --help)
            sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
            exit 0
            ;;
        *)
            echo "images.sh: unknown argument: $arg (see --help)" >&2
            exit 2
            ;;
    esac
done
[ ${#targets[@]} -gt 0 ] || targets=(python postgres rabbitmq patroni wheels)

say() { printf 'images: %s\n' "$*" >&2; }

need() {
    command -v "$1" >/dev/null 2>&1 || {
        say "$1 is missing (apt-get install -y $2)"
        exit 1
    }
}

image_exists() { docker image inspect "$1" >/dev/null 2>&1; }

# A Debian root filesystem as a tarball, cached: the slow part (a download of the packages).
tarball() {
    local kind="$1" out="$IMAGES_DIR/$1-$SUITE.tar"
    if [ -s "$out" ] && [ "$fresh" = 0 ]; then
        echo "$out"
        return
    fi
    need mmdebstrap mmdebstrap
    mkdir -p "$IMAGES_DIR"
    say "$kind: mmdebstrap $SUITE (${PACKAGES[$kind]})"
    local hooks=()
    if [ "$kind" = postgres ] || [ "$kind" = patroni ]; then
        # The package creates a cluster "15/main"; the entrypoint (or Patroni) makes its own.
        hooks+=(--customize-hook='rm -rf "$1/var/lib/postgresql/15" "$1/etc/postgresql/15"')
    fi
    # No documentation or man pages, as in the official slim images (copyright files stay).
    mmdebstrap --quiet --variant=minbase --format=tar --include="${PACKAGES[$kind]}" \
        --dpkgopt=path-exclude=/usr/share/man/* \
        --dpkgopt=path-exclude=/usr/share/doc/* \
        --dpkgopt=path-include=/usr/share/doc/*/copyright \
        "${hooks[@]}" \
        "$SUITE" "$out.partial.tar" ${MIRROR:+"$MIRROR"} >&2
    mv "$out.partial.tar" "$out"
    echo "$out"
}

build_image() {
    local kind="$1" tag="${TAG[$1]}"
    if image_exists "$tag" && [ "$force" = 0 ]; then
        say "$kind: $tag exists (--force rebuilds it)"
        return
    fi
    need docker docker.io
    local started=$SECONDS tar base="jobrelay-stand-in/$kind-base:$SUITE"
    tar="$(tarball "$kind")"
    say "$kind: docker import $(basename "$tar") as $base"
    docker import "$tar" "$base" >/dev/null
    say "$kind: docker build $tag"
    local previous
    previous="$(docker image inspect --format '{{.Id}}' "$tag" 2>/dev/null || true)"
    docker build --quiet --build-arg "BASE=$base" -t "$tag" \
        -f "scripts/images/$kind.Dockerfile" scripts/images >/dev/null
    if [ -n "$previous" ] && [ "$previous" != "$(docker image inspect --format '{{.Id}}' "$tag")" ]
    then
        docker image rm "$previous" >/dev/null 2>&1 || true # still used by a container: kept
    fi
    say "$kind: $tag built in $((SECONDS - started))s"
}

# The Python tags pip accepts for the image: CPython 3.11 on x86_64 glibc up to 2.36
# (bookworm's), i.e. manylinux_2_17 ... manylinux_2_36 and the legacy manylinux names.
platform_args() {
    local minor
    for minor in $(seq 36 -1 17); do
        printf -- '--platform\nmanylinux_2_%s_x86_64\n' "$minor"
    done
    printf -- '--platform\n%s\n' manylinux2014_x86_64 manylinux2010_x86_64 manylinux1_x86_64
}

download_wheels() {
    local stamp="$IMAGES_DIR/wheels.lock.sha256" digest
    digest="$(sha256sum "$LOCK" | cut -d' ' -f1)"
    if [ "$force" = 0 ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$digest" ] &&
        compgen -G "$WHEELS_DIR/*.whl" >/dev/null; then
        say "wheels: wheels/ holds the wheels of the current lock (--force downloads again)"
        return
    fi
    local started=$SECONDS platforms
    mapfile -t platforms < <(platform_args)
    mkdir -p "$WHEELS_DIR" "$IMAGES_DIR"
    rm -f "$WHEELS_DIR"/*.whl "$stamp"
    say "wheels: pip download of requirements/runtime.txt (cp311, manylinux x86_64) into wheels/"
    "$PYTHON" -m pip download --quiet --disable-pip-version-check --no-cache-dir \
        --only-binary=:all: --implementation cp --python-version 3.11 --abi cp311 --abi abi3 \
        --abi none "${platforms[@]}" --require-hashes -r "$LOCK" -d "$WHEELS_DIR" >&2
    echo "$digest" >"$stamp"
    say "wheels: $(compgen -G "$WHEELS_DIR/*.whl" | wc -l) wheels in $((SECONDS - started))s"
}

for target in "${targets[@]}"; do
    case "$target" in
        wheels) download_wheels ;;
        *) build_image "$target" ;;
    esac
done
