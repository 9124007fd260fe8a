"""How long upgrading a database that holds N jobs takes, and how long writes wait meanwhile.

    python scripts/servers.py run -- python -m benchmarks.upgrade [--jobs 1000000] [--to head]

Reads JOBRELAY_DATABASE_URL (admin: creates a scratch database, dropped at the end). The
database is migrated to ``--from`` (0002: the schema before the flat-storage change), filled
with ``--jobs`` finished jobs by ``benchmarks/_storage_fill.py``, then upgraded to ``--to``
while a writer inserts a job every 10 ms on its own connection (``benchmarks/submit.py``'s
accept statement: job, outbox row, event). Prints the upgrade's duration and the writer's
longest wait: the time the application could not accept a job.
"""

from __future__ import annotations

import argparse
import threading
import time
import uuid

import psycopg

from benchmarks import _common as common, _storage_fill as fill, submit
from jobrelay.core.ids import new_id
from jobrelay.db.engine import libpq_url
from tests.support import databases


class Writer(threading.Thread):
    """Accepts a job every ``interval`` seconds until stopped; remembers the longest insert."""

    def __init__(self, url: str, client_id: str, interval: float = 0.01) -> None:
        super().__init__(daemon=True)
        self.url, self.client_id, self.interval = url, client_id, interval
        self.longest = 0.0
        self.count = 0
        self.stopping = threading.Event()

    def run(self) -> None:
        with psycopg.connect(libpq_url(self.url), autocommit=True) as conn:
            while not self.stopping.is_set():
                started = time.perf_counter()
                key = f"w-{uuid.uuid4().hex}"
                conn.execute(submit.RAW_INSERT, (new_id(), self.client_id, key, "h", "{}"))
                self.longest = max(self.longest, time.perf_counter() - started)
                self.count += 1
                time.sleep(self.interval)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--from", dest="start", default="0002")
    parser.add_argument("--to", dest="target", default="head")
    args = parser.parse_args()

    admin_url = common.admin_database_url()
    name = f"jobrelay_bench_{uuid.uuid4().hex[:8]}"
    databases.admin_execute(admin_url, f'CREATE DATABASE "{name}"')
    url = databases.with_database(admin_url, name)
    try:
        databases.migrate(url, args.start)
        report = fill.fill(url, args.jobs)
        fill.settle(url)
        print(f"filled {report.jobs:,} finished jobs at {args.start} in {report.seconds:.1f}s")
        with psycopg.connect(libpq_url(url)) as conn:
            [client_id] = fill.fill_client_ids(conn)[:1]
        writer = Writer(url, client_id)
        writer.start()
        time.sleep(1.0)  # the writer's usual latency first
        baseline = writer.longest
        started = time.perf_counter()
        databases.migrate(url, args.target)
        took = time.perf_counter() - started
        time.sleep(0.5)
        writer.stopping.set()
        writer.join()
        print(
            f"upgrade {args.start} -> {args.target} at {args.jobs:,} jobs: {took:.2f}s; "
            f"a writer accepting a job every 10 ms waited at most {writer.longest * 1000:.0f} ms "
            f"(before the upgrade: {baseline * 1000:.0f} ms; {writer.count:,} jobs accepted)"
        )
    finally:
        common.drop_database(admin_url, url)


if __name__ == "__main__":
    main()
