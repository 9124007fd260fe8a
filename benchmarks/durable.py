"""What durable execution costs: plain jobs beside jobs of one and five steps, and DBOS's queue
with one step per workflow, alternated per round in the same run.

    python scripts/servers.py run -- python -m benchmarks.durable \\
        [--jobs 2000] [--rounds 3] [--concurrency 32] [--dbos-poll 0.01]

Reads JOBRELAY_DATABASE_URL (admin: creates scratch databases), JOBRELAY_AMQP_URL and
JOBRELAY_RABBITMQ_API_URL (a scratch vhost); drops them at the end. ``make bench-durable`` runs it.

Variants, each on ``--jobs`` jobs written before its services start, timed until all finished:
- ``plain``: ``bench.plain`` (``benchmarks/durable_handlers.py``), a handler with no durable call,
  end to end as ``benchmarks/e2e.py`` measures ``demo.sleep``: a dispatcher and one consumer
  (``--concurrency``), a confirmed publish, claim, handler, result, ack per job;
- ``one step``: ``bench.one_step``, the same with ``await context.step("one", fn)``;
- ``five steps``: ``bench.five_steps``, five such steps;
- ``dbos``: DBOS 3.4.0 (``benchmarks/_dbos_app.py``, run by the python of ``.local/venv-peers``,
  made from ``requirements/bench-peers.txt`` when missing): a workflow of one step on a queue
  registered with ``worker_concurrency`` = ``--concurrency`` and polled every ``--dbos-poll``
  seconds (its default, 1 s, would measure the poll), its system database a scratch database of
  the same PostgreSQL; the workflows enqueued by ``DBOSClient`` before the worker starts.

Per variant: jobs/s "steady" (completions between the first and the last, startup excluded, as
e2e.py computes it) and CPU ms per 1,000 jobs over that window of the worker processes, of
PostgreSQL and (for jobrelay) of RabbitMQ, with PostgreSQL transactions per job for jobrelay.
The summary gives the medians, the ratios one step/plain and five steps/plain, and jobrelay's one
step beside DBOS's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psycopg

from benchmarks import e2e
from benchmarks._common import (
    chosen_variants,
    in_turn,
    median,
    peers_python,
    scratch_run,
    until_all_done,
)
from benchmarks.durable_handlers import FIVE_STEPS, HANDLERS, ONE_STEP, PLAIN
from jobrelay.core.fingerprint import request_hash
from jobrelay.core.ids import new_id
from jobrelay.db.engine import libpq_url
from tests.support import databases

DBOS_APP = ROOT / "benchmarks" / "_dbos_app.py"

OURS = {"plain": PLAIN, "one step": ONE_STEP, "five steps": FIVE_STEPS}
VARIANTS = (*OURS, "dbos")

# DBOS's finished workflows and the first and last completion (epoch milliseconds).
DBOS_DONE = """
SELECT count(*) FILTER (WHERE status = 'SUCCESS'),
       count(*) FILTER (WHERE status IN ('ERROR', 'CANCELLED', 'MAX_RECOVERY_ATTEMPTS_EXCEEDED')),
       min(updated_at) FILTER (WHERE status = 'SUCCESS'),
       max(updated_at) FILTER (WHERE status = 'SUCCESS')
FROM dbos.workflow_status WHERE queue_name = 'bench'
"""


@dataclass
class Figures:
    runs: dict[str, list[e2e.Throughput]] = field(
        default_factory=lambda: {variant: [] for variant in VARIANTS}
    )

    def steady(self, variant: str) -> float:
        return median([run.steady for run in self.runs[variant]])

    def cpu(self, variant: str) -> float:
        """Median CPU ms per 1,000 jobs, every process measured added up."""
        return median([sum(run.cpu.values()) for run in self.runs[variant]])


# --- jobrelay -----------------------------------------------------------------------------------


async def preload(ctx: e2e.Context, job_type: str, n: int) -> None:
    """``n`` jobs of ``job_type`` written as the API's accept statement writes them."""
    await e2e.sql(
        ctx,
        e2e.PRELOAD,
        {
            "client_id": ctx.client_id,
            "prefix": f"durable-{uuid.uuid4().hex[:8]}-",
            "hash": request_hash(job_type, {}),
            "type": job_type,
            "payload": "{}",
            "ids": [new_id() for _ in range(n)],
        },
    )


