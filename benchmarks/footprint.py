"""What a plain job's life writes in PostgreSQL, measured from outside: rows per table, WAL bytes,
commits and the HOT share of its updates.

    python scripts/servers.py run -- python -m benchmarks.footprint \\
        [--jobs 2000] [--connections 16] [--json] [--wal-detail]

Reads JOBRELAY_DATABASE_URL (admin: creates a scratch database, migrated to head),
JOBRELAY_AMQP_URL and JOBRELAY_RABBITMQ_API_URL (a scratch vhost); drops them at the end.
``make bench-footprint`` runs it. Self-contained on purpose (only ``benchmarks/_common.py`` and
the jobrelay package), so that the same file measures another checkout before and after a change.

The run: a real ``jobrelay api``, ``jobrelay dispatcher`` and ``jobrelay consumer``, every setting
at the services' default; a client row; 20 warm-up jobs, waited for until they succeeded and their
finished-job count deltas were folded. Then the window:

1. a CHECKPOINT (so that the full-page images in the window are those of pages the window touches
   first, not of a checkpoint that happens to fall in it), then a snapshot: ``pg_stat_user_tables``
   of schema ``jobrelay`` (``n_tup_ins/upd/del/hot_upd``), ``pg_stat_database.xact_commit`` of the
   scratch database, ``pg_current_wal_lsn()``;
2. ``--jobs`` ``demo.sleep`` jobs with ``seconds: 0`` (a no-op, as ``benchmarks/e2e.py`` runs),
   each ``POST /v1/jobs`` with its own ``Idempotency-Key``, over ``--connections`` concurrent
   HTTP connections while the dispatcher and the consumer work;
3. waited for until every job succeeded and then for one fold of ``jobrelay.job_count_deltas``
   (the dispatcher's maintenance folds them every few seconds: deleted rows that a job's finish
   wrote belong to the job's cost); the output says whether the fold fell in the window;
4. the services stopped (their backends flush their statistics as they exit), one second's
   sleep, and the second snapshot.

The measuring connection's own transactions (the first snapshot's and each poll's; it writes
nothing) are counted and subtracted from the commits; it closes before the second snapshot, so
its statistics are flushed too. What the services do while idle in the window (the maintenance
round every few seconds, the consumers' heartbeats) is counted with the jobs: a few commits over
thousands of jobs. Autovacuum and checkpoints that fall in the window are reported beside.

``--wal-detail``: the WAL of the window read back with ``pg_waldump`` (PostgreSQL's bin dir, from
the server's own ``pg_wal``) and summed by record kind and by relation, so that one sees where the
bytes go; full-page images are shown apart.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx
import psycopg

from benchmarks._common import create_client, free_port, scratch_run, start_api, start_service
from jobrelay.db.engine import libpq_url
from jobrelay.db.tables import LIVE

NOOP = {"type": "demo.sleep", "payload": {"seconds": 0}}
WARM_UP = 20

TABLES = """
SELECT relname, n_tup_ins, n_tup_upd, n_tup_del, n_tup_hot_upd, autovacuum_count,
       autoanalyze_count
FROM pg_stat_user_tables WHERE schemaname = 'jobrelay'
"""
DATABASE = """
SELECT d.xact_commit, pg_current_wal_lsn()::text,
       b.checkpoints_timed + b.checkpoints_req
FROM pg_stat_database d, pg_stat_bgwriter b WHERE d.datname = current_database()
"""
_LIVE_STATES = ", ".join(f"'{state}'" for state in LIVE)
JOBS_LEFT = f"SELECT count(*) FROM jobrelay.jobs WHERE state IN ({_LIVE_STATES})"
JOBS_SUCCEEDED = "SELECT count(*) FROM jobrelay.jobs WHERE state = 'succeeded'"
# The table may be gone in a later design; then there is no fold to wait for.
DELTAS_LEFT = """
SELECT CASE WHEN to_regclass('jobrelay.job_count_deltas') IS NULL THEN -1
            ELSE (SELECT count(*) FROM jobrelay.job_count_deltas) END
