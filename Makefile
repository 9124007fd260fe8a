# The targets the README names. Servers are local PostgreSQL and RabbitMQ instances that
# scripts/servers.py runs under .local/servers (installing the Debian packages if missing):
# `make run` keeps their data across `make down`; `make test` uses throwaway ones.
#
# The Python every target uses: the active virtual environment's when one is active (or PYTHON=…
# given), else .venv, which `make run` and `make test` create from the lock by themselves and
# bring up to date when the lock changes (the stamp .venv/.jobrelay-installed).
VENV ?= .venv
ifeq ($(origin PYTHON),undefined)
ifdef VIRTUAL_ENV
PYTHON := python3
else
PYTHON := $(abspath $(VENV))/bin/python
ENVIRONMENT := $(VENV)/.jobrelay-installed
# As if activated: commands the tests and scripts start (jobrelay, python) find the venv's.
export VIRTUAL_ENV := $(abspath $(VENV))
export PATH := $(VIRTUAL_ENV)/bin:$(PATH)
endif
endif
PYTEST_ARGS ?=
# scripts/servers.py needs only the standard library: `make down` works before any venv exists.
SCRIPT_PYTHON = $(if $(wildcard $(PYTHON)),$(PYTHON),python3)

.PHONY: install environment lock dist test-latest run test test-typescript typescript-types test-local test-local-integration test-local-others test-side-by-side test-pgbouncer test-python313 test-docker test-fast test-browser lint format typecheck servers down clean-data bench bench-storage bench-overload bench-cluster bench-durable bench-batch-handlers bench-footprint lock-bench-peers chaos chaos-cluster chaos-failover correctness chaos-partitions test-partitions clean bench-sequences

## install: exactly the locked versions (requirements/dev.txt), then jobrelay itself, editable
## (into the active virtual environment, else into .venv, made when missing)
install:
	@if [ -n "$(ENVIRONMENT)" ] && [ ! -x "$(PYTHON)" ]; then \
		echo "make: creating $(VENV) (no virtual environment is active)"; python3 -m venv $(VENV); fi
	$(PYTHON) -m pip install --require-hashes -r requirements/dev.txt
	$(PYTHON) -m pip install --no-deps --no-build-isolation -e .
	@if [ -n "$(ENVIRONMENT)" ]; then touch $(ENVIRONMENT); fi

## environment: nothing with an active virtual environment; else .venv from the lock, made once
## and again only when the lock or pyproject.toml changes
environment: $(ENVIRONMENT)

$(VENV)/.jobrelay-installed: requirements/dev.txt pyproject.toml
	@$(MAKE) --no-print-directory install PYTHON=$(PYTHON) ENVIRONMENT=$(ENVIRONMENT)

## lock: re-resolve requirements/*.txt from the ranges in pyproject.toml (uv pip compile)
UV ?= $(PYTHON) -m uv
LOCK_FLAGS = --universal --python-version 3.11 --generate-hashes --custom-compile-command 'make lock'
lock:
	$(UV) pip compile $(LOCK_FLAGS) pyproject.toml requirements/build.in -o requirements/runtime.txt
	$(UV) pip compile $(LOCK_FLAGS) --extra dev --extra bench --extra django -c requirements/runtime.txt \
		pyproject.toml requirements/build.in -o requirements/dev.txt

## dist: jobrelay's wheel and sdist in dist/ (uv build, with the locked setuptools: no index
## needed), the slim client's wheel (jobrelay-client, clients/python: a wheel only, its source
## is services/jobrelay_client), and dist/constraints.txt, the lock's versions to install them
## with (`pip install --find-links dist -c dist/constraints.txt 'jobrelay[django]'`, or
## `jobrelay-client`: docs/installing.md)
DIST ?= dist
dist: environment
	rm -f $(DIST)/jobrelay-*.whl $(DIST)/jobrelay-*.tar.gz $(DIST)/jobrelay_client-*.whl
	$(PYTHON) -m uv build --no-build-isolation --python $(PYTHON) --out-dir $(DIST) .
	$(PYTHON) -m uv build --wheel --no-build-isolation --python $(PYTHON) --out-dir $(DIST) clients/python
	$(PYTHON) scripts/lock_constraints.py requirements/dev.txt $(DIST)/constraints.txt

