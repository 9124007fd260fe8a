"""What flow control costs: today's code beside the last landing before it, in the same run.

    python scripts/servers.py run -- python -m benchmarks.flow [--jobs 5000] [--rounds 3]

Reads JOBRELAY_DATABASE_URL (admin: creates scratch databases), JOBRELAY_AMQP_URL and
JOBRELAY_RABBITMQ_API_URL (a scratch vhost per measurement); drops them all at the end.

Two trees: ``before``, the last landing before flow control (``--before``, commit bca1379),
checked out in a temporary ``git worktree`` (removed at the end), and ``now``, this checkout.
Each runs its own services and its own migrations (PYTHONPATH=<tree>/services, cwd <tree>) on
a scratch database migrated by that code; each measurement gets a fresh copy of its tree's
migrated database and a fresh vhost. Jobs are written through that tree's own
``Store.accept_jobs`` (``benchmarks/_flow_preload.py``, a subprocess under the tree's
PYTHONPATH), so each schema gets its rows as its own accept path writes them.

Variants:
- ``before``: ``demo.sleep {"seconds": 0}`` jobs (the no-op) on the last landing's code;
- ``now``: the same jobs on today's code, no flow feature used (relay window: its default, 500);
- ``now, limited``: today's code, every job a ``bench.limited`` no-op
  (``benchmarks/flow_handlers.py``: ``concurrency=1`` per key, loaded into every service with
  JOBRELAY_HANDLERS) over 1,000 keys, priorities uniformly from -10 to 10;
- ``now, window 0`` (only with ``--variants ...,window 0``, end to end only): the ``now`` jobs
  with JOBRELAY_RELAY_WINDOW=0, which parts the window's cost from the rest of today's code.

Measurements, alternated per round (the order of the variants turns each round) so that the
machine's drift hits all alike:
1. end to end: ``--jobs`` preloaded jobs, then a real dispatcher and one consumer
   (``--concurrency``) started; timed until every job succeeded. "Steady" = completions between
   the first and the last (startup excluded), as ``benchmarks/e2e.py`` computes it; CPU seconds
   per 1,000 jobs of each process over that window, as e2e.py measures it.
2. the relay alone: ``--relay-jobs`` preloaded jobs, a dispatcher and no consumer; publishes per
   second between the first and the last ``published_at`` (the database clock). Today's code runs
   with JOBRELAY_RELAY_WINDOW=0: with no consumer a window stops at 500 messages.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import e2e
from benchmarks._common import median, server_urls, sql as common_sql
from benchmarks.flow_handlers import HANDLERS
from tests.support import databases
from tests.support.servers import create_vhost, delete_vhost, vhost_amqp_url

PRELOAD_SCRIPT = ROOT / "benchmarks" / "_flow_preload.py"

# Both schemas have these columns (the clients table is older than both trees).
ADD_CLIENT = """
INSERT INTO jobrelay.clients (id, name, token_hash) VALUES (%(id)s, 'bench-flow', %(hash)s)
"""

# What the journal holds per event (a held job is one the claim put back, at its key's limit).
EVENTS = """
SELECT string_agg(event || ' ' || n, ', ' ORDER BY event)
FROM (SELECT event::text, count(*) AS n FROM jobrelay.job_events GROUP BY event) counts
"""

PUBLISHED = "SELECT count(published_at) FROM jobrelay.outbox"
PUBLISH_WINDOW = """
SELECT count(published_at), EXTRACT(EPOCH FROM min(published_at)),
       EXTRACT(EPOCH FROM max(published_at))
