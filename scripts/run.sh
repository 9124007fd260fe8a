#!/usr/bin/env bash
# `make run`: throwaway servers, migrations, a demo client, then the three services.
# The API runs in the foreground; Ctrl-C stops all three. `make down` stops the servers.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}

$PYTHON scripts/servers.py up >/dev/null
# shellcheck disable=SC1091
. "${JOBRELAY_SERVERS_DIR:-.local/servers}/env"
export JOBRELAY_RESULTS_DIR=${JOBRELAY_RESULTS_DIR:-.local/results}

$PYTHON -m jobrelay migrate
name="demo-$(date +%Y%m%d-%H%M%S)"
token=$($PYTHON -m jobrelay clients create "$name" --admin 2>/dev/null)
cat <<MSG

  jobrelay is starting: API on http://127.0.0.1:${JOBRELAY_API_PORT:-8000}
  RabbitMQ management UI: ${JOBRELAY_RABBITMQ_API_URL}
  demo client '$name' (admin), token:

    export JOBRELAY_TOKEN=$token

MSG

pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM
if $PYTHON -m jobrelay dispatcher --help >/dev/null 2>&1; then
    $PYTHON -m jobrelay dispatcher & pids+=($!)
fi
if $PYTHON -m jobrelay consumer --help >/dev/null 2>&1; then
    $PYTHON -m jobrelay consumer & pids+=($!)
fi
$PYTHON -m jobrelay api