## test-latest: the suite against the newest versions the ranges allow, in a throwaway venv
LATEST_VENV ?= .local/venv-latest
test-latest: environment
	rm -rf $(LATEST_VENV) && $(PYTHON) -m venv $(LATEST_VENV)
	$(LATEST_VENV)/bin/python -m pip install -q --upgrade -e '.[dev,bench]'
	$(MAKE) test PYTHON=$(abspath $(LATEST_VENV))/bin/python

## run: servers + migrations + the demo client (its token kept in .local/demo-token and reused)
## + the demo types (JOBRELAY_BUILTINS=true, off by default elsewhere)
## + api, dispatcher and consumer in the foreground
run: environment
	PYTHON=$(PYTHON) bash scripts/run.sh

## test: every tier, two at a time (make -j2 --output-sync: each one's output printed whole when
## it ends), the longest first so that no long one starts last: the container tiers (the real
## compose.yaml, and the integration tier on testcontainers) where a Docker engine answers or CI
## is set (scripts/ci-docker.sh installs and starts one), elsewhere announced as not run, never
## passed silently; the suite but its integration tier; Python 3.13; PgBouncer; the integration
## tier. Each has servers of its own. The integration tier waits on its servers more than it
## computes, so two at a time on 2 cores take about half the time of one after the other. A
## lane that fails does not stop the others (--keep-going): every failure is shown in one run.
TEST_LANES = test-docker test-local-others test-python313 test-pgbouncer test-local-integration \
	test-typescript test-partitions
test: environment
	@echo "make: $(TEST_LANES), two at a time; each one's output follows when it ends"
	@$(MAKE) --no-print-directory --keep-going -j2 --output-sync=target $(TEST_LANES)

## test-local-integration and test-local-others: test-local in two halves, for `make test`
test-local-integration: environment
	JOBRELAY_SERVERS_DIR=$(abspath .local/servers-integration) \
		$(PYTHON) scripts/servers.py run -- $(PYTHON) -m pytest -p no:cacheprovider \
		tests/integration $(PYTEST_ARGS)

test-local-others: environment
	JOBRELAY_SERVERS_DIR=$(abspath .local/servers-others) \
		$(PYTHON) scripts/servers.py run -- $(PYTHON) -m pytest -p no:cacheprovider \
		--ignore=tests/containers --ignore=tests/integration \
		--ignore=tests/chaos/test_partitions_profile.py $(PYTEST_ARGS)

## test-partitions: the short partitions profile (tests/chaos/test_partitions_profile.py, ~4 min)
## on servers of its own whose RabbitMQ nodes live in network namespaces (root); a lane of its own:
## one such cluster per machine, and test-local-others leaves the test to it
test-partitions: environment
	JOBRELAY_SERVERS_DIR=$(abspath .local/servers-partitions) \
		$(PYTHON) scripts/servers.py run --rabbitmq-nodes 3 --rabbitmq-netns -- \
		$(PYTHON) -m pytest -p no:cacheprovider tests/chaos/test_partitions_profile.py $(PYTEST_ARGS)

## test-side-by-side: test-pgbouncer and test-python313 at once. The integration tier waits on
## its servers more than it computes: on 2 cores the two take about 8 minutes together, where
## one after the other took 17 to 22. Each has servers of its own (.local/servers-<tier>), and
## each one's output is printed whole when it ends (make --output-sync).
test-side-by-side: environment
	@echo "make: test-pgbouncer and test-python313 side by side; each one's output follows when it ends"
	@$(MAKE) --no-print-directory -j2 --output-sync=target test-pgbouncer test-python313

