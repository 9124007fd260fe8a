#!/usr/bin/env bash
# `make test-typescript`, inside `scripts/servers.py run` (its servers' environment merged in):
# migrations, an admin client and its token, then jobrelay api, dispatcher and consumer with the
# demo types on a free port, then the TypeScript client's tests and examples/node_app's, both
# with Node's test runner against them. Exit status: the tests'. Without node or npm it fails
# (never a skip): .ci/run installs them on a fresh machine.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}

for tool in node npm; do
    if ! command -v "$tool" >/dev/null; then
        echo "make test-typescript: $tool is missing (Node 20 and npm: apt-get install nodejs npm)" >&2
        exit 1
    fi
done

logs=$(realpath -m "${JOBRELAY_TYPESCRIPT_LOGS:-.local/typescript}")
rm -rf "$logs" && mkdir -p "$logs"
export JOBRELAY_BUILTINS=true JOBRELAY_RESULTS_DIR="$logs/results"
port=$($PYTHON -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export JOBRELAY_API_PORT=$port JOBRELAY_API_URL="http://127.0.0.1:$port"

$PYTHON -m jobrelay migrate >"$logs/migrate.log" 2>&1
JOBRELAY_TOKEN=$($PYTHON -m jobrelay clients create "typescript-tests" --admin)
export JOBRELAY_TOKEN JOBRELAY_CLIENT_NAME=typescript-tests

pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT
for service in api dispatcher consumer; do
    $PYTHON -m jobrelay "$service" >"$logs/$service.log" 2>&1 &
    pids+=($!)
done
# Ready: /readyz answers 200 (database and broker reachable), within 30 s.
if ! $PYTHON - "$JOBRELAY_API_URL/readyz" <<'PY'
import sys
import time
import urllib.request

for _ in range(300):
    try:
        with urllib.request.urlopen(sys.argv[1], timeout=1) as answer:
            sys.exit(0 if answer.status == 200 else 1)
    except OSError:
        time.sleep(0.1)
sys.exit(1)
PY
then
    echo "make test-typescript: the API did not answer on $JOBRELAY_API_URL (logs in $logs)" >&2
    exit 1
fi

# The checked-in types are what openapi-typescript makes of the checked-in document (which
# tests/unit/test_typescript_client.py holds to the API's); then `npm test` compiles the client
# against them (tsc) before its tests.
types_drift() {
    npx openapi-typescript openapi.json -o "$logs/schema.d.ts" >/dev/null &&
        cmp -s src/schema.d.ts "$logs/schema.d.ts" ||
        { echo "make test-typescript: src/schema.d.ts is not generated from openapi.json: run make typescript-types" >&2; return 1; }
}
status=0
(cd clients/typescript && npm ci --no-audit --no-fund --loglevel=error && types_drift && npm test) || status=$?
(cd examples/node_app && npm ci --no-audit --no-fund --loglevel=error && npm test) || status=$?
if [ "$status" -ne 0 ]; then
    echo "make test-typescript: failed; the services' logs are in $logs" >&2
fi
exit "$status"
