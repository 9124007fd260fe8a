"""No-op jobs per second from submit to stored result, beside a Celery baseline in the same run.

    python scripts/servers.py run -- python -m benchmarks.e2e \\
        [--jobs 5000] [--consumers 1] [--concurrency 32] [--rounds 2] [--profile] [--json PATH]

Reads JOBRELAY_DATABASE_URL (admin: creates a scratch database), JOBRELAY_AMQP_URL and
JOBRELAY_RABBITMQ_API_URL (creates two scratch vhosts, one per system); drops them at the end.

Phases, alternated per round so that the machine's drift hits both systems alike:

1. jobrelay throughput: ``--jobs`` ``demo.sleep`` jobs with ``seconds: 0`` (the no-op) are written
   straight to PostgreSQL as the API writes them (job + outbox row + ``received`` event), THEN a
   real ``python -m jobrelay dispatcher`` and ``--consumers`` × ``python -m jobrelay consumer
   --concurrency C`` are started; timed until every job is ``succeeded``. Per job that is: a
   confirmed, persistent publish to a quorum queue; the outbox row marked published with a
   ``published`` event; a claim (lease token, ``claimed`` event); the handler; one transaction
   storing the result, the state and a ``succeeded`` event; and only then the ack. Every commit
   is fsynced (``synchronous_commit=on``).
2. Celery throughput: ``--jobs`` no-op tasks published to the same RabbitMQ (its own vhost; a
   durable classic queue, persistent messages: Celery's defaults), THEN one ``celery worker``
   started; timed until every task ran. ``task_acks_late=True``, no result backend
   (``task_ignore_result``): nothing is stored anywhere, so Celery does strictly less durable work.
   The pool is ``--celery-pool`` (prefork by default) with ``--celery-concurrency`` (default: the
   total jobrelay concurrency). Completions are counted through a file the task appends one line
   to (see ``benchmarks/celery_app.py``).
3. Latency at a light steady load (``--rate`` jobs/s for ``--seconds``), services already running:
   jobrelay jobs submitted through the store (the API's accept statement); submit → result stored
   = ``job_results.created_at - jobs.created_at`` (both the database clock), split into its
   stages; Celery: ``apply_async`` → the task ran.

Rates: "steady" = completions between the first and the last completion (startup excluded, the
figure the ratio is taken on); "wall" = jobs / (process start → last completion). CPU seconds
per 1,000 jobs of each process (and of PostgreSQL and RabbitMQ) over the steady window show where
a 2-core machine's time goes. ``--profile`` adds one more jobrelay run under py-spy
(``--nonblocking``) and summarizes the dispatcher's and the consumers' profiles. ``--json PATH``
writes the medians of the throughput runs, which ``benchmarks/peers.py --e2e-json`` sets beside
the peers'.

On a RabbitMQ cluster (JOBRELAY_AMQP_URL lists its nodes) the jobrelay services get the whole
list; Celery, which takes one URL here, and the queue counts use the first node. RabbitMQ's CPU is
that of every node. ``benchmarks/cluster.py`` runs this beside a single node; ``measure`` returns
the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import aio_pika
import psycopg

from benchmarks import celery_app
from benchmarks._common import (
    admin_database_url,
    drop_database,
    first_node,
    median,
    percentile,
    scratch_database,
    sql as common_sql,
    start_service,
)
from jobrelay.core import topology as names
from jobrelay.core.fingerprint import request_hash
from jobrelay.core.ids import new_id
from jobrelay.core.jobs import JobRequest
from jobrelay.db.engine import libpq_url
from jobrelay.db.store import Store
from jobrelay.db.tables import LIVE
from tests.support.servers import create_vhost, delete_vhost, vhost_amqp_url

NOOP_TYPE = "demo.sleep"
NOOP_PAYLOAD = {"seconds": 0}

# The rows the API's accept statement writes (ACCEPT_JOB in services/jobrelay/db/queries.py),
# n at once, with ids made as the API makes them (``jobrelay.core.ids.new_id``).
PRELOAD = """
WITH j AS (
    INSERT INTO jobrelay.jobs (id, client_id, idempotency_key, request_hash, type, payload,
        max_attempts)
    SELECT g.id, %(client_id)s, %(prefix)s || g.n, %(hash)s, %(type)s,
           CAST(%(payload)s AS jsonb), 3
    FROM unnest(CAST(%(ids)s AS uuid[])) WITH ORDINALITY AS g(id, n)
    RETURNING id, available_at
)
INSERT INTO jobrelay.outbox (job_id, available_at) SELECT id, available_at FROM j
"""

# Every count is of the run's client alone: the database may hold other jobs
# (``benchmarks/storage.py`` runs this against a million finished ones).
COUNT_DONE = """
SELECT count(*) FILTER (WHERE state = 'succeeded') AS done,
       count(*) FILTER (WHERE state IN ('quarantined', 'cancelled')) AS failed
