"""procrastinate's side of ``benchmarks/peers.py``: a no-op task on one queue. Run by the python of
``.local/venv-peers`` (procrastinate 3.10.0 from the peers' own lock,
``requirements/bench-peers.txt``), which has no jobrelay: this file imports the standard library
and procrastinate only.

    python benchmarks/_procrastinate_app.py prepare DATABASE_URL
    python benchmarks/_procrastinate_app.py defer DATABASE_URL N
    python benchmarks/_procrastinate_app.py work DATABASE_URL CONCURRENCY

``prepare`` applies procrastinate's schema to an empty database. ``defer`` defers N jobs of the
no-op (no worker runs them yet). ``work`` runs one worker on the queue with CONCURRENCY jobs at
once (procrastinate's defaults otherwise: LISTEN/NOTIFY on, finished jobs kept) until SIGTERM;
``benchmarks/peers.py`` counts the succeeded jobs in ``procrastinate_jobs`` and reads their
``succeeded`` events' times.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import procrastinate
import procrastinate.tasks

QUEUE = "bench"
BATCH = 1000  # jobs per deferring statement


async def noop() -> None:
    """Nothing: an async task, as jobrelay's handlers are, so no thread runs it."""


def make_app(url: str) -> tuple[procrastinate.App, procrastinate.tasks.Task[Any, Any, Any]]:
    """The app on ``url``'s database and its one task."""
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))
    return app, app.task(name="bench_noop", queue=QUEUE)(noop)


async def prepare(url: str) -> None:
    app, _ = make_app(url)
    async with app.open_async():
        await app.schema_manager.apply_schema_async()


async def defer(url: str, n: int) -> None:
    app, task = make_app(url)
    async with app.open_async():
        for start in range(0, n, BATCH):
            await task.batch_defer_async(*({} for _ in range(start, min(n, start + BATCH))))


async def work(url: str, concurrency: int) -> None:
    app, _ = make_app(url)
    async with app.open_async():
        # SIGTERM stops it (procrastinate's own signal handlers), the running jobs finished.
        await app.run_worker_async(queues=[QUEUE], concurrency=concurrency, wait=True)


if __name__ == "__main__":
    command, url, *rest = sys.argv[1:]
    if command == "prepare":
        asyncio.run(prepare(url))
    elif command == "defer":
        asyncio.run(defer(url, int(rest[0])))
    elif command == "work":
        asyncio.run(work(url, int(rest[0])))
    else:
        sys.exit(f"unknown command {command!r}")