FROM jobrelay.outbox
"""


@dataclass(frozen=True)
class Tree:
    label: str
    root: Path
    template: str = ""  # its migrated database, copied for every measurement

    def env(self) -> dict[str, str]:
        # The tree's jobrelay first; this checkout after it for benchmarks.flow_handlers.
        return {"PYTHONPATH": f"{self.root / 'services'}{os.pathsep}{ROOT}"}


@dataclass(frozen=True)
class Variant:
    name: str
    tree: Tree
    kind: str  # "noop" or "limited" (benchmarks/_flow_preload.py)
    env: dict[str, str] = field(default_factory=dict)  # more settings for its services


@dataclass
class Figures:
    e2e: dict[str, list[e2e.Throughput]] = field(default_factory=dict)
    relay: dict[str, list[float]] = field(default_factory=dict)  # publishes/s per round
    relay_cpu: dict[str, list[dict[str, float]]] = field(default_factory=dict)


@dataclass
class Run:
    admin_url: str
    amqp_base: str
    api_url: str
    args: argparse.Namespace
    workdir: Path

    def run_python(self, tree: Tree, argv: list[str]) -> None:
        completed = subprocess.run(
            [sys.executable, *argv],
            env=os.environ | tree.env(),
            cwd=tree.root,
            capture_output=True,
            text=True,
            check=False,
        )
        if completed.returncode:
            raise SystemExit(f"{tree.label}: {argv[0]} failed:\n{completed.stderr[-3000:]}")

    def migrate_template(self, tree: Tree) -> Tree:
        name = f"jobrelay_flow_tpl_{tree.label}_{uuid.uuid4().hex[:6]}"
        databases.admin_execute(self.admin_url, f'CREATE DATABASE "{name}"')
        url = databases.with_database(self.admin_url, name)
        code = (
            "import sys; from jobrelay.db import migrations; "
            "migrations.upgrade(sys.argv[1], 'head', configure_logger=False)"
        )
        self.run_python(tree, ["-c", code, url])
        return Tree(tree.label, tree.root, name)

    @contextlib.asynccontextmanager
    async def scratch(self, variant: Variant, jobs: int, seed: int):  # type: ignore[no-untyped-def]
        """A copy of the variant's tree's database holding ``jobs`` preloaded jobs of one client,
        and a fresh vhost: (database URL, AMQP URL, client id)."""
        database = databases.copy_template(self.admin_url, variant.tree.template)
        vhost = f"jobrelay-flow-{uuid.uuid4().hex[:8]}"
        create_vhost(self.api_url, vhost)
        try:
            client_id = uuid.uuid4()
            await common_sql(database, ADD_CLIENT, {"id": client_id, "hash": f"h-{client_id}"})
            argv = [str(PRELOAD_SCRIPT), database, str(client_id), str(jobs), variant.kind]
            self.run_python(variant.tree, [*argv, str(seed)])
            await common_sql(database, "VACUUM ANALYZE")
            yield database, vhost_amqp_url(self.amqp_base, vhost), client_id
        finally:
            delete_vhost(self.api_url, vhost)
            databases.drop_database(self.admin_url, database)

    def start(
        self,
        variant: Variant,
        service: list[str],
        database: str,
        amqp_url: str,
        extra: dict[str, str],
    ) -> subprocess.Popen[bytes]:
        env = os.environ | {
            "JOBRELAY_DATABASE_URL": database,
            "JOBRELAY_AMQP_URL": amqp_url,
            "JOBRELAY_LOG_LEVEL": "WARNING",
            "JOBRELAY_METRICS_PORT": "0",
            "JOBRELAY_BUILTINS": "true",  # demo.sleep beside the limited types
        }
        env = env | variant.env | extra | variant.tree.env()
        log = open(self.workdir / f"{service[0]}.log", "ab")  # noqa: SIM115 (the child keeps it)
        return subprocess.Popen(
            [sys.executable, "-m", "jobrelay", *service],
            env=env,
            cwd=variant.tree.root,
            stdout=log,
            stderr=log,
        )

    async def end_to_end(self, variant: Variant, seed: int) -> e2e.Throughput:
        jobs = self.args.jobs
        async with self.scratch(variant, jobs, seed) as (database, amqp_url, client_id):
            started = time.perf_counter()
            concurrency = ["--concurrency", str(self.args.concurrency)]
            groups = {
                "dispatcher": [self.start(variant, ["dispatcher"], database, amqp_url, {})],
                "consumer": [
                    self.start(variant, ["consumer", *concurrency], database, amqp_url, {})
                ],
            }
            meter = e2e.CpuMeter({name: [p.pid for p in group] for name, group in groups.items()})
            try:
                seen, wall = await self.wait_done(database, client_id, groups, meter, started)
            finally:
                e2e.stop_all(groups)
            [(n, first, last, *_)] = await common_sql(
                database, e2e.WINDOW, {"client_id": client_id}
            )
            [(events,)] = await common_sql(database, EVENTS)
        result = e2e.Throughput(variant.name, n, wall, float(first), float(last))
        result.cpu = meter.per_thousand(jobs - seen)
        result.notes.append(f"journal events {events}")
        return result

    async def wait_done(
        self,
        database: str,
        client_id: uuid.UUID,
        groups: dict[str, list[subprocess.Popen[bytes]]],
        meter: e2e.CpuMeter,
        started: float,
    ) -> tuple[int, float]:
        """Until every job succeeded: the jobs done when the meter started, and the wall time."""
        jobs, seen = self.args.jobs, 0
        deadline = started + self.args.timeout
        while True:
            [(done, failed)] = await common_sql(database, e2e.COUNT_DONE, {"client_id": client_id})
            if failed:
                raise SystemExit(f"{failed} jobs failed: a no-op must not fail")
            if done and not seen:
                seen = done
                meter.start()
            if done >= jobs:
                meter.stop()
                return seen, time.perf_counter() - started
            if time.perf_counter() > deadline:
                raise SystemExit(f"only {done}/{jobs} done after {self.args.timeout}s")
            self.check_alive(groups)
            await asyncio.sleep(0.05)

    def check_alive(self, groups: dict[str, list[subprocess.Popen[bytes]]]) -> None:
        for name, group in groups.items():
            for process in group:
                if process.poll() is not None:
                    log = (self.workdir / f"{name}.log").read_text(errors="replace")
                    raise SystemExit(f"{name} exited with {process.returncode}:\n{log[-3000:]}")

    async def relay(self, variant: Variant, seed: int) -> tuple[float, dict[str, float]]:
        """Publishes per second of a dispatcher alone over a preloaded outbox, and its CPU (and
        the servers') per 1,000 publishes."""
        rows = self.args.relay_jobs
        window = {"JOBRELAY_RELAY_WINDOW": "0"} if variant.tree.label == "now" else {}
        async with self.scratch(variant, rows, seed) as (database, amqp_url, _):
            started = time.perf_counter()
            groups = {
                "dispatcher": [self.start(variant, ["dispatcher"], database, amqp_url, window)]
            }
            meter = e2e.CpuMeter({"dispatcher": [groups["dispatcher"][0].pid]})
            try:
                seen = 0
                while True:
                    [(published,)] = await common_sql(database, PUBLISHED)
                    if published and not seen:
                        seen = published
                        meter.start()
                    if published >= rows:
                        meter.stop()
                        break
                    if time.perf_counter() > started + self.args.timeout:
                        raise SystemExit(f"relay: only {published}/{rows} published")
                    self.check_alive(groups)
                    await asyncio.sleep(0.05)
            finally:
                e2e.stop_all(groups)
            [(n, first, last)] = await common_sql(database, PUBLISH_WINDOW)
        rate = (n - 1) / (float(last) - float(first)) if last > first else 0.0
        return rate, meter.per_thousand(rows - seen)


# --- the report ----------------------------------------------------------------------------


def spread(values: list[float]) -> str:
    """(max - min) / median of the rounds."""
    middle = median(values)
    return f"{(max(values) - min(values)) / middle:.0%}" if len(values) > 1 and middle else "-"


def table(title: str, rates: dict[str, list[float]], unit: str) -> None:
    rounds = max(len(values) for values in rates.values())
    base = median(rates["before"])
    header = "".join(f"{f'round {i + 1}':>10}" for i in range(rounds))
    print(f"\n{title}")
    print(f"{'variant':<14}{header}{'median':>10}{'vs before':>11}{'spread':>8}  ({unit})")
    for name, values in rates.items():
        cells = "".join(f"{value:>10,.0f}" for value in values)
        middle = median(values)
        print(f"{name:<14}{cells}{middle:>10,.0f}{middle / base:>11.3f}{spread(values):>8}")
    for name, values in rates.items():
        if name != "before":
            pairs = zip(values, rates["before"], strict=False)
            ratios = ", ".join(f"{value / before:.2f}" for value, before in pairs)
            print(f"  {name}: per round, to that round's before: {ratios}")


def cpu_lines(cpus: dict[str, list[dict[str, float]]]) -> None:
    print("CPU ms per 1,000 jobs (median of the rounds):")
    for name, rounds in cpus.items():
        processes = sorted({process for cpu in rounds for process in cpu})
        parts = [
            f"{process} {median([cpu[process] for cpu in rounds if process in cpu]):.0f}"
            for process in processes
        ]
        print(f"  {name:<14}{', '.join(parts)}")


def report(figures: Figures, args: argparse.Namespace) -> None:
    steady = {name: [r.steady for r in runs] for name, runs in figures.e2e.items()}
    if "before" in steady:
        title = f"end to end, {args.jobs:,} jobs, 1 dispatcher + 1 consumer x {args.concurrency}"
        table(f"{title}, steady jobs/s:", steady, "jobs/s")
        cpu_lines({name: [r.cpu for r in runs] for name, runs in figures.e2e.items()})
    if "before" in figures.relay:
        title = f"relay alone, {args.relay_jobs:,} jobs, no consumer (now: JOBRELAY_RELAY_WINDOW=0)"
        table(f"{title}, publishes/s:", figures.relay, "msgs/s")
        cpu_lines(figures.relay_cpu)
    if "now" in steady and "now, limited" in steady:
        now, limited = median(steady["now"]), median(steady["now, limited"])
        print(
            f"\ncost of the per-key limit (1,000 keys) and mixed priorities, end to end: "
            f"{limited:,.0f} against {now:,.0f} jobs/s = {limited / now:.3f} "
            f"({(now - limited) / now:.1%} fewer jobs/s)"
        )


# --- main ----------------------------------------------------------------------------------


async def measure(run: Run, variants: list[Variant]) -> Figures:
    figures = Figures()
    rng = random.Random(run.args.seed)
    for number in range(run.args.rounds):
        turn = number % len(variants)
        order = variants[turn:] + variants[:turn]
        print(f"round {number + 1}: {', '.join(v.name for v in order)}", flush=True)
        for variant in order if "e2e" in run.args.measure else []:
            result = await run.end_to_end(variant, rng.randrange(2**31))
            figures.e2e.setdefault(variant.name, []).append(result)
            print(f"  e2e   {result.line()}; {result.notes[0]}", flush=True)
        for variant in order if "relay" in run.args.measure else []:
            if variant.name == "now, window 0":
                continue  # the relay alone runs today's code with no window anyway
            rate, cpu = await run.relay(variant, rng.randrange(2**31))
            figures.relay.setdefault(variant.name, []).append(rate)
            figures.relay_cpu.setdefault(variant.name, []).append(cpu)
            print(f"  relay {variant.name:<13} {rate:>7,.0f} publishes/s", flush=True)
    return figures


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=5000, help="per end-to-end run")
    parser.add_argument(
        "--relay-jobs", type=int, default=0, help="per relay run; default 2 x --jobs"
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=32, help="the consumer's")
    parser.add_argument("--timeout", type=float, default=300.0, help="per measurement")
    parser.add_argument("--before", default="bca1379", help="the last landing's commit")
    parser.add_argument("--seed", type=int, default=25)
    parser.add_argument("--measure", default="e2e,relay", help="e2e, relay or both")
    parser.add_argument(
        "--variants",
        default="before,now,limited",
        help="which of them: before, now, limited, and 'window 0' (e2e only: the default "
        "variant's jobs with JOBRELAY_RELAY_WINDOW=0, to part the window's cost from the rest)",
    )
    args = parser.parse_args(argv)
    args.relay_jobs = args.relay_jobs or 2 * args.jobs
    return args