FROM jobrelay.jobs WHERE client_id = %(client_id)s
"""

# What the polls while jobs run ask instead: how many jobs are not finished, of any client (the
# scratch database's other jobs are all finished), from the partial index of live jobs, so a
# poll's cost falls as jobs finish; COUNT_DONE then checks the end once. Polled every 50 ms,
# COUNT_DONE (every job of the client read) took about a fifth of PostgreSQL's CPU in the
# window, counted as jobrelay's (pg_stat_statements, docs/testing.md "Performance").
_LIVE_STATES = ", ".join(f"'{state}'" for state in LIVE)
COUNT_LEFT = f"SELECT count(*) FROM jobrelay.jobs WHERE state IN ({_LIVE_STATES})"

WINDOW = """
WITH mine AS (SELECT id, finished_at FROM jobrelay.jobs WHERE client_id = %(client_id)s),
     sent AS (SELECT published_at FROM jobrelay.outbox WHERE job_id IN (SELECT id FROM mine))
SELECT count(*) FILTER (WHERE finished_at IS NOT NULL) AS n,
       EXTRACT(EPOCH FROM min(finished_at)) AS first,
       EXTRACT(EPOCH FROM max(finished_at)) AS last,
       (SELECT count(*) FROM jobrelay.job_results WHERE job_id IN (SELECT id FROM mine)) AS results,
       (SELECT count(*) FROM jobrelay.job_journal WHERE job_id IN (SELECT id FROM mine))
           AS events,
       (SELECT count(published_at) FROM sent) AS published,
       (SELECT EXTRACT(EPOCH FROM max(published_at) - min(published_at)) FROM sent) AS relaying
FROM mine
"""

# Submit → result stored, and its stages (database clock throughout).
LATENCY_STAGES = """
SELECT EXTRACT(EPOCH FROM r.created_at - j.created_at) AS total,
       EXTRACT(EPOCH FROM o.published_at - j.created_at) AS relay,
       EXTRACT(EPOCH FROM j.claimed_at - o.published_at) AS delivery,
       EXTRACT(EPOCH FROM r.created_at - j.claimed_at) AS execution