"""
WAL_DUMP = Path("/usr/lib/postgresql/15/bin/pg_waldump")


@dataclass(frozen=True)
class Snapshot:
    tables: dict[str, tuple[int, ...]]  # relname -> ins, upd, del, hot_upd, autovacuum, analyze
    commits: int
    wal_lsn: str
    checkpoints: int


@dataclass
class Footprint:
    jobs: int
    seconds: float
    submit_seconds: float  # of the window, the submissions' (their rate moves the commits)
    rows: dict[str, dict[str, int]]  # table -> {"ins", "upd", "del", "hot_upd"}
    commits: int
    own_commits: int
    wal_bytes: int
    checkpoints: int
    autovacuums: int
    folded: bool
    notes: list[str] = field(default_factory=list)
    wal_detail: dict[str, Any] = field(default_factory=dict)

    def per_job(self, count: int) -> float:
        return count / self.jobs

    @property
    def rows_written(self) -> int:
        return sum(r["ins"] + r["upd"] + r["del"] for r in self.rows.values())

    @property
    def jobs_hot_share(self) -> float | None:
        jobs = self.rows.get("jobs", {})
        return jobs["hot_upd"] / jobs["upd"] if jobs.get("upd") else None

    def as_json(self) -> dict[str, Any]:
        return {
            "jobs": self.jobs,
            "window_seconds": round(self.seconds, 2),
            "submit_seconds": round(self.submit_seconds, 2),
            "per_job": {
                "rows_written": self.per_job(self.rows_written),
                "rows": {
                    table: {kind: self.per_job(n) for kind, n in counts.items()}
                    for table, counts in self.rows.items()
                },
                "wal_bytes": self.per_job(self.wal_bytes),
                "commits": self.per_job(self.commits),
            },
            "jobs_hot_share": self.jobs_hot_share,
            "totals": {
                "rows": self.rows,
                "wal_bytes": self.wal_bytes,
                "commits": self.commits,
                "measuring_connection_commits_subtracted": self.own_commits,
            },
            "fold_in_window": self.folded,
            "checkpoints_in_window": self.checkpoints,
            "autovacuums_in_window": self.autovacuums,
            "notes": self.notes,
            "wal_detail": self.wal_detail,
        }


# --- snapshots ------------------------------------------------------------------------------


async def snapshot(conn: psycopg.AsyncConnection[Any]) -> Snapshot:
    """Both reads in one transaction: PostgreSQL fixes the statistics at their first read."""
    async with conn.transaction():
        tables = {row[0]: tuple(row[1:]) for row in await (await conn.execute(TABLES)).fetchall()}
        [(commits, lsn, checkpoints)] = await (await conn.execute(DATABASE)).fetchall()
    return Snapshot(tables, int(commits), lsn, int(checkpoints))


async def wal_between(conn: psycopg.AsyncConnection[Any], start: str, end: str) -> int:
    cursor = await conn.execute("SELECT pg_wal_lsn_diff(%s::pg_lsn, %s::pg_lsn)", (end, start))
    [(diff,)] = await cursor.fetchall()
    return int(diff)


def difference(before: Snapshot, after: Snapshot) -> tuple[dict[str, dict[str, int]], int]:
    """Rows written per table (tables the window wrote only) and the autovacuum runs."""
    rows: dict[str, dict[str, int]] = {}
    autovacuums = 0
    for table, now in after.tables.items():
        then = before.tables.get(table, (0,) * len(now))
        ins, upd, dele, hot, vacuums, analyzes = (a - b for a, b in zip(now, then, strict=True))
        autovacuums += vacuums + analyzes
        if ins or upd or dele:
            rows[table] = {"ins": ins, "upd": upd, "del": dele, "hot_upd": hot}
    return dict(sorted(rows.items())), autovacuums


# --- the services and the load --------------------------------------------------------------


def stop(processes: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM to all, then wait for each (a service drains and exits within seconds)."""
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