async def jobrelay_run(
    ctx: e2e.Context, variant: str, jobs: int, job_type: str | None = None
) -> e2e.Throughput:
    """One variant end to end, as ``e2e.jobrelay_throughput`` measures the no-op: jobs of
    ``job_type`` (by default the variant's, ``OURS``), a type of the services' handlers."""
    await e2e.reset_jobs(ctx)
    await preload(ctx, job_type or OURS[variant], jobs)
    result = await run_loaded(ctx, variant, jobs)
    [(steps,)] = await e2e.sql(ctx, "SELECT count(*) FROM jobrelay.job_steps")
    result.notes.insert(0, f"{steps / max(result.jobs, 1):.1f} steps recorded per job")
    return result


async def run_loaded(ctx: e2e.Context, name: str, jobs: int) -> e2e.Throughput:
    """The ``jobs`` jobs the database holds, run by a dispatcher and ``ctx.args.consumers``
    consumers started now, until every one finished (the benchmarks.sequences' run too):
    jobs/s steady, CPU per 1,000 jobs of each process, PostgreSQL transactions per job."""
    commits_before = await e2e.transactions(ctx)
    started = time.perf_counter()
    groups = e2e.start_jobrelay(ctx)
    meter = e2e.CpuMeter({name: [p.pid for p in group] for name, group in groups.items()})
    try:
        async with await psycopg.AsyncConnection.connect(
            libpq_url(ctx.database_url), autocommit=True
        ) as conn:
            seen = await _wait_jobrelay(ctx, conn, groups, meter, jobs, started)
            wall = time.perf_counter() - started
            await e2e.check_none_failed(conn, ctx.client_id)
    finally:
        e2e.stop_all(groups)
    commits = await e2e.transactions(ctx) - commits_before
    [row] = await e2e.sql(ctx, e2e.WINDOW, {"client_id": ctx.client_id})
    n, first, last, *_ = row
    result = e2e.Throughput(name, n, wall, float(first), float(last))
    result.cpu = meter.per_thousand(jobs - seen)
    result.notes.append(f"{commits / max(n, 1):.2f} PostgreSQL transactions per job")
    return result


async def _wait_jobrelay(
    ctx: e2e.Context,
    conn: psycopg.AsyncConnection[Any],
    groups: dict[str, list[subprocess.Popen[bytes]]],
    meter: e2e.CpuMeter,
    jobs: int,
    started: float,
) -> int:
    """Until every job finished; the jobs done when the meter started (the first one done)."""
    seen = 0
    deadline = started + ctx.args.timeout
    while True:
        cursor = await conn.execute(e2e.COUNT_LEFT)
        [left] = await cursor.fetchone()  # type: ignore[misc]
        done = jobs - left
        if done and not seen:
            seen = done
            meter.start()
        if done >= jobs:
            meter.stop()
            return seen
        if time.perf_counter() > deadline:
            raise SystemExit(f"jobrelay: only {done}/{jobs} done after {ctx.args.timeout}s")
        e2e.check_alive(groups)
        await asyncio.sleep(0.05)


# --- DBOS ---------------------------------------------------------------------------------------


def dbos_app(python: Path, *argv: str) -> None:
    done = subprocess.run(
        [str(python), str(DBOS_APP), *argv], capture_output=True, text=True, check=False
    )
    if done.returncode:
        raise SystemExit(f"dbos {argv[0]} failed:\n{done.stderr[-3000:]}")


