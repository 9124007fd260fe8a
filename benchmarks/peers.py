"""No-op jobs end to end on the peers that store every job's outcome too: Celery with its
PostgreSQL result backend, procrastinate 3.10 and DBOS 3.4.0's queues, in one run, beside
jobrelay's figures from ``benchmarks/e2e.py`` when its ``--json`` output is given.

    python scripts/servers.py run -- python -m benchmarks.peers \\
        [--jobs 3000] [--rounds 1] [--concurrency 32] [--dbos-poll 0.01] [--e2e-json PATH]

Reads JOBRELAY_DATABASE_URL (admin: creates a scratch database per run), JOBRELAY_AMQP_URL and
JOBRELAY_RABBITMQ_API_URL (a scratch vhost for Celery); drops them at the end. ``make bench``
runs it after ``benchmarks.e2e --json``, so both sets of figures come from the same servers and
the same minutes.

Each peer as e2e runs jobrelay and Celery: ``--jobs`` no-op jobs written first, THEN one worker
process started, timed until every job's outcome is stored; each on a fresh database (and vhost):

- ``celery+pg``: ``benchmarks/celery_app.py``'s no-op, ``acks_late``, prefork x ``--concurrency``,
  the same RabbitMQ, and its database result backend (``db+postgresql+psycopg://``: SQLAlchemy
  on psycopg 3, from the main lock): a ``celery_taskmeta`` row per task, written before the ack.
- ``procrastinate``: procrastinate 3.10.0 (``benchmarks/_procrastinate_app.py``), an async no-op
  task, one worker with ``concurrency`` = ``--concurrency``, LISTEN/NOTIFY on, finished jobs kept
  (its defaults); the jobs deferred in batches before the worker starts.
- ``dbos``: DBOS 3.4.0 (``benchmarks/_dbos_app.py``), a workflow of no step on a queue of
  ``worker_concurrency`` = ``--concurrency``, polled every ``--dbos-poll`` seconds (its default,
  1 s, would measure the poll), enqueued by ``DBOSClient`` before the worker starts.

procrastinate and DBOS run from ``.local/venv-peers``, made from ``requirements/bench-peers.txt``
(hashes required) once, and again when the lock changes; Celery from jobrelay's own environment.

Per run: jobs/s "steady" (completions between the first and the last, as e2e.py computes it) and
CPU ms per 1,000 jobs over that window of the worker's process tree, of PostgreSQL and, for
Celery, of RabbitMQ (an idle broker's CPU is not charged to the peers that need none). The
summary gives each peer's medians and, with ``--e2e-json``, jobrelay's medians beside them and
the ratios jobrelay/peer (jobs/s: above 1 is faster; CPU per job: below 1 is cheaper).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psycopg

from benchmarks import celery_app, durable, e2e
from benchmarks._common import first_node, median, peers_python, server_urls, until_all_done
from jobrelay.db.engine import libpq_url
from tests.support import databases
from tests.support.servers import create_vhost, delete_vhost, vhost_amqp_url

PEERS = ("celery+pg", "procrastinate", "dbos")
PROCRASTINATE_APP = ROOT / "benchmarks" / "_procrastinate_app.py"

# What the polls ask while a peer runs: how many outcomes are stored, succeeded and failed; then
# once at the end, the window: the outcomes and the first and last completion (epoch seconds).
CELERY_DONE = """
SELECT count(*) FILTER (WHERE status = 'SUCCESS'), count(*) FILTER (WHERE status = 'FAILURE')
FROM celery_taskmeta
"""
CELERY_WINDOW = """
SELECT count(*), EXTRACT(EPOCH FROM min(date_done)), EXTRACT(EPOCH FROM max(date_done))
FROM celery_taskmeta WHERE status = 'SUCCESS'
"""
PROCRASTINATE_DONE = """
SELECT count(*) FILTER (WHERE status = 'succeeded'),
       count(*) FILTER (WHERE status IN ('failed', 'aborted'))