async def submit(port: int, token: str, jobs: int, connections: int) -> int:
    """``jobs`` POSTs over ``connections`` keep-alive connections, each accepted once; returns
    how many requests were sent again (load shedding's 503, or a connection the API closed after
    one): with the same Idempotency-Key, so a retry never makes a second job."""
    run = uuid.uuid4().hex[:8]
    numbers = iter(range(jobs))
    retries = 0
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{port}", limits=limits, headers=headers, timeout=60
    ) as http:

        async def accepted(key: str) -> None:
            nonlocal retries
            for _ in range(50):
                try:
                    response = await http.post(
                        "/v1/jobs", json=NOOP, headers={"Idempotency-Key": key}
                    )
                except httpx.TransportError:
                    retries += 1
                    await asyncio.sleep(0.1)
                    continue
                if response.status_code in (200, 201, 202):
                    return
                if response.status_code != 503:
                    raise SystemExit(f"the API answered {response.status_code}: {response.text}")
                retries += 1
                await asyncio.sleep(min(1.0, float(response.headers.get("Retry-After", 0.1))))
            raise SystemExit(f"{key}: not accepted after 50 tries")

        async def sender() -> None:
            for number in numbers:  # one shared iterator: each number is sent once
                await accepted(f"footprint-{run}-{number}")

        await asyncio.gather(*(sender() for _ in range(connections)))
    return retries


class Meter:
    """The measuring connection: polls, counting its own transactions (each statement one, in
    autocommit) so that they can be taken out of the database's commits."""

    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self.conn = conn
        self.transactions = 0

    async def value(self, statement: str) -> int:
        self.transactions += 1
        [(value,)] = await (await self.conn.execute(statement)).fetchall()
        return int(value)

    async def until(self, statement: str, timeout: float, processes: list[Any]) -> bool:
        """Polls ``statement`` until it reads 0 or less; False when ``timeout`` passed first."""
        deadline = time.monotonic() + timeout
        while await self.value(statement) > 0:
            if time.monotonic() > deadline:
                return False
            for process in processes:
                if process.poll() is not None:
                    raise SystemExit(f"a service exited with {process.returncode}")
            await asyncio.sleep(0.2)
        return True


async def checkpoint(admin_url: str) -> None:
    async with await psycopg.AsyncConnection.connect(libpq_url(admin_url), autocommit=True) as conn:
        await conn.execute("CHECKPOINT")


async def measure(args: argparse.Namespace) -> Footprint:
    with scratch_run("footprint") as scratch:
        url = scratch.database_url
        env = {
            "JOBRELAY_DATABASE_URL": url,
            "JOBRELAY_AMQP_URL": scratch.amqp_url,
            "JOBRELAY_METRICS_PORT": "0",
        }
        _, token = await create_client(url, "bench-footprint")
        port = free_port()
        services = [
            start_api(url, port, 1, JOBRELAY_AMQP_URL=scratch.amqp_url),
            start_service(["dispatcher"], env),
            start_service(["consumer", "--concurrency", str(args.concurrency)], env),
        ]
        try:
            return await _window(args, scratch.admin_url, url, port, token, services)
        finally:
            stop(services)