test-local: environment
	$(PYTHON) scripts/servers.py run -- $(PYTHON) -m pytest -p no:cacheprovider \
		--ignore=tests/containers $(PYTEST_ARGS)

## test-pgbouncer: the integration tier through a real PgBouncer in transaction pooling mode
## (docs/pgbouncer.md): JOBRELAY_DATABASE_URL goes through it, JOBRELAY_DIRECT_DATABASE_URL
## (admin work, and the few tests that need a session of their own) straight to PostgreSQL
test-pgbouncer: environment
	JOBRELAY_SERVERS_DIR=$(abspath .local/servers-pgbouncer) \
		$(PYTHON) scripts/servers.py run --pgbouncer -- $(PYTHON) -m pytest -p no:cacheprovider \
		tests/integration $(PYTEST_ARGS)

## test-python313: the unit and integration tiers on Python 3.13 too (Django 6 there, where 3.11
## runs the django-tasks backport on Django 5.2), in their own venv from the same lock. The
## interpreter: PYTHON313=…, else pyenv's newest 3.13, else python3.13 on the PATH.
PY313_VENV ?= .local/venv-3.13
PYTHON313 ?= $(or $(lastword $(sort $(wildcard $(HOME)/.pyenv/versions/3.13*/bin/python3.13))),python3.13)
# As if that venv were active: what the tests start (python, jobrelay, ruff) is its own.
test-python313: $(PY313_VENV)/.jobrelay-installed
	VIRTUAL_ENV=$(abspath $(PY313_VENV)) PATH=$(abspath $(PY313_VENV))/bin:$$PATH \
		JOBRELAY_SERVERS_DIR=$(abspath .local/servers-python313) \
		$(SCRIPT_PYTHON) scripts/servers.py run -- $(abspath $(PY313_VENV))/bin/python -m pytest \
		-p no:cacheprovider tests/unit tests/integration $(PYTEST_ARGS)

$(PY313_VENV)/.jobrelay-installed: requirements/dev.txt pyproject.toml
	@$(PYTHON313) -c 'import sys; assert sys.version_info[:2] == (3, 13), sys.version' || \
		{ echo "make: $(PYTHON313) is not Python 3.13: set PYTHON313=/path/to/python3.13"; exit 1; }
	rm -rf $(PY313_VENV) && $(PYTHON313) -m venv $(PY313_VENV)
	$(PY313_VENV)/bin/python -m pip install -q --require-hashes -r requirements/dev.txt
	$(PY313_VENV)/bin/python -m pip install -q --no-deps --no-build-isolation -e .
	touch $@

test-docker: environment
	@if [ -n "$$CI" ] || docker info >/dev/null 2>&1; then \
		$(MAKE) --no-print-directory -j1 compose-test test-containers; \
	else \
		echo "make test: NOT RUN: the container tiers (compose-test, test-containers) need a Docker engine: run scripts/ci-docker.sh as root, then make test-docker"; \
	fi

## test-typescript: clients/typescript's tests and examples/node_app's with Node's test runner
## (node --test) against jobrelay api, dispatcher and consumer on servers of their own
## (scripts/test_typescript.sh); node and npm are needed, a missing one fails
test-typescript: environment
	JOBRELAY_SERVERS_DIR=$(abspath .local/servers-typescript) PYTHON=$(PYTHON) \
		$(PYTHON) scripts/servers.py run -- bash scripts/test_typescript.sh

## typescript-types: the OpenAPI document from the app -> clients/typescript/openapi.json ->
## src/schema.d.ts (openapi-typescript, the lock's); tests/unit/test_typescript_client.py
## fails while they differ from the API
typescript-types: environment
	$(PYTHON) scripts/openapi_document.py clients/typescript/openapi.json
	cd clients/typescript && npm ci --no-audit --no-fund --loglevel=error && npm run types

