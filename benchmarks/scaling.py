"""What scales and what contends: several dispatchers on one outbox, one work queue against two,
and the primary's cost per job (WAL bytes, transactions, rows written), for docs/scaling.md.

    JOBRELAY_SERVERS_DIR=/tmp/scaling/servers python scripts/servers.py run -- \\
        python -m benchmarks.scaling [--rounds 3] [--rows 20000] [--dispatchers 1,2,3] \\
        [--jobs 6000] [--concurrency 32]

Reads JOBRELAY_DATABASE_URL (admin: creates a scratch database), JOBRELAY_AMQP_URL and
JOBRELAY_RABBITMQ_API_URL (a scratch vhost); drops both at the end. Give it a servers directory
of its own: PostgreSQL's WAL position and CPU, and RabbitMQ's CPU, are those of the whole server,
so other work on the same servers would count as ours. Variants alternate round by round (their
order rotates) so that the machine's drift hits each alike; the ratios within a run are the
figures, not the absolute rates.

1. Dispatchers: ``--rows`` due outbox rows (written as the API writes them), a CHECKPOINT, then
   N ``jobrelay dispatcher`` processes (``JOBRELAY_RELAY_WINDOW=0``: no consumer runs, and a
   window would stop at its size) until every row is published. Rate from the database clock
   (first to last ``published_at``); per message: CPU of the dispatchers, PostgreSQL and
   RabbitMQ (from /proc, as ``benchmarks/e2e.py`` measures it), WAL bytes
   (``pg_current_wal_lsn`` before and after), transactions and rows written.
2. Work queues: ``--jobs`` no-op jobs, half ``demo.sleep`` and half ``bench.noop`` (the same
   handler under another name, registered below), accepted through the API's statement
   (``Store.accept_job``, 16 at a time), then one dispatcher and two consumers
   (``--concurrency`` each) until every job succeeded: "one queue" (both consumers on
   ``default``) against "two queues" (``JOBRELAY_TYPE_QUEUES=bench.noop=second``, one consumer
   each). Same processes, same jobs; only the split differs.
3. Per job, from phase 2's runs: the accept, the run (relay, claim, result) and, once the jobs
   are made 30 days old, their deletion by retention (``RelayStore.delete_finished_jobs``, 500
   a statement, as the dispatcher's maintenance runs it), measured apart, after a CHECKPOINT
   each: WAL bytes (and full-page images), PostgreSQL transactions
   (``pg_stat_database.xact_commit``, read after the services exited; the benchmark's own polls
   subtracted), rows inserted/updated/deleted by table, CPU per component.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import aio_pika

from benchmarks import e2e, relay
from benchmarks._common import (
    first_node,
    median,
    scratch_run,
    start_service,
)
from jobrelay.broker.topology import declare_topology
from jobrelay.core import topology as names
from jobrelay.core.jobs import JobRequest
from jobrelay.core.registry import JobContext, Registry
from jobrelay.core.states import JobState
from jobrelay.db.relay_store import RelayStore
from jobrelay.db.store import Store
from jobrelay.handlers.builtin import SleepPayload

# The second no-op type: what phase 2 routes to its own queue. The services load it with
# JOBRELAY_HANDLERS=benchmarks.scaling:registry (both variants, so both pay the same imports).
T = TypeVar("T")

HANDLERS = "benchmarks.scaling:registry"
SECOND_TYPE = "bench.noop"
SECOND_QUEUE = "second"

registry = Registry()


@registry.job(SECOND_TYPE, SleepPayload)
async def bench_noop(context: JobContext, payload: SleepPayload) -> dict[str, Any]:
    """``demo.sleep`` under another name: nothing, when ``seconds`` is 0."""
    await asyncio.sleep(payload.seconds)
    return {"slept": payload.seconds}


# --- database figures --------------------------------------------------------------------------

WAL_POSITION = "SELECT pg_current_wal_lsn()::text"
WAL_BYTES_SINCE = "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), CAST(%(lsn)s AS pg_lsn))::bigint"
WAL_STATS = "SELECT wal_records, wal_fpi FROM pg_stat_wal"
COMMITS = "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
TABLE_WRITES = """
SELECT relname, n_tup_ins, n_tup_upd, n_tup_del FROM pg_stat_user_tables
WHERE relname IN ('jobs', 'outbox', 'job_events', 'job_results', 'job_count_deltas',
                  'job_totals')