async def _window(
    args: argparse.Namespace,
    admin_url: str,
    url: str,
    port: int,
    token: str,
    services: list[subprocess.Popen[bytes]],
) -> Footprint:
    notes: list[str] = []
    async with await psycopg.AsyncConnection.connect(libpq_url(url), autocommit=True) as conn:
        warm = Meter(conn)
        await submit(port, token, WARM_UP, 4)
        if not await warm.until(JOBS_LEFT, args.timeout, services):
            raise SystemExit("the warm-up jobs did not finish")
        if not await warm.until(DELTAS_LEFT, args.fold_timeout, services):
            notes.append("the warm-up's count deltas were not folded before the window")
        await checkpoint(admin_url)
        before = await snapshot(conn)
        started = time.monotonic()
        meter = Meter(conn)
        meter.transactions = 1  # the snapshot's own transaction, committed after its read
        retries = await submit(port, token, args.jobs, args.connections)
        submit_seconds = time.monotonic() - started
        if retries:
            notes.append(f"{retries} submissions sent again (shed or connection closed)")
        if not await meter.until(JOBS_LEFT, args.timeout, services):
            raise SystemExit(f"jobs still live after {args.timeout}s")
        succeeded = await meter.value(JOBS_SUCCEEDED)
        if succeeded != args.jobs + WARM_UP:
            raise SystemExit(f"{succeeded - WARM_UP} of {args.jobs} jobs succeeded")
        folded = await meter.until(DELTAS_LEFT, args.fold_timeout, services)
        if await meter.value(DELTAS_LEFT) < 0:
            notes.append("no jobrelay.job_count_deltas table: no fold to wait for")
        seconds = time.monotonic() - started
    stop(services)  # their backends flush their statistics as they exit
    await asyncio.sleep(1.0)
    async with await psycopg.AsyncConnection.connect(libpq_url(url), autocommit=True) as conn:
        after = await snapshot(conn)
        wal = await wal_between(conn, before.wal_lsn, after.wal_lsn)
        rows, autovacuums = difference(before, after)
        footprint = Footprint(
            jobs=args.jobs,
            seconds=seconds,
            submit_seconds=submit_seconds,
            rows=rows,
            commits=after.commits - before.commits - meter.transactions,
            own_commits=meter.transactions,
            wal_bytes=wal,
            checkpoints=after.checkpoints - before.checkpoints,
            autovacuums=autovacuums,
            folded=folded,
            notes=notes,
        )
        if args.wal_detail:
            footprint.wal_detail = await wal_detail(conn, before.wal_lsn, after.wal_lsn)
    return footprint


# --- pg_waldump -----------------------------------------------------------------------------

# rmgr: Heap len (rec/tot): 54/ 190, tx: 735, lsn: 0/01A2B3C8, prev 0/01A2B390, desc: INSERT ...
#   blkref #0: rel 1663/16384/16390 blk 0 FPW
RECORD = re.compile(
    r"^rmgr: (?P<rmgr>\S+)\s+len \(rec/tot\):\s*(?P<rec>\d+)/\s*(?P<tot>\d+),.*?"
    r"desc: (?P<kind>\S+)(?P<rest>.*)$"
)
BLOCK = re.compile(r"rel (\d+)/(\d+)/(\d+)")


def waldump_binary() -> Path | None:
    if WAL_DUMP.exists():
        return WAL_DUMP
    found = shutil.which("pg_waldump")
    return Path(found) if found else None


async def wal_detail(conn: psycopg.AsyncConnection[Any], start: str, end: str) -> dict[str, Any]:
    """The window's WAL by record kind and by relation (the scratch database's; records of no
    relation, such as commits, under their kind), full-page images apart."""
    binary = waldump_binary()
    if binary is None:
        return {"error": "pg_waldump not found"}
    [(data_dir, database_oid)] = await (
        await conn.execute(
            "SELECT current_setting('data_directory'), oid FROM pg_database "
            "WHERE datname = current_database()"
        )
    ).fetchall()
    names = dict(
        await (
            await conn.execute(
                "SELECT pg_relation_filenode(c.oid)::text, n.nspname || '.' || c.relname "
                "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE pg_relation_filenode(c.oid) IS NOT NULL"
            )
        ).fetchall()
    )
    done = await asyncio.to_thread(
        subprocess.run,
        [str(binary), "-p", str(Path(data_dir, "pg_wal")), "-s", start, "-e", end],
        capture_output=True,
        text=True,
        check=False,
    )
    if not done.stdout:
        return {"error": f"pg_waldump: {done.stderr.strip()[-500:]}"}
    return summarize_waldump(done.stdout, str(database_oid), names)


def summarize_waldump(text: str, database_oid: str, names: dict[str, str]) -> dict[str, Any]:
    by_kind: Counter[str] = Counter()
    by_relation: Counter[str] = Counter()
    records: Counter[str] = Counter()
    fpi = 0
    total = 0
    for line in text.splitlines():
        match = RECORD.match(line)
        if not match:
            continue
        size = int(match["tot"])
        kind = f"{match['rmgr']} {match['kind']}"
        total += size
        by_kind[kind] += size
        records[kind] += 1
        if "FPW" in match["rest"]:
            fpi += size - int(match["rec"])
        block = BLOCK.search(match["rest"])
        if block is None:
            by_relation[f"(none: {match['rmgr']})"] += size
        elif block[2] == database_oid:
            by_relation[names.get(block[3], f"filenode {block[3]}")] += size
        else:
            by_relation[f"(database {block[2]})"] += size
    return {
        "bytes": total,
        "full_page_image_bytes": fpi,
        "write_commits": records["Transaction COMMIT"],
        "by_kind": [[kind, n, records[kind]] for kind, n in by_kind.most_common()],
        "by_relation": by_relation.most_common(),
    }


