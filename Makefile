# The targets the README names. Servers are throwaway PostgreSQL and RabbitMQ instances that
# scripts/servers.py runs under .local/servers (installing the Debian packages if missing).
PYTHON ?= python3
PYTEST_ARGS ?=

.PHONY: install lock test-latest run test test-fast lint format typecheck servers down bench chaos clean

## install: exactly the locked versions (requirements/dev.txt), then jobrelay itself, editable
install:
	$(PYTHON) -m pip install --require-hashes -r requirements/dev.txt
	$(PYTHON) -m pip install --no-deps --no-build-isolation -e .

## lock: re-resolve requirements/*.txt from the ranges in pyproject.toml (uv pip compile)
UV ?= $(PYTHON) -m uv
LOCK_FLAGS = --universal --python-version 3.11 --generate-hashes --custom-compile-command 'make lock'
lock:
	$(UV) pip compile $(LOCK_FLAGS) pyproject.toml requirements/build.in -o requirements/runtime.txt
	$(UV) pip compile $(LOCK_FLAGS) --extra dev --extra bench -c requirements/runtime.txt \
		pyproject.toml requirements/build.in -o requirements/dev.txt

## test-latest: the suite against the newest versions the ranges allow, in a throwaway venv
LATEST_VENV ?= .local/venv-latest
test-latest:
	rm -rf $(LATEST_VENV) && $(PYTHON) -m venv $(LATEST_VENV)
	$(LATEST_VENV)/bin/python -m pip install -q --upgrade -e '.[dev,bench]'
	$(MAKE) test PYTHON=$(abspath $(LATEST_VENV))/bin/python

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
	ruff check services tests benchmarks scripts chaos
	ruff format --check services tests benchmarks scripts chaos
	mypy

format:
	ruff format services tests benchmarks scripts chaos
	ruff check --fix services tests benchmarks scripts chaos

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