"""
UNPUBLISHED = "SELECT count(*) FROM jobrelay.outbox WHERE published_at IS NULL"
LIVE_JOBS = "SELECT count(*) FROM jobrelay.jobs WHERE state IN ('queued', 'running', 'retrying')"
BACKDATE = (
    "UPDATE jobrelay.jobs SET finished_at = finished_at - interval '30 days' "
    "WHERE client_id = %(client_id)s"
)
RETENTION = 7 * 86400.0  # JOBRELAY_RETENTION_HOURS' default, in seconds
RETENTION_BATCH = 500  # as dispatcher/maintenance.py deletes
PUBLISH_SPAN = """
SELECT count(*), EXTRACT(EPOCH FROM max(published_at) - min(published_at))
FROM jobrelay.outbox WHERE published_at IS NOT NULL
"""


@dataclass
class Snapshot:
    """What PostgreSQL has counted so far: WAL, commits, rows written by table."""

    lsn: str
    wal_records: int
    wal_fpi: int
    commits: int
    writes: dict[str, tuple[int, int, int]]  # table -> (inserted, updated, deleted)


@dataclass
class Cost:
    """What one unit of work (a job, a message) cost PostgreSQL, per unit."""

    wal_bytes: float
    wal_fpi: float
    commits: float
    writes: dict[str, tuple[float, float, float]]

    def rows(self) -> float:
        return sum(sum(counts) for counts in self.writes.values())


@dataclass
class Run:
    variant: str
    units: int
    rate: float  # per second, database clock
    cpu: dict[str, float]  # CPU ms per 1,000 units
    cost: Cost

    def line(self) -> str:
        cpu = ", ".join(f"{name} {value:.0f}" for name, value in self.cpu.items())
        return (
            f"{self.variant:<14} {self.rate:>7,.0f}/s; CPU ms/1000: {cpu}; "
            f"WAL {self.cost.wal_bytes:,.0f} B (fpi {self.cost.wal_fpi:.2f}), "
            f"xact {self.cost.commits:.3f}, rows {self.cost.rows():.2f} per unit"
        )


class Database:
    """The scratch database through one autocommit statement at a time (e2e's ``sql``), each
    counted so that the benchmark's own transactions can be taken out of the figures."""

    def __init__(self, ctx: e2e.Context) -> None:
        self.ctx = ctx
        self.statements = 0

    async def rows(self, statement: str, params: dict[str, Any] | None = None) -> list[Any]:
        self.statements += 1
        return await e2e.sql(self.ctx, statement, params)

    async def value(self, statement: str, params: dict[str, Any] | None = None) -> Any:
        [(value, *_)] = await self.rows(statement, params)
        return value

    async def snapshot(self) -> Snapshot:
        lsn = await self.value(WAL_POSITION)
        [(records, fpi)] = await self.rows(WAL_STATS)
        writes = {name: (ins, upd, dele) for name, ins, upd, dele in await self.rows(TABLE_WRITES)}
        return Snapshot(lsn, int(records), int(fpi), int(await self.value(COMMITS)), writes)

    async def cost_since(self, before: Snapshot, units: int, own_statements: int) -> Cost:
        """Per unit since ``before``; ``own_statements``: the benchmark's statements meanwhile
        (each an autocommit transaction of its own), taken out of the commits."""
        await asyncio.sleep(1.0)  # exited backends have flushed their statistics
        wal = int(await self.value(WAL_BYTES_SINCE, {"lsn": before.lsn}))
        after = await self.snapshot()
        commits = after.commits - before.commits - own_statements - 5  # ours: 4 here, 1 in before
        writes = {
            name: per_unit(after.writes[name], before.writes[name], units)
            for name in after.writes
            if name in before.writes
        }
        return Cost(
            wal_bytes=wal / units,
            wal_fpi=(after.wal_fpi - before.wal_fpi) / units,
            commits=commits / units,
            writes=writes,
        )


def per_unit(
    after: tuple[int, int, int], before: tuple[int, int, int], units: int
) -> tuple[float, float, float]:
    inserted, updated, deleted = (a - b for a, b in zip(after, before, strict=True))
    return inserted / units, updated / units, deleted / units


# --- processes ----------------------------------------------------------------------------------


def start(ctx: e2e.Context, args: list[str], **env: str) -> subprocess.Popen[bytes]:
    return start_service(args, ctx.service_env | env)


async def until_done(
    ctx: e2e.Context,
    db: Database,
    groups: dict[str, list[subprocess.Popen[bytes]]],
    left_statement: str,
    units: int,
) -> tuple[e2e.CpuMeter, int]:
    """Poll ``left_statement`` (a count of the units left) every 50 ms until it is 0, then stop
    the services. Their CPU (and the servers') is metered from the first unit done, so process
    start-up is not counted; returns the meter and the units left when it started."""
    meter = e2e.CpuMeter({name: [p.pid for p in group] for name, group in groups.items()})
    deadline = time.perf_counter() + ctx.args.timeout
    left_at_start: int | None = None
    try:
        while (left := int(await db.value(left_statement))) > 0:
            if left_at_start is None and left < units:
                meter.start()
                left_at_start = left
            if time.perf_counter() > deadline:
                raise SystemExit(f"not done after {ctx.args.timeout}s ({left} of {units} left)")
            e2e.check_alive(groups)
            await asyncio.sleep(0.05)
        if left_at_start is None:  # all done between two polls: nothing was metered
            meter.start()
            left_at_start = units
        meter.stop()
    finally:
        e2e.stop_all(groups)
    return meter, left_at_start


def cpu_per_thousand(meter: e2e.CpuMeter, units: int) -> dict[str, float]:
    return {name: round(value) for name, value in meter.per_thousand(units).items()}


async def reset(ctx: e2e.Context) -> None:
    """Empty job tables and the run's client."""
    await e2e.reset_jobs(ctx)


async def declare_default(amqp_url: str) -> None:
    """The topology with its default queue, as a dispatcher declares it (phase 1 purges it
    before its first dispatcher has run)."""
    connection = await aio_pika.connect(first_node(amqp_url))
    async with connection:
        await declare_topology(await connection.channel(), delivery_limit=50)


async def delete_second_queue(amqp_url: str) -> None:
    """Gone with its binding: the next "one queue" run routes ``bench.noop`` to ``default``."""
    connection = await aio_pika.connect(first_node(amqp_url))
    async with connection:
        channel = await connection.channel()
        await channel.queue_delete(
            names.work_queue_name(SECOND_QUEUE), if_unused=False, if_empty=False
        )


# --- phase 1: dispatchers ----------------------------------------------------------------------


async def dispatchers_run(ctx: e2e.Context, db: Database, count: int, rows: int) -> Run:
    await reset(ctx)
    await e2e.preload(ctx, rows)
    await relay.purge(first_node(ctx.amqp_url))
    await db.rows("CHECKPOINT")
    before, polls = await db.snapshot(), db.statements
    groups = {
        "dispatchers": [start(ctx, ["dispatcher"], JOBRELAY_RELAY_WINDOW="0") for _ in range(count)]
    }
    meter, metered = await until_done(ctx, db, groups, UNPUBLISHED, rows)
    cost = await db.cost_since(before, rows, db.statements - polls)
    [(published, span)] = await db.rows(PUBLISH_SPAN)
    if published != rows:
        raise SystemExit(f"{published}/{rows} outbox rows published")
    left = await e2e.queue_messages(ctx.amqp_url, names.DEFAULT_QUEUE)
    await relay.purge(first_node(ctx.amqp_url))  # no consumer ran: phase 2 starts empty
    run = Run(f"{count} dispatcher{'s' if count > 1 else ''}", rows, 0.0, {}, cost)
    run.rate = (rows - 1) / float(span)
    run.cpu = cpu_per_thousand(meter, metered)
    if left != rows:  # more: a lease ran out and a row went twice; fewer: lost (a bug)
        print(f"  note: {left:,} messages in the queue for {rows:,} rows", flush=True)
    return run


# --- phases 2 and 3: work queues, and the cost of a job -----------------------------------------


def queue_variant(name: str) -> tuple[dict[str, str], list[str]]:
    """The services' extra settings and the two consumers' queues of a variant."""
    if name == "one queue":
        return {}, [names.DEFAULT_QUEUE_NAME, names.DEFAULT_QUEUE_NAME]
    return {"JOBRELAY_TYPE_QUEUES": f"{SECOND_TYPE}={SECOND_QUEUE}"}, [
        names.DEFAULT_QUEUE_NAME,
        SECOND_QUEUE,
    ]


async def accept_jobs(ctx: e2e.Context, store: Store, jobs: int, writers: int) -> None:
    """``jobs`` submissions through the API's accept statement, ``writers`` at a time, half of
    each type."""
    run = uuid.uuid4().hex[:8]
    numbers = iter(range(jobs))

    async def writer() -> None:
        for number in numbers:
            job_type = e2e.NOOP_TYPE if number % 2 else SECOND_TYPE
            request = JobRequest(f"scale-{run}-{number}", job_type, e2e.NOOP_PAYLOAD, 3)
            await store.accept_job(ctx.client_id, request)

    await asyncio.gather(*(writer() for _ in range(writers)))


async def measured(
    ctx: e2e.Context,
    db: Database,
    units: int,
    work: Callable[[Store], Awaitable[Any]],
    connections: int,
) -> tuple[Cost, float, dict[str, float]]:
    """``work`` on a store of its own, after a CHECKPOINT: its cost per unit, its rate, and
    PostgreSQL's and this process's CPU (the load generator) per 1,000 units. The meter stops
    before the store closes (an exited backend's CPU is no longer in /proc), the figures are
    read after (an exited backend has flushed its statistics)."""
    await db.rows("CHECKPOINT")
    store = Store.connect(ctx.database_url, pool_size=connections)
    meter = e2e.CpuMeter({"bench": [os.getpid()]})
    before, polls = await db.snapshot(), db.statements
    meter.start()
    started = time.perf_counter()
    try:
        await work(store)
        elapsed = time.perf_counter() - started
        meter.stop()
    finally:
        await store.close()
    cost = await db.cost_since(before, units, db.statements - polls)
    return cost, units / elapsed, cpu_per_thousand(meter, units)


async def queues_run(ctx: e2e.Context, db: Database, variant: str, jobs: int) -> tuple[Run, Run]:
    """The accept and the run of one variant, each measured on its own."""
    await reset(ctx)
    writers = 16  # the accept's connections, as an API's pool
    cost, rate, cpu = await measured(
        ctx, db, jobs, lambda store: accept_jobs(ctx, store, jobs, writers), writers
    )
    accept = Run(f"accept ({variant})", jobs, rate, cpu, cost)
    env, queues = queue_variant(variant)
    await db.rows("CHECKPOINT")
    before, polls = await db.snapshot(), db.statements
    concurrency = str(ctx.args.concurrency)
    groups = {
        "dispatcher": [start(ctx, ["dispatcher"], **env)],
        "consumers": [
            start(ctx, ["consumer", "--queue", queue, "--concurrency", concurrency], **env)
            for queue in queues
        ],
    }
    meter, metered = await until_done(ctx, db, groups, LIVE_JOBS, jobs)
    if env:
        await delete_second_queue(ctx.amqp_url)
    cost = await db.cost_since(before, jobs, db.statements - polls)
    [(done, failed)] = await db.rows(e2e.COUNT_DONE, {"client_id": ctx.client_id})
    if failed or done != jobs:
        raise SystemExit(f"{variant}: {done} succeeded, {failed} failed of {jobs}")
    [(n, first, last, *_)] = await db.rows(e2e.WINDOW, {"client_id": ctx.client_id})
    run = Run(variant, jobs, (n - 1) / (float(last) - float(first)), {}, cost)
    run.cpu = cpu_per_thousand(meter, metered)
    return accept, run


async def retention_run(ctx: e2e.Context, db: Database, jobs: int) -> Run:
    """The dispatcher's retention deleting the run's jobs (500 a statement, with their outbox
    rows, journal and result by cascade), once they are made 30 days old (not measured)."""
    await db.rows(BACKDATE, {"client_id": ctx.client_id})

    async def delete_all(store: Store) -> None:
        keeper = RelayStore(store)
        while await keeper.delete_finished_jobs(JobState.SUCCEEDED, RETENTION, RETENTION_BATCH):
            pass

    cost, rate, cpu = await measured(ctx, db, jobs, delete_all, 1)
    return Run("retention", jobs, rate, cpu, cost)


# --- report -------------------------------------------------------------------------------------


def rotated(variants: list[T], round_number: int) -> list[T]:
    """The variants in this round's order: each goes first in turn."""
    shift = (round_number - 1) % len(variants)
    return variants[shift:] + variants[:shift]


def medians(runs: list[Run]) -> dict[str, float]:
    """Median per figure over the rounds of one variant."""
    figures: dict[str, list[float]] = {"rate": [r.rate for r in runs]}
    for run in runs:
        for name, value in run.cpu.items():
            figures.setdefault(f"cpu {name}", []).append(value)
        figures.setdefault("WAL bytes", []).append(run.cost.wal_bytes)
        figures.setdefault("WAL full-page images", []).append(run.cost.wal_fpi)
        figures.setdefault("transactions", []).append(run.cost.commits)
        figures.setdefault("rows written", []).append(run.cost.rows())
        for table, counts in run.cost.writes.items():
            for kind, value in zip(("ins", "upd", "del"), counts, strict=True):
                if value:
                    figures.setdefault(f"  {table} {kind}", []).append(value)
    return {name: median(values) for name, values in figures.items()}


def cell(value: float | None, width: int = 18) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:>{width},.2f}"


