"""How jobrelay's storage behaves with N finished jobs preloaded, beside an empty database.

    python scripts/servers.py run -- python -m benchmarks.storage [--jobs 100000] [--explain]
    python scripts/servers.py run --keep -- python -m benchmarks.storage --jobs 1000000 --keep
    python scripts/servers.py run --keep -- python -m benchmarks.storage --reuse-full NAME

Reads JOBRELAY_DATABASE_URL (admin: creates two scratch databases), JOBRELAY_AMQP_URL and
JOBRELAY_RABBITMQ_API_URL (a scratch vhost per database); drops them all at the end, but the
full database with ``--keep`` (reused by ``--reuse-full NAME``: the servers must outlive the
run, hence ``servers.py run --keep`` or ``servers.py up``).

Two databases migrated to the current schema: "empty", and "full" with ``--jobs`` finished jobs
preloaded by set-based SQL (``benchmarks/_storage_fill.py``: job, outbox row, four journal
events, result; about 3% quarantined; 99% of them finished 10 days ago, 1% in the last hour),
then VACUUM ANALYZE and CHECKPOINT. Each phase runs on both databases, alternated per round:

1. end to end: ``--e2e-jobs`` no-op jobs written as the API writes them, then a real dispatcher
   and consumer (``benchmarks/e2e.py``'s helpers, retention off) until all succeeded;
   jobs/s first to last completion ("steady") and including process startup ("wall");
2. accept, raw: the API's accept statement (``benchmarks/submit.py``'s raw phase: job + outbox
   row + ``received`` event, ``--connections`` psycopg connections), ``--accept-jobs`` jobs;
3. accept, API: ``POST /v1/jobs`` over HTTP to a real API process (``benchmarks/submit.py``'s
   jobrelay measurement); WAL bytes per accepted job for both accept phases (the cluster's
   ``pg_current_wal_lsn()`` after a CHECKPOINT, so that full-page writes count);
4. reads, ``--samples`` calls each, alternating databases: ``GET /v1/admin/stats`` through the
   in-process API app (median, p95); a client's ``GET /v1/jobs?limit=50``, first page and a
   page from the middle of its history via a cursor (on "full" a fill client, on "empty" the
   accept phases' client); ``Store.trace`` of random finished jobs;
5. retention: the dispatcher's ``Maintenance.apply_retention`` (its default period and batch size)
   with ONE batch of each statement it runs, timed;
6. bytes on disk per job: the database and each table (``pg_total_relation_size``: heap,
   indexes, TOAST) over the jobs it holds at the end.

``--explain`` adds EXPLAIN (ANALYZE, BUFFERS) of the statements ``Store.stats()`` runs on "full".
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import re
import shlex
import subprocess
import sys
import tempfile
import time
import urllib.parse
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
from sqlalchemy import event

from benchmarks import _common as common, _storage_fill as fill, e2e, submit
from jobrelay.api.app import create_app
from jobrelay.api.deps import Page
from jobrelay.core.fingerprint import token_hash
from jobrelay.core.settings import Settings
from jobrelay.db.client_store import ClientStore
from jobrelay.db.engine import libpq_url
from jobrelay.db.relay_store import RelayStore
from jobrelay.db.store import Store
from jobrelay.dispatcher.maintenance import Maintenance
from jobrelay.dispatcher.service import maintenance_config
from tests.support import databases
from tests.support.servers import create_vhost, delete_vhost, vhost_amqp_url

TABLES = ("jobs", "job_events", "outbox", "job_results")
LIST_LIMIT = 50

# The job in the middle of a client's history, newest first (where the deep page starts).
CLIENT_JOB_AT = """
SELECT id FROM jobrelay.jobs WHERE client_id = %(client_id)s
ORDER BY created_at DESC, id DESC OFFSET %(offset)s LIMIT 1
"""

SIZES = """
SELECT pg_database_size(current_database()), (SELECT count(*) FROM jobrelay.jobs),
       pg_total_relation_size('jobrelay.jobs'), pg_total_relation_size('jobrelay.job_events'),
       pg_total_relation_size('jobrelay.outbox'), pg_total_relation_size('jobrelay.job_results')