async def dbos_run(
    ctx: e2e.Context, python: Path, jobs: int, workflow: str = "one_step"
) -> e2e.Throughput:
    """DBOS's queue on a fresh system database: ``jobs`` workflows enqueued, then one worker;
    ``workflow`` one of ``benchmarks/_dbos_app.py``'s (``one_step``, ``noop``)."""
    name = f"jobrelay_bench_dbos_{uuid.uuid4().hex[:8]}"
    databases.admin_execute(ctx.admin_url, f'CREATE DATABASE "{name}"')
    url = libpq_url(databases.with_database(ctx.admin_url, name))
    try:
        settings = (str(ctx.args.concurrency), str(ctx.args.dbos_poll))
        await asyncio.to_thread(dbos_app, python, "prepare", url, *settings)
        await asyncio.to_thread(dbos_app, python, "enqueue", url, str(jobs), "bench-", workflow)
        return await _dbos_measure(ctx, python, url, jobs)
    finally:
        databases.admin_execute(ctx.admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def start_dbos_worker(python: Path, url: str, args: argparse.Namespace) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [str(python), str(DBOS_APP), "work", url, str(args.concurrency), str(args.dbos_poll)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


async def _dbos_measure(ctx: e2e.Context, python: Path, url: str, jobs: int) -> e2e.Throughput:
    args = ctx.args
    started = time.perf_counter()
    worker = start_dbos_worker(python, url, args)
    meter = e2e.CpuMeter({"dbos": [worker.pid]})
    meter.groups.pop("rabbitmq", None)  # DBOS needs no broker: an idle one's CPU is not its cost
    try:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            deadline = started + args.timeout
            seen, (done, _, first, last) = await until_all_done(
                conn,
                DBOS_DONE,
                name="dbos",
                jobs=jobs,
                worker=worker,
                meter=meter,
                deadline=deadline,
            )
        wall = time.perf_counter() - started
    finally:
        e2e.stop_process(worker)
    result = e2e.Throughput("dbos", done, wall, first / 1000, last / 1000)
    result.cpu = meter.per_thousand(jobs - seen)
    return result


# --- the run ------------------------------------------------------------------------------------


async def run(ctx: e2e.Context, python: Path) -> Figures:
    args = ctx.args
    print(
        f"{args.jobs:,} jobs per run, {args.rounds} round(s); jobrelay: 1 dispatcher + 1 consumer "
        f"x concurrency {args.concurrency}; dbos: 1 worker, worker_concurrency "
        f"{args.concurrency}, polled every {args.dbos_poll:g}s; {os.cpu_count()} CPUs"
    )
    figures = Figures()
    for round_number in range(1, args.rounds + 1):
        print(f"round {round_number}:")
        for variant in in_turn(args.variants, round_number):
            if variant == "dbos":
                result = await dbos_run(ctx, python, args.jobs)
            else:
                result = await jobrelay_run(ctx, variant, args.jobs)
            figures.runs[variant].append(result)
            print_run(result)
    report(figures)
    return figures


def print_run(result: e2e.Throughput) -> None:
    """A run's line and its notes, as a round prints them (benchmarks.sequences too)."""
    print(f"  {result.line()}")
    for note in result.notes:
        print(f"    {note}")


def report(figures: Figures) -> None:
    print("\nmedians:")
    measured = [variant for variant in VARIANTS if figures.runs[variant]]
    for variant in measured:
        print(
            f"  {variant:<10} {figures.steady(variant):>7,.0f} jobs/s, "
            f"CPU {figures.cpu(variant):>6,.0f} ms per 1,000 jobs (all processes measured)"
        )
    plain_rate, plain_cpu = figures.steady("plain"), figures.cpu("plain")
    for variant in ("one step", "five steps"):
        if "plain" not in measured or variant not in measured:
            continue
        print(
            f"  {variant}/plain: jobs/s x{figures.steady(variant) / plain_rate:.2f}, "
            f"CPU per job x{figures.cpu(variant) / plain_cpu:.2f}"
        )
    if "one step" not in measured or "dbos" not in measured:
        return
    print(
        f"  jobrelay one step vs dbos one step: jobs/s x"
        f"{figures.steady('one step') / figures.steady('dbos'):.2f}, CPU per job x"
        f"{figures.cpu('one step') / figures.cpu('dbos'):.2f}"
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=32, help="per worker")
    parser.add_argument("--dbos-poll", type=float, default=0.01, help="DBOS queue poll, seconds")
    parser.add_argument("--timeout", type=float, default=120.0, help="per run")
    parser.add_argument(
        "--variants", default=",".join(VARIANTS), help=f"some of {','.join(VARIANTS)}"
    )
    args = parser.parse_args(argv)
    args.variants = chosen_variants(parser, args.variants, VARIANTS)
    args.consumers = 1  # what e2e.start_jobrelay reads
    return args


def main() -> int:
    args = parse_args()
    python = peers_python()
    with scratch_run("durable") as scratch:
        ctx = e2e.Context(
            admin_url=scratch.admin_url,
            database_url=scratch.database_url,
            amqp_url=scratch.amqp_url,
            celery_url="",
            workdir=scratch.workdir,
            args=args,
            extra_env={"JOBRELAY_HANDLERS": HANDLERS},
        )
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(run(ctx, python))
    return 0


if __name__ == "__main__":
    sys.exit(main())