FROM procrastinate_jobs
"""
PROCRASTINATE_WINDOW = """
SELECT count(*), EXTRACT(EPOCH FROM min(at)), EXTRACT(EPOCH FROM max(at))
FROM procrastinate_events WHERE type = 'succeeded'
"""


@contextlib.contextmanager
def scratch_database(ctx: e2e.Context, peer: str) -> Any:
    """An empty database (no jobrelay schema) for one peer's run; its SQLAlchemy URL."""
    name = f"jobrelay_bench_{peer.replace('+', '_')}_{uuid.uuid4().hex[:8]}"
    databases.admin_execute(ctx.admin_url, f'CREATE DATABASE "{name}"')
    try:
        yield databases.with_database(ctx.admin_url, name)
    finally:
        databases.admin_execute(ctx.admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def measure(
    ctx: e2e.Context,
    name: str,
    url: str,
    worker: subprocess.Popen[bytes],
    meter: e2e.CpuMeter,
    statements: tuple[str, str],
    started: float,
) -> e2e.Throughput:
    """Polls ``statements``' first (succeeded, failed) until every job succeeded, the meter
    running from the first completion to the last; stops the worker; reads the window with the
    second. ``started``: when the worker was started."""
    done_sql, window_sql = statements
    jobs, deadline = ctx.args.jobs, started + ctx.args.timeout
    try:
        async with await psycopg.AsyncConnection.connect(libpq_url(url), autocommit=True) as conn:
            seen, _ = await until_all_done(
                conn, done_sql, name=name, jobs=jobs, worker=worker, meter=meter, deadline=deadline
            )
            wall = time.perf_counter() - started
            cursor = await conn.execute(window_sql)
            n, first, last = await cursor.fetchone()  # type: ignore[misc]
    finally:
        e2e.stop_process(worker)
    result = e2e.Throughput(name, int(n), wall, float(first), float(last))
    result.cpu = meter.per_thousand(jobs - seen)
    return result


# --- Celery with its PostgreSQL result backend ---------------------------------------------------


def celery_backend_url(url: str) -> str:
    """Celery's name for the SQLAlchemy URL of ``url``'s database on psycopg 3."""
    return "db+postgresql+psycopg://" + url.split("://", 1)[1]


def create_celery_tables(backend_url: str) -> None:
    """Celery's result tables, made once here: each prefork child would otherwise race to."""
    from celery.backends.database import DatabaseBackend

    # The backend's own URL is SQLAlchemy's: "db+" only tells Celery which backend to load.
    backend = DatabaseBackend(url=backend_url.removeprefix("db+"), app=celery_app.app)
    backend.session_manager.invalidate(backend.url)


def celery_publish(n: int) -> None:
    """``n`` no-op tasks through Celery's own client, each asking for its result to be stored
    (the request's ``ignore_result`` is what the worker honours)."""
    with celery_app.app.producer_or_acquire() as producer:
        for _ in range(n):
            celery_app.noop.apply_async((0.0,), producer=producer, ignore_result=False)


async def celery_run(ctx: e2e.Context, jobs: int) -> e2e.Throughput:
    with scratch_database(ctx, "celery") as url:
        backend_url = celery_backend_url(url)
        await asyncio.to_thread(create_celery_tables, backend_url)
        await asyncio.to_thread(celery_publish, jobs)
        deadline = time.perf_counter() + 15  # apply_async does not wait for confirms
        while (queued := await e2e.queue_messages(ctx.celery_url, celery_app.QUEUE)) < jobs:
            if time.perf_counter() > deadline:
                raise SystemExit(f"celery: {queued}/{jobs} tasks queued")
            await asyncio.sleep(0.05)
        started = time.perf_counter()
        worker = e2e.start_celery(ctx, BENCH_CELERY_RESULT_BACKEND=backend_url)
        meter = e2e.CpuMeter({"celery": [worker.pid]})
        statements = (CELERY_DONE, CELERY_WINDOW)
        result = await measure(ctx, "celery+pg", url, worker, meter, statements, started)
    left = await e2e.queue_messages(ctx.celery_url, celery_app.QUEUE)
    result.notes.append(f"stored: {result.jobs:,} results; {left} messages left in the queue")
    return result


# --- procrastinate -------------------------------------------------------------------------------


def procrastinate_app(python: Path, *argv: str) -> None:
    done = subprocess.run(
        [str(python), str(PROCRASTINATE_APP), *argv], capture_output=True, text=True, check=False
    )
    if done.returncode:
        raise SystemExit(f"procrastinate {argv[0]} failed:\n{done.stderr[-3000:]}")


def start_procrastinate_worker(
    python: Path, conninfo: str, concurrency: int
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [str(python), str(PROCRASTINATE_APP), "work", conninfo, str(concurrency)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


async def procrastinate_run(ctx: e2e.Context, python: Path, jobs: int) -> e2e.Throughput:
    with scratch_database(ctx, "procrastinate") as url:
        conninfo = libpq_url(url)
        await asyncio.to_thread(procrastinate_app, python, "prepare", conninfo)
        await asyncio.to_thread(procrastinate_app, python, "defer", conninfo, str(jobs))
        started = time.perf_counter()
        worker = start_procrastinate_worker(python, conninfo, ctx.args.concurrency)
        meter = e2e.CpuMeter({"procrastinate": [worker.pid]})
        meter.groups.pop("rabbitmq", None)  # it needs no broker: an idle one's CPU is not its cost
        statements = (PROCRASTINATE_DONE, PROCRASTINATE_WINDOW)
        return await measure(ctx, "procrastinate", url, worker, meter, statements, started)


# --- the run -------------------------------------------------------------------------------------


async def run(ctx: e2e.Context, python: Path) -> dict[str, list[e2e.Throughput]]:
    args = ctx.args
    print(
        f"{args.jobs:,} no-op jobs per run, {args.rounds} round(s), each written before its "
        f"worker starts; one worker each: celery prefork x {args.concurrency} with the "
        f"PostgreSQL result backend, procrastinate concurrency {args.concurrency}, dbos "
        f"worker_concurrency {args.concurrency} polled every {args.dbos_poll:g}s; "
        f"{os.cpu_count()} CPUs"
    )
    runs: dict[str, list[e2e.Throughput]] = {peer: [] for peer in args.peers}
    for round_number in range(1, args.rounds + 1):
        print(f"round {round_number}:")
        turn = (round_number - 1) % len(args.peers)  # drift hits every peer alike
        for peer in args.peers[turn:] + args.peers[:turn]:
            if peer == "celery+pg":
                result = await celery_run(ctx, args.jobs)
            elif peer == "procrastinate":
                result = await procrastinate_run(ctx, python, args.jobs)
            else:
                result = await durable.dbos_run(ctx, python, args.jobs, "noop")
            runs[peer].append(result)
            print(f"  {result.line()}")
            for note in result.notes:
                print(f"    {note}")
    return runs


def report(runs: dict[str, list[e2e.Throughput]], e2e_json: str | None) -> None:
    """Each peer's medians; with e2e's, jobrelay's beside them and the ratios jobrelay/peer."""
    figures: dict[str, dict[str, Any]] = {
        peer: {"steady": median([run.steady for run in measured]), "cpu": e2e.median_cpu(measured)}
        for peer, measured in runs.items()
        if measured
    }
    ours = json.loads(Path(e2e_json).read_text()) if e2e_json else {}
    if "celery" in ours:
        figures = {"celery (no results)": ours["celery"], **figures}
    print("\nmedians, CPU ms per 1,000 jobs (all processes measured, then each):")
    for name, figure in (
        ({"jobrelay": ours["jobrelay"]} if "jobrelay" in ours else {}) | figures
    ).items():
        cpu = figure["cpu"]
        parts = ", ".join(f"{process} {value:,.0f}" for process, value in cpu.items())
        print(
            f"  {name:<20} {figure['steady']:>7,.0f} jobs/s, CPU {sum(cpu.values()):>6,.0f} "
            f"({parts})"
        )
    if "jobrelay" not in ours:
        print("(jobrelay's figures: give benchmarks.e2e --json's file as --e2e-json)")
        return
    rate, cpu = ours["jobrelay"]["steady"], sum(ours["jobrelay"]["cpu"].values())
    print("jobrelay/peer (jobs/s above 1: jobrelay faster; CPU per job below 1: jobrelay cheaper):")
    for name, figure in figures.items():
        print(
            f"  {name:<20} jobs/s x{rate / figure['steady']:.2f}, "
            f"CPU per job x{cpu / sum(figure['cpu'].values()):.2f}"
        )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=32, help="per worker")
    parser.add_argument("--dbos-poll", type=float, default=0.01, help="DBOS queue poll, seconds")
    parser.add_argument("--timeout", type=float, default=120.0, help="per run")
    parser.add_argument("--e2e-json", help="benchmarks.e2e --json's file: jobrelay's medians")
    parser.add_argument("--peers", default=",".join(PEERS), help=f"some of {','.join(PEERS)}")
    args = parser.parse_args(argv)
    args.peers = [name.strip() for name in args.peers.split(",")]
    if unknown := set(args.peers) - set(PEERS):
        parser.error(f"unknown peers {sorted(unknown)}: choose from {', '.join(PEERS)}")
    args.celery_pool, args.celery_concurrency = "prefork", args.concurrency  # e2e.start_celery
    return args


def main() -> int:
    args = parse_args()
    admin_url, amqp_base, api_url = server_urls("peers")
    python = peers_python()
    vhost = f"celery-peers-{uuid.uuid4().hex[:8]}"
    workdir = Path(tempfile.mkdtemp(prefix="jobrelay-peers-"))
    create_vhost(api_url, vhost)
    try:
        ctx = e2e.Context(
            admin_url=admin_url,
            database_url="",  # no jobrelay run here: each peer has a database of its own
            amqp_url="",
            celery_url=vhost_amqp_url(first_node(amqp_base), vhost),
            workdir=workdir,
            args=args,
        )
        celery_app.app.conf.broker_url = ctx.celery_url
        runs = asyncio.run(run(ctx, python))
        report(runs, args.e2e_json)
    finally:
        with contextlib.suppress(Exception):
            celery_app.app.pool.force_close_all()
        delete_vhost(api_url, vhost)
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