# --- output ---------------------------------------------------------------------------------


def report(footprint: Footprint) -> str:
    per = footprint.per_job
    lines = [
        f"footprint of {footprint.jobs:,} plain jobs (demo.sleep 0 through POST /v1/jobs), "
        f"window {footprint.seconds:.1f}s, of which submitting {footprint.submit_seconds:.1f}s "
        f"({footprint.jobs / footprint.submit_seconds:,.0f} jobs/s); per job:",
        f"  {'table':<22} {'ins':>6} {'upd':>6} {'del':>6} {'rows':>6} {'HOT upd':>8}",
    ]
    for table, counts in footprint.rows.items():
        written = counts["ins"] + counts["upd"] + counts["del"]
        lines.append(
            f"  {table:<22} {per(counts['ins']):>6.2f} {per(counts['upd']):>6.2f} "
            f"{per(counts['del']):>6.2f} {per(written):>6.2f} {per(counts['hot_upd']):>8.2f}"
        )
    hot = footprint.jobs_hot_share
    lines += [
        f"  {'total':<22} {'':>20} {per(footprint.rows_written):>6.2f}",
        f"  WAL: {per(footprint.wal_bytes):,.0f} bytes per job "
        f"({footprint.wal_bytes / 1_048_576:.1f} MiB in all)",
        f"  commits: {per(footprint.commits):.2f} per job, reads included "
        f"({footprint.own_commits} of the measuring connection subtracted)",
        "  HOT share of the updates of jobs: " + ("no update" if hot is None else f"{hot:.0%}"),
        f"  stats fold (job_count_deltas deleted) within the window: "
        f"{'yes' if footprint.folded else 'NO'}; checkpoints in the window: "
        f"{footprint.checkpoints}; autovacuum/autoanalyze runs: {footprint.autovacuums}",
    ]
    lines += [f"  note: {note}" for note in footprint.notes]
    if footprint.wal_detail:
        lines += wal_lines(footprint.wal_detail, footprint.jobs)
    return "\n".join(lines)


def wal_lines(detail: dict[str, Any], jobs: int, top: int = 12) -> list[str]:
    if "error" in detail:
        return [f"  WAL detail: {detail['error']}"]
    lines = [
        f"  WAL by record kind (pg_waldump; {detail['bytes'] / jobs:,.0f} bytes per job, of which "
        f"full-page images {detail['full_page_image_bytes'] / jobs:,.0f}; "
        f"{detail['write_commits'] / jobs:.2f} writing transactions per job, their COMMIT "
        "records: the other commits read only):",
    ]
    lines += [
        f"    {kind:<28} {size / jobs:>7,.0f} B/job  {count / jobs:>5.2f} records/job"
        for kind, size, count in detail["by_kind"][:top]
    ]
    lines.append("  WAL by relation:")
    lines += [
        f"    {name:<48} {size / jobs:>7,.0f} B/job" for name, size in detail["by_relation"][:top]
    ]
    return lines


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--connections", type=int, default=16, help="concurrent HTTP connections")
    parser.add_argument("--concurrency", type=int, default=32, help="the consumer's")
    parser.add_argument("--timeout", type=float, default=300.0, help="for the jobs to finish")
    parser.add_argument("--fold-timeout", type=float, default=20.0, help="for one stats fold")
    parser.add_argument("--wal-detail", action="store_true", help="pg_waldump's view of the WAL")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    return parser.parse_args(argv)


def main() -> int:
    args = parse_args()
    footprint = asyncio.run(measure(args))
    print(json.dumps(footprint.as_json(), indent=2) if args.json else report(footprint))
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