def table(title: str, by_variant: dict[str, list[Run]], unit: str) -> None:
    """Medians per variant, each variant's ratio to the first, and each round's rate."""
    rounds = max(len(runs) for runs in by_variant.values())
    print(f"\n{title} (medians over {rounds} rounds; per {unit})")
    stats = {variant: medians(runs) for variant, runs in by_variant.items()}
    base_name, *others = stats
    base = stats[base_name]
    header = "".join(f"{v:>18}" for v in stats)
    header += "".join(f"{v + ' / ' + base_name:>34}" for v in others)
    print(f"{'figure':<28}{header}")
    for name in dict.fromkeys(name for figures in stats.values() for name in figures):
        cells = "".join(cell(figures.get(name)) for figures in stats.values())
        ratios = "".join(cell(ratio(stats[v].get(name), base.get(name)), 34) for v in others)
        print(f"{name:<28}{cells}{ratios}")
    for variant, runs in by_variant.items():
        print(f"  {variant} rate by round: {', '.join(f'{r.rate:,.0f}' for r in runs)}")


def ratio(value: float | None, base: float | None) -> float | None:
    return value / base if value is not None and base else None


# --- main ---------------------------------------------------------------------------------------


async def run(ctx: e2e.Context) -> None:
    args = ctx.args
    db = Database(ctx)
    await reset(ctx)
    await declare_default(ctx.amqp_url)
    counts = [int(c) for c in args.dispatchers.split(",") if c]
    relays: dict[str, list[Run]] = {}
    queues: dict[str, list[Run]] = {"one queue": [], "two queues": []}
    accepts: list[Run] = []
    retentions: list[Run] = []
    for round_number in range(1, args.rounds + 1):
        print(f"round {round_number}:", flush=True)
        if not args.skip_dispatchers:
            for count in rotated(counts, round_number):
                result = await dispatchers_run(ctx, db, count, args.rows)
                relays.setdefault(result.variant, []).append(result)
                print("  " + result.line(), flush=True)
        if not args.skip_queues:
            for variant in rotated(list(queues), round_number):
                accept, result = await queues_run(ctx, db, variant, args.jobs)
                accepts.append(accept)
                queues[variant].append(result)
                retentions.append(await retention_run(ctx, db, args.jobs))
                for line in (accept, result, retentions[-1]):
                    print("  " + line.line(), flush=True)
    if relays:
        ordered = {name: relays[name] for name in sorted(relays)}
        table("1. relay from a preloaded outbox, window off", ordered, "message")
    if accepts:
        table("2. end to end, one work queue against two", queues, "job")
        stages = {
            "accept": accepts,
            "run": queues["one queue"] + queues["two queues"],
            "retention": retentions,
        }
        table("3. per job: the accept, the run (relay, claim, result), its deletion", stages, "job")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rows", type=int, default=20_000, help="phase 1: outbox rows")
    parser.add_argument("--dispatchers", default="1,2,3", help="phase 1: counts to compare")
    parser.add_argument("--jobs", type=int, default=6_000, help="phase 2: jobs per run")
    parser.add_argument("--concurrency", type=int, default=32, help="phase 2: per consumer")
    parser.add_argument("--timeout", type=float, default=180.0, help="per run")
    parser.add_argument("--skip-dispatchers", action="store_true")
    parser.add_argument("--skip-queues", action="store_true")
    return parser.parse_args(argv)


def main() -> int:
    args = parse_args()
    with scratch_run("scaling") as scratch:
        ctx = e2e.Context(
            admin_url=scratch.admin_url,
            database_url=scratch.database_url,
            amqp_url=scratch.amqp_url,
            celery_url="",  # no Celery here
            workdir=scratch.workdir,
            args=args,
            extra_env={"JOBRELAY_HANDLERS": HANDLERS},
        )
        print(
            f"scaling: {args.rounds} rounds; phase 1: {args.rows:,} outbox rows, dispatchers "
            f"{args.dispatchers}; phase 2: {args.jobs:,} jobs, 1 dispatcher + 2 consumers x "
            f"{args.concurrency}; {os.cpu_count()} CPUs",
            flush=True,
        )
        asyncio.run(run(ctx))
    return 0


if __name__ == "__main__":
    sys.exit(main())
