"""DBOS's side of ``benchmarks/durable.py`` (a workflow of one step on a DBOS queue) and of
``benchmarks/peers.py`` (a workflow of no step, the no-op). Run by the python of
``.local/venv-peers`` (DBOS 3.4.0 from the peers' own lock, ``requirements/bench-peers.txt``),
which has no jobrelay: this file imports the standard library and DBOS only.

    python benchmarks/_dbos_app.py prepare SYSTEM_DATABASE_URL CONCURRENCY POLL_SECONDS
    python benchmarks/_dbos_app.py enqueue SYSTEM_DATABASE_URL N PREFIX [one_step|noop]
    python benchmarks/_dbos_app.py work SYSTEM_DATABASE_URL CONCURRENCY POLL_SECONDS

``prepare`` creates DBOS's tables and the queue's row. ``enqueue`` puts N workflows (of one step
by default) on the queue
through ``DBOSClient`` (no worker runs them yet), under the worker's application name and
version: a DBOS worker dequeues only workflows of its own application version. ``work`` launches
DBOS with the queue registered (``worker_concurrency`` CONCURRENCY, polled every POLL_SECONDS:
the default, 1 s, would measure the poll) and runs until SIGTERM; ``benchmarks/durable.py``
counts the finished workflows in ``dbos.workflow_status``.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

from dbos import DBOS, DBOSClient, DBOSConfig

NAME = "jobrelay-bench"
VERSION = "bench-1"
QUEUE = "bench"
WORKFLOWS = {"one_step": "bench_one_step", "noop": "bench_noop"}


@DBOS.step(name="bench_step")
def one() -> int:
    """The step: nothing, its return value recorded (as jobrelay's ``context.step`` does)."""
    return 1


@DBOS.workflow(name=WORKFLOWS["one_step"])
def one_step() -> int:
    return one()


@DBOS.workflow(name=WORKFLOWS["noop"])
def noop() -> None:
    """Nothing: the workflow's status row, its (empty) result and the queue's work alone."""


def config(url: str) -> DBOSConfig:
    return {
        "name": NAME,
        "system_database_url": url,
        "application_version": VERSION,
        "log_level": os.environ.get("BENCH_DBOS_LOG_LEVEL", "WARNING"),
    }


def enqueue(url: str, n: int, prefix: str, workflow: str) -> None:
    client = DBOSClient(system_database_url=url, application_name=NAME)
    try:
        for number in range(n):
            client.enqueue(
                {
                    "workflow_name": WORKFLOWS[workflow],
                    "queue_name": QUEUE,
                    "workflow_id": f"{prefix}{number}",
                    "app_version": VERSION,
                }
            )
    finally:
        client.destroy()


def work(url: str, concurrency: int, poll_seconds: float) -> None:
    DBOS(config=config(url))
    DBOS.launch()  # before register_queue, which writes the queue's row
    DBOS.register_queue(QUEUE, worker_concurrency=concurrency, polling_interval_sec=poll_seconds)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    DBOS.destroy()


def prepare(url: str, concurrency: int, poll_seconds: float) -> None:
    """The system database's tables and the queue's row, before any workflow is enqueued. The
    row holds the worker's settings: a worker's queue thread starts from the row as it finds it
    at launch, before its own ``register_queue`` updates it."""
    DBOS(config=config(url))
    DBOS.launch()
    DBOS.register_queue(QUEUE, worker_concurrency=concurrency, polling_interval_sec=poll_seconds)
    DBOS.destroy()


if __name__ == "__main__":
    command, url, *rest = sys.argv[1:]
    if command == "prepare":
        prepare(url, int(rest[0]), float(rest[1]))
    elif command == "enqueue":
        enqueue(url, int(rest[0]), rest[1], rest[2] if len(rest) > 2 else "one_step")
    elif command == "work":
        work(url, int(rest[0]), float(rest[1]))
    else:
        sys.exit(f"unknown command {command!r}")
