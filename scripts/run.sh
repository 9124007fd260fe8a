#!/usr/bin/env bash
# `make run`: local servers, migrations, the demo client, then the three services.
# Ctrl-C stops all three; when one of them exits, the others are stopped too, with one line
# naming it. `make down` stops the servers and keeps their data, so the next `make run` finds
# the same jobs and the same demo client, whose token is kept in .local/demo-token (mode 0600;
# JOBRELAY_DEMO_TOKEN_FILE to move it).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
api_port=${JOBRELAY_API_PORT:-8000}

# A second `make run` (or anything else on the port) would otherwise start the servers and the
# services, then die on "[Errno 98] address already in use" with no hint of what to change.
if ! $PYTHON - "$api_port" <<'PY'
import socket
import sys

with socket.socket() as probe:
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        probe.bind(("127.0.0.1", int(sys.argv[1])))
    except OSError:
        sys.exit(1)
PY
then
    echo "make run: port $api_port is already in use (another make run?); stop it, or choose another port: JOBRELAY_API_PORT=8001 make run" >&2
    exit 1
fi

$PYTHON scripts/servers.py up >/dev/null
# shellcheck disable=SC1091
. "${JOBRELAY_SERVERS_DIR:-.local/servers}/env"
export JOBRELAY_RESULTS_DIR=${JOBRELAY_RESULTS_DIR:-.local/results}
# The demo types (demo.*, catalog.export) to try it with: off by default everywhere else.
export JOBRELAY_BUILTINS=${JOBRELAY_BUILTINS:-true}

$PYTHON -m jobrelay migrate
token_file=${JOBRELAY_DEMO_TOKEN_FILE:-.local/demo-token}

# The name of the enabled client whose current token is $1; nothing if there is none (the data
# was deleted, the client disabled or its token rotated).
client_of_token() {
    JOBRELAY_TOKEN="$1" $PYTHON - <<'PY'
import asyncio
import os

from jobrelay.core.fingerprint import token_hash
from jobrelay.core.settings import Settings
from jobrelay.db.client_store import ClientStore
from jobrelay.db.store import Store


async def main() -> None:
    store = Store.connect(Settings().database_url, pool_size=1, application_name="jobrelay-run")
    try:
        token = token_hash(os.environ["JOBRELAY_TOKEN"])
        client = await ClientStore(store).client_by_token_hash(token)
    finally:
        await store.close()
    if client is not None and client.valid_for_seconds is None:
        print(client.name)


asyncio.run(main())
PY
}

name=""
if [ -s "$token_file" ]; then
    token=$(head -n 1 "$token_file")
    name=$(client_of_token "$token")
fi
if [ -n "$name" ]; then
    about="the demo client '$name' (admin) again, its token from $token_file"
else
    name="demo-$(date +%Y%m%d-%H%M%S)"
    if ! token=$($PYTHON -m jobrelay clients create "$name" --admin 2>/dev/null); then
        echo "make run: could not create the demo client (jobrelay clients create $name)" >&2
        exit 1
    fi
    mkdir -p "$(dirname "$token_file")"
    (umask 077 && printf '%s\n' "$token" >"$token_file.tmp")
    mv -f "$token_file.tmp" "$token_file"
    about="a new demo client '$name' (admin); its token is kept in $token_file (mode 0600)"
fi
cat <<MSG

  jobrelay is starting: API on http://127.0.0.1:$api_port
  RabbitMQ management UI: ${JOBRELAY_RABBITMQ_API_URL}
  $about:

    export JOBRELAY_TOKEN=$token

  The CLI from another shell, on the same servers:

    . ${VIRTUAL_ENV:-.venv}/bin/activate && . ${JOBRELAY_SERVERS_DIR:-.local/servers}/env && export JOBRELAY_BUILTINS=$JOBRELAY_BUILTINS JOBRELAY_TOKEN=$token

  make down stops the servers and keeps their data; make down DELETE=1 deletes it.

MSG

pids=()
declare -A service_of=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT
# Ctrl-C (SIGINT to the whole foreground group): everything stops, quietly.
trap 'exit 130' INT TERM
launch() {
    $PYTHON -m jobrelay "$@" &
    pids+=($!)
    service_of[$!]=$1
}
if $PYTHON -m jobrelay dispatcher --help >/dev/null 2>&1; then
    launch dispatcher
fi
if $PYTHON -m jobrelay consumer --help >/dev/null 2>&1; then
    launch consumer
fi
launch api
# A service that dies must not leave the others running as if all were well (a dead consumer
# leaves every job queued): the first to exit stops the rest, and says which it was.
set +e
wait -n -p died "${pids[@]}"
status=$?
set -e
echo "make run: the ${service_of[$died]} exited (status $status); stopping the others" >&2
exit 1