## test-fast: unit tests only (no servers)
test-fast: environment
	$(PYTHON) -m pytest tests/unit -q

## test-browser: the console in headless Chromium (tests/browser; Debian's chromium package),
## screenshots in JOBRELAY_SCREENSHOTS_DIR (.local/screenshots/); test-local runs it too
test-browser: environment
	$(PYTHON) scripts/servers.py run -- $(PYTHON) -m pytest -p no:cacheprovider tests/browser \
		$(PYTEST_ARGS)

lint: environment
	$(PYTHON) -m ruff check services tests benchmarks scripts chaos checker examples
	$(PYTHON) -m ruff format --check services tests benchmarks scripts chaos checker examples
	$(PYTHON) -m mypy

format: environment
	$(PYTHON) -m ruff format services tests benchmarks scripts chaos checker examples
	$(PYTHON) -m ruff check --fix services tests benchmarks scripts chaos checker examples

typecheck: environment
	$(PYTHON) -m mypy

servers: environment
	$(PYTHON) scripts/servers.py up

## down: stop the servers, keeping their data (jobs, clients, queues) for the next `make run`;
## `make down DELETE=1` (or `make clean-data`) deletes it, saying what it deletes
DEMO_TOKEN = $(or $(JOBRELAY_DEMO_TOKEN_FILE),.local/demo-token)
down:
ifeq ($(DELETE),1)
	$(SCRIPT_PYTHON) scripts/servers.py down --delete-data
	@if [ -f "$(DEMO_TOKEN)" ]; then echo "deleting the demo client's token: $(DEMO_TOKEN)"; rm -f "$(DEMO_TOKEN)"; fi
else
	$(SCRIPT_PYTHON) scripts/servers.py down
endif

clean-data:
	$(MAKE) --no-print-directory down DELETE=1

## bench: every benchmark, each beside its baseline measured in the same run; then the peers that
## store every job's outcome too (Celery with its PostgreSQL result backend, procrastinate 3.10,
## DBOS 3.4.0: benchmarks/peers.py) beside e2e's jobrelay figures (its --json, in BENCH_E2E_JSON).
## procrastinate and DBOS run from .local/venv-peers, made from requirements/bench-peers.txt once.
BENCH_E2E_JSON ?= .local/bench/e2e.json
bench: environment
	$(PYTHON) scripts/servers.py run -- sh -c '$(PYTHON) -m benchmarks.submit && $(PYTHON) -m benchmarks.relay && $(PYTHON) -m benchmarks.e2e --json $(BENCH_E2E_JSON) && $(PYTHON) -m benchmarks.sequences --jobs 5000 --rounds 1 && $(PYTHON) -m benchmarks.peers --e2e-json $(BENCH_E2E_JSON)'

## bench-storage: empty database beside one holding STORAGE_JOBS finished jobs (docs/storage.md)
STORAGE_JOBS ?= 1000000
bench-storage: environment
	$(PYTHON) scripts/servers.py run -- $(PYTHON) -m benchmarks.storage --jobs $(STORAGE_JOBS)

## bench-overload: accepted jobs/s, shed/s and latency at 32/128/512 concurrent well-behaved
## clients, load shedding on and off, then the exactly-once check (benchmarks/overload.py).
## OVERLOAD_ARGS="--seconds 5 --levels 32,512" to vary.
OVERLOAD_ARGS ?=
bench-overload: environment
	$(PYTHON) scripts/servers.py run -- $(PYTHON) -m benchmarks.overload $(OVERLOAD_ARGS)

## bench-cluster: the relay and end-to-end benchmarks on a 3-node RabbitMQ cluster (quorum queues
## on every node) beside a single node, alternated per round; medians and cluster/single ratios
## (benchmarks/cluster.py). It starts its own two server sets and deletes them at the end.
## CLUSTER_BENCH_ARGS="--rounds 3 --e2e-jobs 5000" to vary.
CLUSTER_BENCH_ARGS ?=
bench-cluster: environment
	$(PYTHON) -m benchmarks.cluster $(CLUSTER_BENCH_ARGS)