"""


# --- the two databases ---------------------------------------------------------------------


@dataclass
class Side:
    """One of the two databases and what the phases need of it."""

    label: str
    url: str
    amqp_url: str
    store: Store
    accept_client: uuid.UUID
    accept_token: str
    figures: dict[str, float] = field(default_factory=dict)
    samples: dict[str, list[float]] = field(default_factory=dict)
    api: subprocess.Popen[bytes] | None = None
    api_port: int = 0

    def add(self, metric: str, value: float) -> None:
        self.samples.setdefault(metric, []).append(value)


sql = common.sql


def database_name(url: str) -> str:
    return urllib.parse.urlsplit(url).path.lstrip("/")


def database_exists(admin_url: str, name: str) -> bool:
    with psycopg.connect(libpq_url(admin_url), autocommit=True) as conn:
        row = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
    return row is not None


def fill_full(url: str, jobs: int, chunk: int, *, time_ordered: bool) -> None:
    def progress(done: int, seconds: float) -> None:
        print(f"  filled {done:>10,} jobs in {seconds:7.1f}s ({done / seconds:,.0f} jobs/s)")

    report = fill.fill(url, jobs, chunk=chunk, time_ordered=time_ordered, progress=progress)
    settled = fill.settle(url)
    print(
        f"fill: {report.jobs:,} jobs in {report.seconds:.1f}s = {report.rate:,.0f} jobs/s "
        f"(chunks of {chunk:,}, ids {report.id_kind}); VACUUM ANALYZE + CHECKPOINT "
        f"{settled:.1f}s"
    )


def print_footprint(url: str, title: str) -> None:
    [(database, jobs, *tables)] = asyncio.run(sql(url, SIZES))
    per_job = ", ".join(
        f"{name} {size / max(jobs, 1):,.0f}" for name, size in zip(TABLES, tables, strict=True)
    )
    print(
        f"{title}: {jobs:,} jobs, database {database / 2**20:,.1f} MiB = "
        f"{database / max(jobs, 1):,.0f} B/job; per table (heap+indexes+TOAST), B/job: {per_job}"
    )


# --- phase 1: end to end -------------------------------------------------------------------


async def end_to_end(
    admin_url: str, side: Side, jobs: int, args: argparse.Namespace
) -> e2e.Throughput:
    """e2e's jobrelay phase among the jobs the database holds, the dispatcher's retention off
    (the full database's backdated rows are left for the retention phase)."""
    client_id, _ = await submit.create_client(side.url, f"bench-e2e-{uuid.uuid4().hex[:8]}")
    ctx = e2e.Context(
        admin_url=admin_url,
        database_url=side.url,
        amqp_url=side.amqp_url,
        celery_url="",
        workdir=Path(tempfile.gettempdir()),
        args=argparse.Namespace(consumers=1, concurrency=args.concurrency, timeout=args.timeout),
        client_id=client_id,
        extra_env={"JOBRELAY_RETENTION_HOURS": "1000000"},
    )
    return await e2e.jobrelay_throughput(ctx, jobs, fresh=False)


# --- phases 2 and 3: accept ----------------------------------------------------------------


async def wal_lsn(admin_url: str, *, checkpoint: bool = False) -> int:
    """The cluster's WAL position in bytes (after a CHECKPOINT when asked)."""
    if checkpoint:
        await sql(admin_url, "CHECKPOINT")
    [(lsn,)] = await sql(admin_url, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')")
    return int(lsn)


async def with_wal(
    admin_url: str, side: Side, metric: str, jobs: int, run: Callable[[], Awaitable[float]]
) -> float:
    before = await wal_lsn(admin_url, checkpoint=True)
    rate = await run()
    side.add(metric, (await wal_lsn(admin_url) - before) / jobs)
    return rate


async def accept_raw(admin_url: str, side: Side, args: argparse.Namespace) -> None:
    jobs = args.accept_jobs // args.connections * args.connections

    async def run() -> float:
        return await submit.raw_inserts(side.url, side.accept_client, jobs, args.connections)

    side.add("accept_raw", await with_wal(admin_url, side, "wal_raw", jobs, run))


def start_api(side: Side, args: argparse.Namespace) -> None:
    side.api_port = common.free_port()
    side.api = common.start_api(side.url, side.api_port, args.api_workers)


async def accept_http(admin_url: str, side: Side, args: argparse.Namespace) -> None:
    jobs = args.accept_jobs // args.clients * args.clients
    latencies: list[float] = []

    async def run() -> float:
        rate, measured, statuses = await submit.http_submissions(
            side.api_port, side.accept_token, jobs, args.clients
        )
        if set(statuses) != {202}:
            raise SystemExit(f"{side.label}: unexpected statuses from the API: {statuses}")
        latencies.extend(measured)
        return rate

    side.add("accept_api", await with_wal(admin_url, side, "wal_api", jobs, run))
    side.samples.setdefault("accept_api_latency", []).extend(x * 1000 for x in latencies)


# --- phase 4: reads ------------------------------------------------------------------------


@dataclass
class Reader:
    """The in-process API app on one database, and what its calls need."""

    side: Side
    http: httpx.AsyncClient
    admin: dict[str, str]
    lister: dict[str, str]
    deep_cursor: str | None
    trace_ids: list[uuid.UUID]


@contextlib.asynccontextmanager
async def reader(side: Side, list_client: uuid.UUID, list_token: str) -> AsyncIterator[Reader]:
    admin_token = f"jr_bench_admin_{uuid.uuid4().hex}"
    await ClientStore(side.store).create_client(
        f"bench-admin-{uuid.uuid4().hex[:8]}", token_hash(admin_token), is_admin=True
    )
    app = create_app(Settings(database_url=side.url, builtins=True), store=side.store)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://jobrelay.bench") as http:
        yield Reader(
            side=side,
            http=http,
            admin={"Authorization": f"Bearer {admin_token}"},
            lister={"Authorization": f"Bearer {list_token}"},
            deep_cursor=await middle_cursor(side, list_client),
            trace_ids=await finished_sample(side.url),
        )


async def middle_cursor(side: Side, client_id: uuid.UUID) -> str | None:
    """The API's cursor of the page that starts in the middle of the client's history."""
    [(count,)] = await sql(
        side.url, "SELECT count(*) FROM jobrelay.jobs WHERE client_id = %(c)s", {"c": client_id}
    )
    rows = await sql(side.url, CLIENT_JOB_AT, {"client_id": client_id, "offset": count // 2})
    job = await side.store.get_job(rows[0][0]) if rows else None
    return Page(limit=1, after=None).next_cursor([job]) if job else None


async def finished_sample(url: str, count: int = 200) -> list[uuid.UUID]:
    """Finished jobs from random pages of the jobs table (TABLESAMPLE SYSTEM)."""
    [(total,)] = await sql(url, "SELECT count(*) FROM jobrelay.jobs")
    percent = min(100.0, 100.0 * 10 * count / max(total, 1))
    rows = await sql(
        url,
        "SELECT id FROM jobrelay.jobs TABLESAMPLE SYSTEM (%(p)s) WHERE finished_at IS NOT NULL",
        {"p": percent},
    )
    ids = [row[0] for row in rows]
    random.shuffle(ids)
    return ids[:count]


async def timed(call: Awaitable[Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = await call
    return (time.perf_counter() - started) * 1000, result


async def read_once(r: Reader, index: int) -> None:
    ms, response = await timed(r.http.get("/v1/admin/stats", headers=r.admin))
    response.raise_for_status()
    r.side.add("stats", ms)
    ms, response = await timed(r.http.get(f"/v1/jobs?limit={LIST_LIMIT}", headers=r.lister))
    response.raise_for_status()
    r.side.add("list_first", ms)
    if r.deep_cursor:
        url = f"/v1/jobs?limit={LIST_LIMIT}&cursor={r.deep_cursor}"
        ms, response = await timed(r.http.get(url, headers=r.lister))
        response.raise_for_status()
        if len(response.json()["items"]) != LIST_LIMIT:
            raise SystemExit(f"{r.side.label}: the deep page is not full")
        r.side.add("list_deep", ms)
    if r.trace_ids:
        job_id = r.trace_ids[index % len(r.trace_ids)]
        ms, trace = await timed(r.side.store.trace(job_id))
        if trace is None:
            raise SystemExit(f"{r.side.label}: no trace of {job_id}")
        r.side.add("trace", ms)


# --- phase 5: retention --------------------------------------------------------------------


class OneBatchEach:
    """The dispatcher's store, except that each of its ``delete_*`` statements runs once per
    set of arguments, timed; asked again (the dispatcher's loop wanting the next batch) it
    answers 0, which ends that loop."""

    def __init__(self, store: RelayStore, side: Side) -> None:
        self.store = store
        self.side = side
        self.done: set[str] = set()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.store, name)
        if not name.startswith("delete_"):
            return method

        async def once(*args: Any) -> int:
            # The statement and the states it is asked for (a JobState is a str).
            label = name + "".join(f"({arg})" for arg in args if isinstance(arg, str))
            if label in self.done:
                return 0
            self.done.add(label)
            ms, deleted = await timed(method(*args))
            self.side.add(f"retention:{label}", ms)
            self.side.add(f"retention:{label}:rows", deleted)
            return int(deleted)

        return once


async def retention_batch(side: Side) -> None:
    """``Maintenance.apply_retention`` as the dispatcher runs it (its default retention period and
    batch size), one batch of each statement."""
    config = maintenance_config(Settings(database_url=side.url))
    store = OneBatchEach(RelayStore(side.store), side)
    await Maintenance(store, config).apply_retention()


# --- EXPLAIN -------------------------------------------------------------------------------


async def explain_stats(side: Side) -> list[str]:
    """EXPLAIN (ANALYZE, BUFFERS) of every statement ``Store.stats()`` runs: its top node, its
    scans, its execution time."""
    captured: list[tuple[str, Any]] = []

    def capture(*args: Any) -> None:
        _conn, _cursor, statement, parameters, _context, _many = args
        captured.append((statement, parameters))

    engine = side.store.engine.sync_engine
    event.listen(engine, "before_cursor_execute", capture)
    try:
        await side.store.stats()
    finally:
        event.remove(engine, "before_cursor_execute", capture)
    lines = []
    for statement, parameters in captured:
        plan = [
            row[0]
            for row in await sql(
                side.url, "EXPLAIN (ANALYZE, BUFFERS) " + statement, parameters or None
            )
        ]
        lines.append("  " + " ".join(statement.split())[:110])
        lines += [f"    {COST.sub('', line.strip())[:130]}" for line in plan_summary(plan)]
    return lines


COST = re.compile(r"\s*\(cost=[^)]*\)")


def plan_summary(plan: list[str]) -> list[str]:
    top = [plan[0]] + [line for line in plan[1:3] if "->" not in line and ":" in line]
    scans = [line for line in plan if "Scan" in line and "->" in line]
    timing = [line for line in plan if line.startswith(("Planning Time", "Execution Time"))]
    return top + scans + timing


# --- the report ----------------------------------------------------------------------------

# (key, label, how a value is shown); a figure is the median of its samples.
METRICS: tuple[tuple[str, str, str], ...] = (
    ("e2e_steady", "end to end, jobs/s steady", "{:,.0f}"),
    ("e2e_wall", "end to end, jobs/s incl. startup", "{:,.0f}"),
    ("accept_raw", "accept, raw statement, jobs/s", "{:,.0f}"),
    ("accept_api", "accept, POST /v1/jobs, jobs/s", "{:,.0f}"),
    ("accept_api_p50", "accept, POST /v1/jobs p50 ms", "{:.1f}"),
    ("accept_api_p99", "accept, POST /v1/jobs p99 ms", "{:.1f}"),
    ("wal_raw", "WAL bytes/job, raw accept", "{:,.0f}"),
    ("wal_api", "WAL bytes/job, API accept", "{:,.0f}"),
    ("stats_p50", "GET /v1/admin/stats p50 ms", "{:.2f}"),
    ("stats_p95", "GET /v1/admin/stats p95 ms", "{:.2f}"),
    ("list_first", "GET /v1/jobs first page p50 ms", "{:.2f}"),
    ("list_deep", "GET /v1/jobs middle page p50 ms", "{:.2f}"),
    ("trace", "Store.trace p50 ms", "{:.2f}"),
    ("retention:", "", ""),  # one row per statement, and its rows deleted
    ("jobs", "jobs at the end", "{:,.0f}"),
    ("database_mib", "database MiB", "{:,.1f}"),
    ("database_per_job", "database bytes/job", "{:,.0f}"),
    *((f"{table}_per_job", f"{table} bytes/job", "{:,.0f}") for table in TABLES),
)


def derive(side: Side) -> None:
    samples = side.samples
    latencies = samples.pop("accept_api_latency", [])
    if latencies:
        samples["accept_api_p50"] = [common.percentile(latencies, 0.5)]
        samples["accept_api_p99"] = [common.percentile(latencies, 0.99)]
    stats = samples.pop("stats", [])
    if stats:
        samples["stats_p50"] = [common.percentile(stats, 0.5)]
        samples["stats_p95"] = [common.percentile(stats, 0.95)]
    side.figures = {key: common.median(values) for key, values in samples.items() if values}


async def footprint(side: Side) -> None:
    [(database, jobs, *tables)] = await sql(side.url, SIZES)
    side.add("jobs", jobs)
    side.add("database_mib", database / 2**20)
    side.add("database_per_job", database / max(jobs, 1))
    for table, size in zip(TABLES, tables, strict=True):
        side.add(f"{table}_per_job", size / max(jobs, 1))


def table_rows(empty: Side, full: Side) -> list[tuple[str, str, str]]:
    """METRICS, with the retention rows of the statements the dispatcher ran."""
    rows = []
    for key, label, shown in METRICS:
        if key != "retention:":
            rows.append((key, label, shown))
            continue
        for name in dict.fromkeys([*full.figures, *empty.figures]):
            if name.startswith(key) and name.endswith(":rows"):
                rows.append((name, "  rows deleted", "{:,.0f}"))
            elif name.startswith(key):
                rows.append((name, f"retention, 1 batch: {name[len(key) :]} ms", "{:.1f}"))
    return rows


def print_table(empty: Side, full: Side) -> None:
    print(f"\n{'metric':<52} {'empty':>10} {'full':>10} {'full/empty':>11}")
    print("-" * 86)
    for key, label, shown in table_rows(empty, full):
        a, b = empty.figures.get(key), full.figures.get(key)
        if a is None and b is None:
            continue
        ratio = f"{b / a:.2f}" if a and b is not None else "-"
        left = shown.format(a) if a is not None else "-"
        right = shown.format(b) if b is not None else "-"
        print(f"{label:<52} {left:>10} {right:>10} {ratio:>11}")


# --- main ----------------------------------------------------------------------------------


async def measure(admin_url: str, empty: Side, full: Side, args: argparse.Namespace) -> None:
    sides = (empty, full)
    print(f"end to end: {args.e2e_jobs:,} no-op jobs x {args.rounds} round(s)")
    for side in sides:  # warm-up: the first start of the services pays for cold caches
        await end_to_end(admin_url, side, min(200, args.e2e_jobs), args)
    for round_number in range(args.rounds):
        for side in in_turn(sides, round_number):
            result = await end_to_end(admin_url, side, args.e2e_jobs, args)
            side.add("e2e_steady", result.steady)
            side.add("e2e_wall", result.wall_rate)
            print(
                f"  {side.label:<5} {result.steady:>7,.0f} jobs/s steady, "
                f"{result.wall_rate:,.0f} wall"
            )
    for side in sides:
        fill.settle(side.url)  # the e2e phase's dead tuples vacuumed before WAL is measured
    print(f"accept: {args.accept_jobs:,} jobs x {args.rounds} round(s), raw then API")
    for side in sides:
        start_api(side, args)
    for side in sides:
        await submit.http_submissions(side.api_port, side.accept_token, 400, 8)  # warm up
    for round_number in range(args.rounds):
        for side in in_turn(sides, round_number):
            await accept_raw(admin_url, side, args)
            await accept_http(admin_url, side, args)
            print(
                f"  {side.label:<5} raw {side.samples['accept_raw'][-1]:>7,.0f} jobs/s, "
                f"API {side.samples['accept_api'][-1]:>7,.0f} jobs/s"
            )
    for side in sides:
        stop_api(side)
    print(f"reads: {args.samples} calls each, alternating databases")
    async with (
        reader(empty, empty.accept_client, empty.accept_token) as on_empty,
        reader(full, *await fill_lister(full)) as on_full,
    ):
        for index in range(2):  # warm-up rounds, not recorded
            for r in (on_empty, on_full):
                await read_once(r, index)
                drop_reads(r.side)
        for index in range(args.samples):
            for r in (on_empty, on_full):
                await read_once(r, index)
    print("retention: one batch of each statement")
    for side in sides:
        await retention_batch(side)
    for side in sides:
        await footprint(side)
    if args.explain:
        print("\nEXPLAIN (ANALYZE, BUFFERS) of Store.stats() on the full database:")
        print("\n".join(await explain_stats(full)))


READS = ("stats", "list_first", "list_deep", "trace")


def in_turn(sides: tuple[Side, Side], round_number: int) -> tuple[Side, ...]:
    """Empty first in even rounds, full first in odd ones: neither always goes first."""
    return sides if round_number % 2 == 0 else sides[::-1]


def drop_reads(side: Side) -> None:
    for key in READS:
        side.samples.pop(key, None)


async def fill_lister(full: Side) -> tuple[uuid.UUID, str]:
    """The first fill client, and its token."""
    [(client_id,)] = await sql(
        full.url, "SELECT id FROM jobrelay.clients WHERE name = %(n)s", {"n": fill.client_name(0)}
    )
    return client_id, fill.client_token(0)


def stop_api(side: Side) -> None:
    if side.api is not None:
        e2e.stop_process(side.api)
        side.api = None


async def open_side(label: str, url: str, amqp_url: str) -> Side:
    client_id, token = await submit.create_client(url, f"bench-accept-{uuid.uuid4().hex[:8]}")
    return Side(label, url, amqp_url, Store.connect(url, pool_size=4), client_id, token)


async def forget_run(full: Side) -> None:
    """Delete what this run added to a kept database (its clients and their jobs), so that the
    next ``--reuse-full`` starts from the same rows (less the retention batches' deletions)."""
    await sql(
        full.url,
        "DELETE FROM jobrelay.jobs WHERE client_id IN (SELECT id FROM jobrelay.clients WHERE name "
        "LIKE 'bench-%')",
    )
    await sql(full.url, "DELETE FROM jobrelay.clients WHERE name LIKE 'bench-%'")


async def run(admin_url: str, empty_url: str, full_url: str, args: argparse.Namespace) -> None:
    empty = await open_side("empty", empty_url, args.vhost_urls[0])
    full = await open_side("full", full_url, args.vhost_urls[1])
    try:
        await measure(admin_url, empty, full, args)
    finally:
        for side in (empty, full):
            stop_api(side)
            await side.store.close()
        if args.keep or args.reuse_full:
            await forget_run(full)
            fill.settle(full.url)
    for side in (empty, full):
        derive(side)
    print_table(empty, full)


def header(admin_url: str, args: argparse.Namespace) -> None:
    with psycopg.connect(libpq_url(admin_url)) as conn:
        version = conn.execute("SHOW server_version").fetchone()
        buffers = conn.execute("SHOW shared_buffers").fetchone()
    print(f"$ {shlex.join(['python', '-m', 'benchmarks.storage', *sys.argv[1:]])}")
    print(
        f"PostgreSQL {version[0] if version else '?'}, shared_buffers "
        f"{buffers[0] if buffers else '?'}; {os.cpu_count()} CPUs"
    )


def prepare_full(admin_url: str, args: argparse.Namespace) -> str:
    if args.reuse_full:
        if not database_exists(admin_url, args.reuse_full):
            raise SystemExit(f"no database {args.reuse_full!r} to reuse (kept with --keep?)")
        url = databases.with_database(admin_url, args.reuse_full)
        with psycopg.connect(libpq_url(url)) as conn:
            args.jobs = fill.filled_jobs(conn)
        if not args.jobs:
            raise SystemExit(f"{args.reuse_full!r} holds no filled jobs")
        print(f"reusing {args.reuse_full} ({args.jobs:,} filled jobs); settling it")
        fill.settle(url)
        return url
    url = common.scratch_database(admin_url)
    try:
        fill_full(url, args.jobs, args.chunk, time_ordered=args.ids == "v7")
    except BaseException:
        common.drop_database(admin_url, url)
        raise
    if args.keep:
        print(f"keeping the full database: --reuse-full {database_name(url)}")
    return url


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000, help="finished jobs preloaded")
    parser.add_argument("--accept-jobs", type=int, default=3000, help="per accept phase")
    parser.add_argument("--e2e-jobs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=2, help="of the e2e and accept phases")
    parser.add_argument("--samples", type=int, default=20, help="calls per read")
    parser.add_argument("--connections", type=int, default=8, help="raw accept connections")
    parser.add_argument("--clients", type=int, default=32, help="concurrent HTTP connections")
    parser.add_argument("--api-workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=32, help="of the e2e consumer")
    parser.add_argument(
        "--ids",
        choices=["v7", "v4"],
        default="v7",
        help="preloaded job ids: UUIDv7 of the creation time (as the API makes them) or random",
    )
    parser.add_argument("--chunk", type=int, default=fill.CHUNK, help="jobs per fill statement")
    parser.add_argument("--timeout", type=float, default=300.0, help="per e2e run")
    parser.add_argument("--explain", action="store_true", help="EXPLAIN the stats queries")
    parser.add_argument("--keep", action="store_true", help="keep the full database")
    parser.add_argument("--reuse-full", metavar="NAME", help="a full database kept earlier")
    args = parser.parse_args()

    admin_url = common.admin_database_url()
    amqp_base = os.environ.get("JOBRELAY_AMQP_URL")
    api_url = os.environ.get("JOBRELAY_RABBITMQ_API_URL")
    if not (amqp_base and api_url):
        sys.exit("run under `python scripts/servers.py run -- python -m benchmarks.storage`")
    header(admin_url, args)
    tag = uuid.uuid4().hex[:8]
    vhosts = [f"storage-empty-{tag}", f"storage-full-{tag}"]
    args.vhost_urls = [vhost_amqp_url(amqp_base, vhost) for vhost in vhosts]
    empty_url = full_url = ""
    try:
        for vhost in vhosts:
            create_vhost(api_url, vhost)
        empty_url = common.scratch_database(admin_url)
        full_url = prepare_full(admin_url, args)
        print(f"N = {args.jobs:,} finished jobs preloaded in the full database")
        print_footprint(full_url, "full database after the fill")
        asyncio.run(run(admin_url, empty_url, full_url, args))
    finally:
        for vhost in vhosts:
            delete_vhost(api_url, vhost)
        if empty_url:
            common.drop_database(admin_url, empty_url)
        if full_url and not (args.keep or args.reuse_full):
            common.drop_database(admin_url, full_url)
    return 0


if __name__ == "__main__":
    sys.exit(main())