FROM jobrelay.jobs j
JOIN jobrelay.job_results r ON r.job_id = j.id
JOIN jobrelay.outbox o ON o.job_id = j.id
WHERE j.idempotency_key LIKE %(prefix)s
"""


# --- processes and their CPU ------------------------------------------------------------------

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def proc_table() -> dict[int, tuple[int, float]]:
    """pid → (parent pid, CPU seconds so far) of every live process."""
    table: dict[int, tuple[int, float]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as stat:
                raw = stat.read()
        except OSError:
            continue
        fields = raw[raw.rfind(b")") + 2 :].split()
        table[int(entry.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / CLOCK_TICKS)
    return table


def tree_cpu(table: dict[int, tuple[int, float]], roots: list[int]) -> float:
    children: dict[int, list[int]] = collections.defaultdict(list)
    for pid, (ppid, _) in table.items():
        children[ppid].append(pid)
    total, stack, seen = 0.0, list(roots), set()
    while stack:
        pid = stack.pop()
        if pid in seen or pid not in table:
            continue
        seen.add(pid)
        total += table[pid][1]
        stack.extend(children[pid])
    return total


def server_pids() -> dict[str, list[int]]:
    """Our own servers (under JOBRELAY_SERVERS_DIR), so that other servers on the machine don't
    count: the postmaster (its backends are its children) and RabbitMQ's beam (one per node of a
    cluster)."""
    base = os.environ.get("JOBRELAY_SERVERS_DIR")
    found: dict[str, list[int]] = {}
    if not base:
        return found
    with contextlib.suppress(OSError, ValueError, IndexError):
        postmaster = Path(base, "pg", "data", "postmaster.pid").read_text().split()[0]
        found["postgres"] = [int(postmaster)]
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry.name}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[0].endswith(b"beam.smp") and any(base.encode() in arg for arg in argv):
            found.setdefault("rabbitmq", []).append(int(entry.name))
    return found


class CpuMeter:
    """CPU seconds of named process trees between two snapshots."""

    def __init__(self, groups: dict[str, list[int]]) -> None:
        self.groups = {**groups, **server_pids()}
        self.before: dict[str, float] = {}
        self.after: dict[str, float] = {}

    def _snapshot(self) -> dict[str, float]:
        table = proc_table()
        return {name: tree_cpu(table, pids) for name, pids in self.groups.items()}

    def start(self) -> None:
        self.before = self._snapshot()

    def stop(self) -> None:
        self.after = self._snapshot()

    def per_thousand(self, jobs: int) -> dict[str, float]:
        if not self.before or not self.after or jobs <= 0:
            return {}
        return {
            name: (self.after[name] - self.before[name]) * 1_000_000 / jobs
            for name in self.groups
            if name in self.before
        }


def stop_process(process: subprocess.Popen[bytes], grace: float = 20.0) -> None:
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # our own session (start_new_session)
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        process.wait(10)


# --- results -------------------------------------------------------------------------------


@dataclass
class Throughput:
    system: str
    jobs: int
    wall: float
    first: float
    last: float
    cpu: dict[str, float] = field(default_factory=dict)  # CPU seconds per 1,000 jobs
    notes: list[str] = field(default_factory=list)

    @property
    def steady(self) -> float:
        return (self.jobs - 1) / (self.last - self.first) if self.last > self.first else 0.0

    @property
    def wall_rate(self) -> float:
        return self.jobs / self.wall

    def line(self) -> str:
        cpu = ", ".join(f"{name} {value:.0f}" for name, value in self.cpu.items())
        return (
            f"{self.system:<9} {self.steady:>7,.0f} jobs/s steady, {self.wall_rate:>7,.0f} wall "
            f"({self.jobs:,} in {self.wall:.2f}s incl. startup); CPU ms/1000 jobs: {cpu}"
        )


@dataclass
class Context:
    admin_url: str
    database_url: str
    amqp_url: str  # jobrelay's vhost
    celery_url: str  # Celery's vhost
    workdir: Path
    args: argparse.Namespace
    client_id: uuid.UUID = field(default_factory=uuid.uuid4)
    extra_env: dict[str, str] = field(default_factory=dict)  # more settings for the services

    @property
    def service_env(self) -> dict[str, str]:
        return {
            "JOBRELAY_DATABASE_URL": self.database_url,
            "JOBRELAY_AMQP_URL": self.amqp_url,
            "JOBRELAY_LOG_LEVEL": "WARNING",
            "JOBRELAY_METRICS_PORT": "0",
        } | self.extra_env

    @property
    def completions(self) -> Path:
        return self.workdir / "celery-completions"


# --- jobrelay ------------------------------------------------------------------------------


async def sql(ctx: Context, statement: str, params: dict[str, Any] | None = None) -> list[Any]:
    return await common_sql(ctx.database_url, statement, params)


async def reset_jobs(ctx: Context, *, fresh: bool = True) -> None:
    """The run's client, in an empty database unless ``fresh`` is False."""
    if fresh:
        # CASCADE: the tables that reference ``jobs`` (a workflow's dependencies) empty too.
        tables = "job_results, job_events, outbox, jobs, job_totals, job_count_deltas"
        await sql(ctx, f"TRUNCATE {tables} CASCADE")
    await sql(
        ctx,
        "INSERT INTO jobrelay.clients (id, name, token_hash) VALUES (%(id)s, %(name)s, %(hash)s) "
        "ON CONFLICT DO NOTHING",
        {"id": ctx.client_id, "name": "bench-e2e", "hash": f"h-{ctx.client_id}"},
    )


async def preload(ctx: Context, n: int) -> None:
    await sql(
        ctx,
        PRELOAD,
        {
            "client_id": ctx.client_id,
            "prefix": f"e2e-{uuid.uuid4().hex[:8]}-",
            "hash": request_hash(NOOP_TYPE, NOOP_PAYLOAD),
            "type": NOOP_TYPE,
            "payload": json.dumps(NOOP_PAYLOAD),
            "ids": [new_id() for _ in range(n)],
        },
    )


async def check_none_failed(conn: psycopg.AsyncConnection[Any], client_id: uuid.UUID) -> None:
    cursor = await conn.execute(COUNT_DONE, {"client_id": client_id})
    _, failed = await cursor.fetchone()  # type: ignore[misc]
    if failed:
        raise SystemExit(f"{failed} jobs failed: a no-op must not fail")


def start_jobrelay(ctx: Context) -> dict[str, list[subprocess.Popen[bytes]]]:
    args = ctx.args
    consumers = [
        start_service(["consumer", "--concurrency", str(args.concurrency)], ctx.service_env)
        for _ in range(args.consumers)
    ]
    return {"dispatcher": [start_service(["dispatcher"], ctx.service_env)], "consumers": consumers}


