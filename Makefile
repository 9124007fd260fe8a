# The targets the README names. Servers are throwaway PostgreSQL and RabbitMQ instances that
# scripts/servers.py runs under .local/servers (installing the Debian packages if missing).
PYTHON ?= python3
PYTEST_ARGS ?=

.PHONY: install run test test-fast lint format typecheck servers down bench chaos clean

install:
	$(PYTHON) -m pip install -e '.[dev,bench]'

## run: servers + migrations + a demo client + api, dispatcher and consumer in the foreground
run:
	bash scripts/run.sh

## test: the whole suite against throwaway servers started for the run and torn down after it
test:
	$(PYTHON) scripts/servers.py run -- $(PYTHON) -m pytest -p no:cacheprovider $(PYTEST_ARGS)

## test-fast: unit tests only (no servers)
test-fast:
	$(PYTHON) -m pytest tests/unit -q

lint:
	ruff check services tests alembic benchmarks scripts chaos
	ruff format --check services tests alembic benchmarks scripts chaos
	mypy

format:
	ruff format services tests alembic benchmarks scripts chaos
	ruff check --fix services tests alembic benchmarks scripts chaos

typecheck:
	mypy

servers:
	$(PYTHON) scripts/servers.py up

down:
	$(PYTHON) scripts/servers.py down

## bench: every benchmark, each beside its baseline measured in the same run
bench:
	$(PYTHON) scripts/servers.py run -- sh -c '$(PYTHON) -m benchmarks.submit && $(PYTHON) -m benchmarks.relay && $(PYTHON) -m benchmarks.e2e'

## chaos: the long chaos run (>=10,000 jobs, >=50 faults) on throwaway servers; prints one
## summary line, exits non-zero on any violation. CHAOS_ARGS="--profile short --seed 7" to vary.
CHAOS_ARGS ?= --profile long
chaos:
	$(PYTHON) scripts/servers.py run -- $(PYTHON) -m chaos $(CHAOS_ARGS)

clean:
	$(PYTHON) scripts/servers.py down || true
	rm -rf .local build *.egg-info