## bench-durable: plain jobs beside jobs of one and of five steps, and DBOS 3.4.0's queue with one
## step per workflow, alternated per round: jobs/s, CPU ms per 1,000 jobs, the ratios
## (benchmarks/durable.py). DBOS runs from .local/venv-peers, made from
## requirements/bench-peers.txt when missing or older than the lock.
## DURABLE_BENCH_ARGS="--jobs 2000 --rounds 3 --variants plain,dbos" to vary.
DURABLE_BENCH_ARGS ?=
bench-durable: environment
	$(PYTHON) scripts/servers.py run -- $(PYTHON) -m benchmarks.durable $(DURABLE_BENCH_ARGS)

## bench-batch-handlers: the same work (a call to an external API: 5 ms per call + 0.05 ms per
## item) by a batch type of batch_size=100 beside one job per call, in the same run: jobs/s of
## each and the ratio (benchmarks/batch_handlers.py).
## BATCH_HANDLERS_BENCH_ARGS="--jobs 5000 --rounds 1" to vary.
BATCH_HANDLERS_BENCH_ARGS ?=
bench-batch-handlers: environment
	$(PYTHON) scripts/servers.py run -- $(PYTHON) -m benchmarks.batch_handlers $(BATCH_HANDLERS_BENCH_ARGS)

## bench-sequences: plain no-op jobs beside the same number over 1,000 sequence keys, submitted
## over HTTP then run end to end, alternated per round: accepted jobs/s, run jobs/s, CPU ms per
## 1,000 jobs of each phase and the ratios sequenced/plain (benchmarks/sequences.py; `make bench`
## runs one round of 5,000). SEQUENCES_BENCH_ARGS="--jobs 10000 --rounds 3" to vary.
SEQUENCES_BENCH_ARGS ?=
bench-sequences: environment
	$(PYTHON) scripts/servers.py run -- $(PYTHON) -m benchmarks.sequences $(SEQUENCES_BENCH_ARGS)

## bench-footprint: what a plain job's life writes in PostgreSQL, from outside: rows per table,
## WAL bytes, commits and the HOT share of its updates, over FOOTPRINT_JOBS jobs submitted
## through the API (benchmarks/footprint.py; FOOTPRINT_ARGS="--wal-detail" adds pg_waldump's view)
FOOTPRINT_JOBS ?= 2000
FOOTPRINT_ARGS ?=
bench-footprint: environment
	$(PYTHON) scripts/servers.py run -- $(PYTHON) -m benchmarks.footprint --jobs $(FOOTPRINT_JOBS) $(FOOTPRINT_ARGS)

## lock-bench-peers: re-resolve requirements/bench-peers.txt from requirements/bench-peers.in (DBOS
## and procrastinate, the peers of bench and bench-durable, locked apart from jobrelay: they are
## never installed beside it)
lock-bench-peers: environment
	$(UV) pip compile --universal --python-version 3.11 --generate-hashes \
		--custom-compile-command 'make lock-bench-peers' requirements/bench-peers.in -o requirements/bench-peers.txt

## chaos: the long chaos run (>=10,000 jobs, >=50 faults) on throwaway servers; prints one
## summary line, exits non-zero on any violation. CHAOS_ARGS="--profile short --seed 7" to vary.
CHAOS_ARGS ?= --profile long
chaos: environment
	$(PYTHON) scripts/servers.py run -- $(PYTHON) -m chaos $(CHAOS_ARGS)