def stop_all(groups: dict[str, list[subprocess.Popen[bytes]]]) -> None:
    processes = [p for group in groups.values() for p in group]
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        stop_process(process)


def check_alive(groups: dict[str, list[subprocess.Popen[bytes]]]) -> None:
    for name, group in groups.items():
        for process in group:
            if process.poll() is not None:
                raise SystemExit(
                    f"{name} process {process.pid} exited with {process.returncode}; "
                    "run it by hand with JOBRELAY_LOG_LEVEL=INFO to see why"
                )


async def queue_messages(amqp_url: str, queue: str) -> int:
    connection = await aio_pika.connect(first_node(amqp_url))
    async with connection:
        channel = await connection.channel()
        declared = await channel.declare_queue(queue, passive=True)
        return int(declared.declaration_result.message_count or 0)


async def jobrelay_throughput(
    ctx: Context, jobs: int, *, profile: bool = False, fresh: bool = True
) -> Throughput:
    """``fresh=False``: among the jobs the database already holds (none of the run's client)."""
    await reset_jobs(ctx, fresh=fresh)
    await preload(ctx, jobs)
    commits_before = await transactions(ctx)
    started = time.perf_counter()
    groups = start_jobrelay(ctx)
    meter = CpuMeter({name: [p.pid for p in group] for name, group in groups.items()})
    profilers: list[subprocess.Popen[bytes]] = []
    wall = 0.0
    try:
        async with await psycopg.AsyncConnection.connect(
            libpq_url(ctx.database_url), autocommit=True
        ) as conn:
            seen = 0
            deadline = started + ctx.args.timeout
            while True:
                cursor = await conn.execute(COUNT_LEFT)
                [left] = await cursor.fetchone()  # type: ignore[misc]
                done = jobs - left  # every job was written before the services started
                if done and not seen:
                    seen = done
                    meter.start()
                    if profile:
                        profilers = start_profilers(ctx, groups)
                if done >= jobs:
                    wall = time.perf_counter() - started
                    meter.stop()
                    await check_none_failed(conn, ctx.client_id)
                    break
                if time.perf_counter() > deadline:
                    raise SystemExit(f"jobrelay: only {done}/{jobs} done after {ctx.args.timeout}s")
                check_alive(groups)
                await asyncio.sleep(0.05)
    finally:
        stop_all(groups)
        for profiler in profilers:
            try:
                profiler.wait(ctx.args.profile_seconds + 30)
            except subprocess.TimeoutExpired:
                profiler.kill()
    commits = await transactions(ctx) - commits_before
    [row] = await sql(ctx, WINDOW, {"client_id": ctx.client_id})
    n, first, last, results, events, published, relaying = row
    result = Throughput("jobrelay", n, wall, float(first), float(last))
    result.cpu = meter.per_thousand(jobs - seen)
    left = await queue_messages(ctx.amqp_url, names.DEFAULT_QUEUE)
    result.notes.append(
        f"stored: {results:,} results, {events:,} journal events "
        f"({events / max(n, 1):.1f}/job), {published:,} outbox rows published "
        f"(first to last in {float(relaying or 0):.2f}s); "
        f"{left} messages left in the queue; "
        f"{commits / max(n, 1):.2f} PostgreSQL transactions per job (group commit shares them)"
    )
    return result


async def transactions(ctx: Context) -> int:
    """Committed transactions of the benchmark's database so far (every service's, and the
    progress poll's, about 20 a second). Read after the services exited, which flushes their
    statistics."""
    [(count,)] = await sql(
        ctx, "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
    )
    return int(count)


# --- Celery --------------------------------------------------------------------------------


def start_celery(ctx: Context, **more_env: str) -> subprocess.Popen[bytes]:
    """``more_env``: more BENCH_CELERY_* settings (``benchmarks/celery_app.py``)."""
    args = ctx.args
    env = os.environ | {
        "BENCH_CELERY_BROKER_URL": ctx.celery_url,
        "BENCH_CELERY_COMPLETIONS": str(ctx.completions),
        "PYTHONPATH": str(ROOT),
        **more_env,
    }
    log = open(ctx.workdir / "celery-worker.log", "ab")  # noqa: SIM115 (the child keeps it)
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "benchmarks.celery_app",
            "worker",
            "--pool",
            args.celery_pool,
            "--concurrency",
            str(args.celery_concurrency),
            "--queues",
            celery_app.QUEUE,
            "--loglevel",
            "WARNING",
            "--hostname",
            f"bench-{uuid.uuid4().hex[:6]}@localhost",
            # Cluster chatter off: it is not part of running a task.
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=log,
        start_new_session=True,
    )