def main() -> int:
    args = parse_args()
    admin_url, amqp_base, api_url = server_urls("flow")
    workdir = Path(tempfile.mkdtemp(prefix="jobrelay-flow-"))
    worktree = workdir / "before"
    subprocess.run(
        ["git", "worktree", "add", "--detach", str(worktree), args.before],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    run = Run(admin_url, amqp_base, api_url, args, workdir)
    trees: list[Tree] = []
    try:
        before = run.migrate_template(Tree("before", worktree))
        trees.append(before)
        now = run.migrate_template(Tree("now", ROOT))
        trees.append(now)
        variants = [
            Variant("before", before, "noop"),
            Variant("now", now, "noop"),
            Variant("now, limited", now, "limited", {"JOBRELAY_HANDLERS": HANDLERS}),
            Variant("now, window 0", now, "noop", {"JOBRELAY_RELAY_WINDOW": "0"}),
        ]
        print(
            f"before = {args.before} ({worktree}), now = {ROOT}; {os.cpu_count()} CPUs; "
            f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}",
            flush=True,
        )
        chosen = set(args.variants.split(","))
        variants = [v for v in variants if v.name.split(", ")[-1] in chosen]
        figures = asyncio.run(measure(run, variants))
        report(figures, args)
        print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    finally:
        for tree in trees:
            databases.admin_execute(
                admin_url, f'DROP DATABASE IF EXISTS "{tree.template}" WITH (FORCE)'
            )
        subprocess.run(
            ["git", "worktree", "remove", "--force", str(worktree)], cwd=ROOT, check=False
        )
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