## chaos-cluster: the same on a three-node RabbitMQ cluster (>=10,000 jobs, 36 node faults: stop,
## kill, pause one node at a time, plus process faults; docs/cluster.md)
CLUSTER_CHAOS_ARGS ?= --profile cluster
chaos-cluster: environment
	$(PYTHON) scripts/servers.py run --rabbitmq-nodes 3 -- $(PYTHON) -m chaos $(CLUSTER_CHAOS_ARGS)

## chaos-failover: PostgreSQL under Patroni (a primary and a synchronous standby): >=10,000 jobs,
## 12 primary faults (SIGKILL of its postmaster, SIGTERM of its Patroni, switchover), plus process
## faults (docs/failover.md). CHAOS_FAILOVER_HA=--postgres-ha-async for an asynchronous standby.
CHAOS_FAILOVER_ARGS ?= --profile pg-failover
CHAOS_FAILOVER_HA ?= --postgres-ha
chaos-failover: environment
	$(PYTHON) scripts/servers.py run $(CHAOS_FAILOVER_HA) -- $(PYTHON) -m chaos $(CHAOS_FAILOVER_ARGS)

## correctness: docs/correctness.md, each claim with its conditions, tests and last figures; runs
## the short profiles CI runs (short, pg-failover-short: ~8 min) on throwaway servers.
## CORRECTNESS_ARGS="--from FILE" feeds summary lines of long runs made by hand instead.
CORRECTNESS_ARGS ?=
correctness: environment
	$(PYTHON) scripts/servers.py run -- $(PYTHON) scripts/correctness.py $(CORRECTNESS_ARGS)

## chaos-partitions: a three-node RabbitMQ cluster in network namespaces (root; jr-rmq1..3 on the
## bridge jrbr0, 10.203.0.0/24, all torn down after) cut apart by Jepsen's scenarios (halves,
## random halves, majorities ring, a random node; 10 s and 30 s, each twice: 16 partitions) under
## 10,000 jobs; a line per scenario says what it cost in delay (docs/cluster.md "Partitions").
## PARTITIONS_ARGS='--profile partitions --seed 5' to vary; --profile partitions-short: 4 of them
PARTITIONS_ARGS ?= --profile partitions
chaos-partitions: environment
	$(PYTHON) scripts/servers.py run --rabbitmq-nodes 3 --rabbitmq-netns -- $(PYTHON) -m chaos $(PARTITIONS_ARGS)

## images: where no registry answers, stand-ins of python:3.11-slim, postgres:15 and
## rabbitmq:3.10-management from Debian packages, and the wheels of the lock in wheels/
## (scripts/images.sh; existing images are kept: IMAGES_ARGS=--force rebuilds them)
IMAGES_ARGS ?=
images: environment
	PYTHON=$(PYTHON) bash scripts/images.sh $(IMAGES_ARGS)

## compose-test: the real compose.yaml under Docker: build, 3 consumers, faults, every job
## checked, stop, down -v (tests/containers; builds missing stand-in images first)
compose-test: environment
	JOBRELAY_COMPOSE_TEST=1 $(PYTHON) -m pytest -p no:cacheprovider tests/containers -q -rs $(PYTEST_ARGS)

## test-containers: the integration tier against PostgreSQL and RabbitMQ from testcontainers;
## with the default image names, stand-ins are built first where they are missing
## (JOBRELAY_TEST_POSTGRES_IMAGE / JOBRELAY_TEST_RABBITMQ_IMAGE name other images)
test-containers: environment
	@if [ -z "$$JOBRELAY_TEST_POSTGRES_IMAGE$$JOBRELAY_TEST_RABBITMQ_IMAGE" ]; then \
		PYTHON=$(PYTHON) bash scripts/images.sh postgres rabbitmq; fi
	JOBRELAY_TEST_SERVERS=containers $(PYTHON) -m pytest -p no:cacheprovider tests/integration $(PYTEST_ARGS)

.PHONY: images compose-test test-containers

clean:
	$(SCRIPT_PYTHON) scripts/servers.py down --delete-data || true
	rm -rf .local build dist *.egg-info
