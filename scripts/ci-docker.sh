#!/usr/bin/env bash
# A Docker engine for CI on Debian: installs docker.io, docker-compose and mmdebstrap when
# missing, and starts dockerd when none answers. Idempotent: a second run changes nothing.
#
# Usage: scripts/ci-docker.sh            (as root; the daemon's log: $DOCKERD_LOG)
# Environment: DOCKERD_LOG (default /tmp/dockerd.log), DOCKER_WAIT_SECONDS (default 60)
set -euo pipefail

DOCKERD_LOG="${DOCKERD_LOG:-/tmp/dockerd.log}"
WAIT="${DOCKER_WAIT_SECONDS:-60}"
say() { printf 'ci-docker: %s\n' "$*" >&2; }

missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v docker >/dev/null 2>&1 || missing+=(docker.io)
command -v docker-compose >/dev/null 2>&1 || docker compose version >/dev/null 2>&1 ||
    missing+=(docker-compose)
command -v mmdebstrap >/dev/null 2>&1 || missing+=(mmdebstrap)
if [ ${#missing[@]} -gt 0 ]; then
    mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
    say "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if docker info >/dev/null 2>&1; then
    say "a Docker engine answers ($(docker info --format '{{.ServerVersion}}'))"
    exit 0
fi
if [ -s /var/run/docker.pid ] && kill -0 "$(cat /var/run/docker.pid)" 2>/dev/null; then
    say "dockerd runs but does not answer yet; waiting"
else
    say "starting dockerd (log: $DOCKERD_LOG)"
    nohup dockerd >"$DOCKERD_LOG" 2>&1 &
fi
for _ in $(seq "$WAIT"); do
    if docker info >/dev/null 2>&1; then
        say "a Docker engine answers ($(docker info --format '{{.ServerVersion}}'))"
        exit 0
    fi
    sleep 1
done
say "dockerd did not answer within ${WAIT}s; the end of its log:"
tail -n 30 "$DOCKERD_LOG" >&2 || true
exit 1