def celery_publish(n: int, *, rate: float | None = None) -> None:
    """``n`` no-op tasks through Celery's own client; paced at ``rate`` per second if given."""
    interval = 1.0 / rate if rate else 0.0
    next_at = time.time()
    with celery_app.app.producer_or_acquire() as producer:
        for _ in range(n):
            if rate:
                time.sleep(max(0.0, next_at - time.time()))
                next_at += interval
            celery_app.noop.apply_async((time.time() if rate else 0.0,), producer=producer)


def completions(ctx: Context) -> int:
    try:
        return ctx.completions.stat().st_size // celery_app.LINE_BYTES
    except FileNotFoundError:
        return 0


def read_completions(ctx: Context) -> list[tuple[float, float]]:
    lines = ctx.completions.read_bytes().splitlines()
    return [(float(line[:17]), float(line[18:])) for line in lines if line]


async def wait_celery(
    ctx: Context, worker: subprocess.Popen[bytes], n: int, meter: CpuMeter | None = None
) -> int:
    """Poll until ``n`` completions; returns the completions seen when the meter started."""
    deadline = time.perf_counter() + ctx.args.timeout
    seen = 0
    while (done := completions(ctx)) < n:
        if done and not seen:
            seen = done
            if meter:
                meter.start()
        if worker.poll() is not None:
            raise SystemExit(f"celery worker exited with {worker.returncode}; see its log")
        if time.perf_counter() > deadline:
            raise SystemExit(f"celery: only {done}/{n} done after {ctx.args.timeout}s")
        await asyncio.sleep(0.02)
    if meter:
        meter.stop()
    return seen


async def celery_throughput(ctx: Context, jobs: int) -> Throughput:
    ctx.completions.write_bytes(b"")
    await asyncio.to_thread(celery_publish, jobs)
    # apply_async does not wait for confirms: the last publishes may still be on their way.
    deadline = time.perf_counter() + 15
    while (queued := await queue_messages(ctx.celery_url, celery_app.QUEUE)) < jobs:
        if time.perf_counter() > deadline:
            raise SystemExit(f"celery: {queued}/{jobs} tasks queued")
        await asyncio.sleep(0.05)
    started = time.perf_counter()
    worker = start_celery(ctx)
    meter = CpuMeter({"celery": [worker.pid]})
    try:
        seen = await wait_celery(ctx, worker, jobs, meter)
        wall = time.perf_counter() - started
    finally:
        stop_process(worker)
    done = [at for _, at in read_completions(ctx)]
    result = Throughput("celery", len(done), wall, min(done), max(done))
    result.cpu = meter.per_thousand(jobs - seen)
    left = await queue_messages(ctx.celery_url, celery_app.QUEUE)
    result.notes.append(f"stored: nothing; {left} messages left in the queue")
    return result


# --- latency at a light load -----------------------------------------------------------------


async def paced(rate: float, seconds: float, submit: Any) -> int:
    interval, count = 1.0 / rate, 0
    next_at = time.perf_counter()
    end = next_at + seconds
    while next_at < end:
        await submit(count)
        count += 1
        next_at += interval
        await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
    return count


async def wait_jobs(ctx: Context, n: int) -> None:
    deadline = time.perf_counter() + ctx.args.timeout
    while True:
        [(left,)] = await sql(ctx, COUNT_LEFT, {})
        if not left:  # the n jobs were submitted before
            return
        if time.perf_counter() > deadline:
            raise SystemExit(f"jobrelay latency phase: {left} of {n} jobs not done")
        await asyncio.sleep(0.1)


async def jobrelay_latency(ctx: Context) -> dict[str, list[float]]:
    await reset_jobs(ctx)
    store = Store.connect(ctx.database_url, pool_size=2)
    groups = start_jobrelay(ctx)
    run = uuid.uuid4().hex[:8]

    async def submit(number: int, prefix: str = "lat") -> None:
        await store.accept_job(
            ctx.client_id,
            JobRequest(f"{prefix}-{run}-{number}", NOOP_TYPE, NOOP_PAYLOAD, 3),
        )

    try:
        for number in range(20):  # warm up: every process connected and working
            await submit(number, "warm")
        await wait_jobs(ctx, 20)
        check_alive(groups)
        count = await paced(ctx.args.rate, ctx.args.seconds, submit)
        await wait_jobs(ctx, 20 + count)
    finally:
        stop_all(groups)
        await store.close()
    rows = await sql(ctx, LATENCY_STAGES, {"prefix": f"lat-{run}-%"})
    stages: dict[str, list[float]] = {"total": [], "relay": [], "delivery": [], "execution": []}
    for total, relay, delivery, execution in rows:
        for name, value in zip(stages, (total, relay, delivery, execution), strict=True):
            stages[name].append(float(value) * 1000)
    return stages


async def celery_latency(ctx: Context) -> list[float]:
    worker = start_celery(ctx)
    try:
        ctx.completions.write_bytes(b"")
        await asyncio.to_thread(celery_publish, 20)  # warm up
        await wait_celery(ctx, worker, 20)
        ctx.completions.write_bytes(b"")
        count = int(ctx.args.rate * ctx.args.seconds)
        await asyncio.to_thread(celery_publish, count, rate=ctx.args.rate)
        await wait_celery(ctx, worker, count)
    finally:
        stop_process(worker)
    return [(done - sent) * 1000 for sent, done in read_completions(ctx)]


def describe(values: list[float]) -> str:
    return (
        f"p50 {percentile(values, 0.50):6.1f}  p95 {percentile(values, 0.95):6.1f}  "
        f"p99 {percentile(values, 0.99):6.1f}  max {max(values):6.1f} ms"
    )


# --- profiles ------------------------------------------------------------------------------


def start_profilers(
    ctx: Context, groups: dict[str, list[subprocess.Popen[bytes]]]
) -> list[subprocess.Popen[bytes]]:
    out = Path(ctx.args.profile_dir)
    out.mkdir(parents=True, exist_ok=True)
    profilers = []
    for name, group in groups.items():
        for index, process in enumerate(group):
            path = out / f"{name}-{index}.txt"
            profilers.append(
                subprocess.Popen(
                    [
                        "py-spy",
                        "record",
                        "--pid",
                        str(process.pid),
                        "--duration",
                        str(ctx.args.profile_seconds),
                        "--format",
                        "raw",
                        "--output",
                        str(path),
                        "--nonblocking",
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
    return profilers


def _area(frame: str) -> str:
    """Which library a frame belongs to, from its file path."""
    path = frame[frame.rfind("(") + 1 :]
    for marker, area in (
        ("services/", "jobrelay"),
        ("sqlalchemy", "SQLAlchemy"),
        ("psycopg", "psycopg"),
        ("aio_pika", "aio-pika"),
        ("aiormq", "aiormq"),
        ("pamqp", "pamqp"),
        ("asyncio", "asyncio"),
        ("selectors", "asyncio"),
        ("logging", "logging"),
        ("pydantic", "pydantic"),
        ("prometheus_client", "prometheus"),
    ):
        if marker in path:
            return area
    return path.rsplit("/", 1)[-1].split(":")[0]


# Where a sample's time goes, by what its stack contains: the first rule that matches wins.
# SQLAlchemy runs its driver calls in greenlets, which py-spy shows as stacks of their own
# (without the jobrelay frames above them), hence rules on library frames too.
_PHASES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "BEGIN/COMMIT of explicit transactions",
        (
            "AsyncEngine.begin",
            "_commit_gen",
            "do_commit",
            "Transaction.commit",
            "_start_query",
            "RootTransaction",
        ),
    ),
    (
        "connection pool checkout/checkin",
        ("Pool.connect", "_checkin", "_checkout", "Connection.close", "AsyncConnection.close"),
    ),
    ("relay: build messages, hand them to aiormq", ("publish_batch",)),
    (
        "SQL statements (SQLAlchemy + psycopg: compile, send, read rows)",
        ("sqlalchemy/", "psycopg/"),
    ),
    (
        "AMQP client (frames, socket reads/writes, acks, confirms)",
        ("aio_pika/", "aiormq/", "pamqp/"),
    ),
    (
        "handler + heartbeat tasks (create, wait, cancel)",
        ("_run_under_lease", "call_handler", "_heartbeat", "_cancel ("),
    ),
    ("metrics (prometheus_client)", ("prometheus_client/",)),
    ("logging", ("logging/",)),
)
# Otherwise by the innermost frame (every stack has jobrelay and asyncio frames at its root).
_LEAF_PHASES = {
    "jobrelay": "jobrelay code (decode, decide, settle, bookkeeping)",
    "asyncio": "event loop (scheduling, epoll, task switches)",
}


def _phase(frames: list[str]) -> str:
    for name, markers in _PHASES:
        for frame in reversed(frames):
            if any(marker in frame for marker in markers):
                return name
    return _LEAF_PHASES.get(_area(frames[-1]), "other")


def _function(frame: str) -> str:
    name, _, location = frame.partition(" (")
    parts = location.rstrip(")").split("/")
    return f"{name} ({'/'.join(parts[-2:]).rsplit(':', 1)[0]})"


def summarize_profile(path: Path, top: int = 10) -> str:
    stacks: list[tuple[list[str], int]] = []
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            stacks.append((stack.split(";"), int(count)))
    total = sum(count for _, count in stacks)
    if not total:
        return f"{path.name}: no samples"
    phases: collections.Counter[str] = collections.Counter()
    areas: collections.Counter[str] = collections.Counter()
    functions: collections.Counter[str] = collections.Counter()
    for frames, count in stacks:
        phases[_phase(frames)] += count
        areas[_area(frames[-1])] += count
        functions[_function(frames[-1])] += count
    lines = [f"{path.name}: {total:,} busy samples (idle waits are not sampled)"]
    lines.append("  where the time goes:")
    lines += [f"    {count / total:5.1%}  {name}" for name, count in phases.most_common()]
    lines.append(
        "  self time by library: "
        + ", ".join(f"{area} {count / total:.0%}" for area, count in areas.most_common(8))
    )
    lines.append("  self time, top functions:")
    lines += [f"    {count / total:5.1%}  {name}" for name, count in functions.most_common(top)]
    return "\n".join(lines)


def profile_report(directory: str) -> str:
    paths = sorted(Path(directory).glob("*.txt"))
    return "\n".join([*map(summarize_profile, paths), f"raw profiles in {directory}"])


# --- main ----------------------------------------------------------------------------------


@dataclass
class Results:
    jobrelay: list[Throughput] = field(default_factory=list)
    celery: list[Throughput] = field(default_factory=list)
    # submit -> result stored, ms, by stage ("total", "relay", "delivery", "execution")
    jobrelay_latency: dict[str, list[float]] = field(default_factory=dict)
    celery_latency: list[float] = field(default_factory=list)  # apply_async -> task ran, ms

    def summary(self) -> dict[str, Any]:
        """The medians ``--json`` writes (``benchmarks/peers.py --e2e-json`` reads them): per
        system, steady jobs/s and CPU ms per 1,000 jobs of each process measured."""
        return {
            system: {"steady": median([run.steady for run in runs]), "cpu": median_cpu(runs)}
            for system, runs in (("jobrelay", self.jobrelay), ("celery", self.celery))
            if runs
        }


def median_cpu(runs: list[Throughput]) -> dict[str, float]:
    """CPU ms per 1,000 jobs of each process, the median over the runs that measured it."""
    names = dict.fromkeys(name for run in runs for name in run.cpu)
    return {name: median([run.cpu[name] for run in runs if name in run.cpu]) for name in names}


def report(jobrelay: list[Throughput], celery: list[Throughput]) -> None:
    for run in jobrelay + celery:
        for note in run.notes:
            print(f"  {run.system}: {note}")
    if not jobrelay or not celery:
        return
    ours = median([r.steady for r in jobrelay])
    theirs = median([r.steady for r in celery])
    ours_wall = median([r.wall_rate for r in jobrelay])
    theirs_wall = median([r.wall_rate for r in celery])
    print(
        f"\nmedian steady: jobrelay {ours:,.0f} jobs/s, celery {theirs:,.0f} tasks/s, "
        f"ratio jobrelay/celery = {ours / theirs:.2f}"
    )
    print(
        f"median wall (incl. process startup): jobrelay {ours_wall:,.0f}, celery "
        f"{theirs_wall:,.0f}, ratio {ours_wall / theirs_wall:.2f}"
    )
    pairs = [f"{a.steady / b.steady:.2f}" for a, b in zip(jobrelay, celery, strict=False)]
    print(f"per-round steady ratios: {', '.join(pairs)}")


async def run(ctx: Context) -> Results:
    args = ctx.args
    print(
        f"jobrelay: 1 dispatcher + {args.consumers} consumer(s) x concurrency {args.concurrency}; "
        f"celery: 1 worker, pool {args.celery_pool} x {args.celery_concurrency}, acks_late, "
        f"no result backend; {args.jobs:,} no-op jobs per run, {args.rounds} round(s); "
        f"{os.cpu_count()} CPUs"
    )
    results = Results()
    ours, theirs = results.jobrelay, results.celery
    for round_number in range(1, args.rounds + 1):
        print(f"round {round_number}:")
        if not args.skip_jobrelay:
            ours.append(await jobrelay_throughput(ctx, args.jobs))
            print("  " + ours[-1].line())
        if not args.skip_celery:
            theirs.append(await celery_throughput(ctx, args.jobs))
            print("  " + theirs[-1].line())
    report(ours, theirs)
    if args.rate > 0 and args.seconds > 0:
        print(f"\nlatency at {args.rate:g} jobs/s for {args.seconds:g}s, services running:")
        if not args.skip_jobrelay:
            stages = results.jobrelay_latency = await jobrelay_latency(ctx)
            print(f"  jobrelay submit -> result stored ({len(stages['total'])} jobs):")
            for name, label in (
                ("total", "total"),
                ("relay", "commit -> published (relay)"),
                ("delivery", "published -> claimed"),
                ("execution", "claimed -> result"),
            ):
                print(f"    {label:<28} {describe(stages[name])}")
        if not args.skip_celery:
            latencies = results.celery_latency = await celery_latency(ctx)
            print(f"  celery apply_async -> task ran ({len(latencies)} tasks):")
            print(f"    {'total':<28} {describe(latencies)}")
    if args.profile:
        jobs = args.profile_jobs or args.jobs * 4
        print(f"\nprofiled jobrelay run ({jobs:,} jobs, py-spy --nonblocking; not counted above):")
        shutil.rmtree(args.profile_dir, ignore_errors=True)
        profiled = await jobrelay_throughput(ctx, jobs, profile=True)
        print("  " + profiled.line())
        print(profile_report(args.profile_dir))
    return results


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--consumers", type=int, default=1, help="consumer processes")
    parser.add_argument("--concurrency", type=int, default=32, help="per consumer")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--celery-pool", default="prefork", choices=["prefork", "threads"])
    parser.add_argument("--celery-concurrency", type=int, help="default: consumers x concurrency")
    parser.add_argument("--rate", type=float, default=100.0, help="latency phase, jobs/s")
    parser.add_argument("--seconds", type=float, default=10.0, help="latency phase length")
    parser.add_argument("--timeout", type=float, default=120.0, help="per phase")
    parser.add_argument("--profile", action="store_true", help="one more run under py-spy")
    parser.add_argument("--profile-jobs", type=int, default=0, help="default: 4 x --jobs")
    parser.add_argument("--profile-seconds", type=int, default=10)
    parser.add_argument("--profile-dir", default="/tmp/jobrelay-e2e-profile")
    parser.add_argument("--skip-celery", action="store_true")
    parser.add_argument("--skip-jobrelay", action="store_true")
    parser.add_argument("--json", help="also write the medians to this file (for peers.py)")
    args = parser.parse_args(argv)
    args.celery_concurrency = args.celery_concurrency or args.consumers * args.concurrency
    return args


def main() -> int:
    args = parse_args()
    admin_url = admin_database_url()
    amqp_base = os.environ.get("JOBRELAY_AMQP_URL")
    api_url = os.environ.get("JOBRELAY_RABBITMQ_API_URL")
    if not (amqp_base and api_url):
        sys.exit("run under `python scripts/servers.py run -- python -m benchmarks.e2e`")
    results = measure(args, admin_url, amqp_base, api_url)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results.summary(), indent=2) + "\n")
    return 0


def measure(args: argparse.Namespace, admin_url: str, amqp_base: str, api_url: str) -> Results:
    """The phases on a scratch database and scratch vhosts of these servers, printed as they
    finish; ``amqp_base`` may list a cluster's nodes."""
    tag = uuid.uuid4().hex[:8]
    vhosts = [f"jobrelay-e2e-{tag}", f"celery-e2e-{tag}"]
    database_url = scratch_database(admin_url)
    workdir = Path(tempfile.mkdtemp(prefix="jobrelay-e2e-"))
    try:
        for vhost in vhosts:
            create_vhost(api_url, vhost)
        ctx = Context(
            admin_url=admin_url,
            database_url=database_url,
            amqp_url=vhost_amqp_url(amqp_base, vhosts[0]),
            celery_url=vhost_amqp_url(first_node(amqp_base), vhosts[1]),
            workdir=workdir,
            args=args,
        )
        celery_app.app.conf.broker_url = ctx.celery_url
        return asyncio.run(run(ctx))
    finally:
        with contextlib.suppress(Exception):
            celery_app.app.pool.force_close_all()
        for vhost in vhosts:
            delete_vhost(api_url, vhost)
        drop_database(admin_url, database_url)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
