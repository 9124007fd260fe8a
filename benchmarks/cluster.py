"""The relay and end-to-end benchmarks on a three-node RabbitMQ cluster beside a single node, in
one run, alternated per round.

    python -m benchmarks.cluster [--rounds 3] [--nodes 3] [--relay-rows 10000] \\
        [--relay-rate 200] [--e2e-jobs 3000] [--e2e-rate 100] [--seconds 8] [--base-dir /tmp]

Needs no servers: it starts two sets with ``scripts/servers.py up``, each in a directory of its
own under ``--base-dir``: "single" (one RabbitMQ node) and "cluster" (``--nodes`` RabbitMQ nodes
clustered; jobrelay's work queues are quorum queues with a replica on every node, which it checks
before the first round). Each set has its own PostgreSQL, started by the same script with the
same settings, so that only the broker differs and each set's CPU figures count its own servers.
Both sets run for the whole benchmark (the idle one takes a little CPU from every round). Then,
per round, single first, then cluster (A/B/A/B: the machine's speed drifts from minute to minute,
and alternating lets the drift hit both alike), each benchmark printing its own lines as it does
when run alone (about 6 minutes in all on 2 cores with the defaults):

1. ``benchmarks/relay.py``: raw confirmed publishes, through the first node on the cluster (where
   the dispatcher connects first, and where its queue has its leader), then the relay from a
   preloaded outbox of ``--relay-rows`` rows, then commit -> confirm latency at ``--relay-rate``
   jobs/s for ``--seconds``;
2. ``benchmarks/e2e.py --skip-celery --rounds 1``: ``--e2e-jobs`` no-op jobs from a preloaded
   outbox through a real dispatcher and one consumer (concurrency 32) to stored results, then
   submit -> result stored latency at ``--e2e-rate`` jobs/s for ``--seconds``.

At the end it prints one table: per benchmark and figure (relay and raw msgs/s, relay/raw,
commit -> confirm p50/p99; e2e steady and wall jobs/s, submit -> result p50/p99, as those
benchmarks report them), the median over the rounds on the single node and on the cluster, the
ratio cluster/single, and each round's value; and the load average before and after.

Both server sets are stopped and their data deleted at the end, also after a failure, Ctrl-C or
SIGTERM (their logs are kept then, and the directory printed).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

import aio_pika

from benchmarks import e2e, relay
from benchmarks._common import ROOT, first_node, median, percentile
from jobrelay import eventloop
from jobrelay.broker.topology import declare_topology
from jobrelay.core import topology as names
from tests.support.servers import create_vhost, delete_vhost, management_request, vhost_amqp_url

SERVERS = ROOT / "scripts" / "servers.py"
# What `servers.py up` exports: replaced as a whole when a round switches to a set.
EXPORTED = (
    "JOBRELAY_DATABASE_URL",
    "JOBRELAY_AMQP_URL",
    "JOBRELAY_RABBITMQ_API_URL",
    "JOBRELAY_SERVERS_DIR",
    "JOBRELAY_RABBITMQ_NODE",
    "JOBRELAY_RABBITMQ_NODES",
    "JOBRELAY_RABBITMQ_CLUSTER",
)
# Fixed ports would make both sets ask for the same ones: each set picks free ones.
FIXED_PORTS = (
    "JOBRELAY_PG_PORT",
    "JOBRELAY_AMQP_PORT",
    "JOBRELAY_RABBITMQ_MGMT_PORT",
    "JOBRELAY_RABBITMQ_DIST_PORT",
)
SERVERS_TIMEOUT = 300.0  # one `up` or `down`; a cluster boots its nodes, then joins them
Round = dict[tuple[str, str], float]  # (benchmark, figure) -> value


# --- the two server sets ------------------------------------------------------------------------


@dataclass
class ServerSet:
    name: str
    nodes: int
    directory: Path
    env: dict[str, str] = field(default_factory=dict)  # the export lines of its `up`
    rounds: list[Round] = field(default_factory=list)

    def servers(self, *args: str) -> tuple[int, str]:
        """``scripts/servers.py ARGS`` on this set's directory: its exit code and stdout (its
        log lines go to stderr). Interrupted, it is left to finish: Ctrl-C reaches it too,
        and it cleans up what it had started."""
        env = {k: v for k, v in os.environ.items() if k not in EXPORTED + FIXED_PORTS}
        env["JOBRELAY_SERVERS_DIR"] = str(self.directory)
        process = subprocess.Popen(
            [sys.executable, str(SERVERS), *args], env=env, stdout=subprocess.PIPE, text=True
        )
        try:
            stdout, _ = process.communicate(timeout=SERVERS_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise
        except BaseException:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(SERVERS_TIMEOUT)
            process.kill()
            process.wait()
            raise
        return process.returncode, stdout

    def up(self) -> None:
        code, exports = self.servers("up", "--rabbitmq-nodes", str(self.nodes))
        if code != 0:
            raise SystemExit(f"{self.name}: scripts/servers.py up exited with {code}")
        self.env = parse_exports(exports)
        missing = [name for name in EXPORTED[:4] if name not in self.env]
        if missing:
            raise SystemExit(f"{self.name}: scripts/servers.py up exported no {', '.join(missing)}")
        urls = self.env["JOBRELAY_AMQP_URL"].split(",")
        if len(urls) != self.nodes:
            raise SystemExit(
                f"{self.name}: JOBRELAY_AMQP_URL lists {len(urls)} node(s), not {self.nodes}"
            )

    def down(self) -> bool:
        """Stop the servers and delete their data; whether that worked."""
        try:
            code, _ = self.servers("down", "--delete-data")
        except subprocess.TimeoutExpired:
            return False
        return code == 0

    @contextlib.contextmanager
    def environment(self) -> Iterator[None]:
        """``os.environ`` as under ``servers.py run`` on this set: the benchmarks' services
        inherit it, and e2e's CPU meter finds the set's servers through it."""
        saved = os.environ.copy()
        for name in EXPORTED:
            os.environ.pop(name, None)
        os.environ.update(self.env)
        try:
            yield
        finally:
            os.environ.clear()
            os.environ.update(saved)


def parse_exports(text: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for line in text.splitlines():
        words = shlex.split(line)
        if len(words) == 2 and words[0] == "export" and "=" in words[1]:
            name, value = words[1].split("=", 1)
            env[name] = value
    return env


def check_replicas(server_set: ServerSet) -> str:
    """Declare jobrelay's topology in a scratch vhost through the first node, as the
    benchmarks do, and read back where the work queue's replicas are: every node must hold
    one, or the comparison is not the one it claims to be."""
    api_url = server_set.env["JOBRELAY_RABBITMQ_API_URL"]
    running = [
        node["name"]
        for node in management_request(api_url, "GET", "/api/nodes")
        if node.get("running")
    ]
    if len(running) != server_set.nodes:
        raise SystemExit(f"{server_set.name}: {len(running)} of {server_set.nodes} nodes running")
    vhost = f"jobrelay-bench-check-{uuid.uuid4().hex[:8]}"
    create_vhost(api_url, vhost)
    try:
        amqp_url = vhost_amqp_url(server_set.env["JOBRELAY_AMQP_URL"], vhost)
        asyncio.run(declare_queues(first_node(amqp_url)))
        members, leader = queue_members(api_url, vhost, names.DEFAULT_QUEUE)
    finally:
        delete_vhost(api_url, vhost)
    if sorted(members) != sorted(running):
        raise SystemExit(
            f"{server_set.name}: {names.DEFAULT_QUEUE} has replicas on {members}, "
            f"the nodes are {running}"
        )
    return (
        f"{server_set.name}: {len(running)} RabbitMQ node(s) running; {names.DEFAULT_QUEUE} is a "
        f"quorum queue with {len(members)} replica(s), leader {leader}"
    )


async def declare_queues(amqp_url: str) -> None:
    connection = await aio_pika.connect(amqp_url)
    async with connection:
        await declare_topology(await connection.channel(), delivery_limit=50)


def queue_members(
    api_url: str, vhost: str, queue: str, timeout: float = 15
) -> tuple[list[str], str]:
    """A quorum queue's replicas and leader, as soon as the management API shows them."""
    path = f"/api/queues/{urllib.parse.quote(vhost, safe='')}/{urllib.parse.quote(queue, safe='')}"
    deadline = time.monotonic() + timeout
    while True:
        info = management_request(api_url, "GET", path)
        if info.get("type") != "quorum":
            raise SystemExit(f"{queue} is a {info.get('type')} queue, not a quorum queue")
        if info.get("members") and info.get("leader"):
            return list(info["members"]), str(info["leader"])
        if time.monotonic() > deadline:
            raise SystemExit(f"the management API shows no replicas of {queue} after {timeout}s")
        time.sleep(0.5)


# --- one round on one set -------------------------------------------------------------------


def run_round(server_set: ServerSet, args: argparse.Namespace) -> Round:
    env = server_set.env
    admin_url = env["JOBRELAY_DATABASE_URL"]
    amqp_url = env["JOBRELAY_AMQP_URL"]
    api_url = env["JOBRELAY_RABBITMQ_API_URL"]
    relay_args = relay.parse_args(
        [
            "--rows",
            str(args.relay_rows),
            "--rate",
            str(args.relay_rate),
            "--seconds",
            str(args.seconds),
        ]
    )
    e2e_args = e2e.parse_args(
        [
            "--skip-celery",
            "--rounds",
            "1",
            "--jobs",
            str(args.e2e_jobs),
            "--rate",
            str(args.e2e_rate),
            "--seconds",
            str(args.seconds),
        ]
    )
    with server_set.environment():
        relayed = eventloop.run(relay.measure(relay_args, admin_url, amqp_url, api_url))
        ended = e2e.measure(e2e_args, admin_url, amqp_url, api_url)
    return relay_figures(relayed) | e2e_figures(ended)


def relay_figures(figures: relay.RelayFigures) -> Round:
    latencies = figures.latencies
    return {
        ("relay", "raw confirmed publish, msgs/s"): figures.raw_mean,
        ("relay", "relay, msgs/s"): figures.relay,
        ("relay", "relay / raw"): figures.relay / figures.raw_mean,
        ("relay", "commit -> confirm p50, ms"): relay.percentile(latencies, 50),
        ("relay", "commit -> confirm p99, ms"): relay.percentile(latencies, 99),
    }


def e2e_figures(results: e2e.Results) -> Round:
    if len(results.jobrelay) != 1 or "total" not in results.jobrelay_latency:
        raise SystemExit("benchmarks/e2e.py returned no jobrelay throughput or latency")
    [run] = results.jobrelay
    total = results.jobrelay_latency["total"]
    return {
        ("e2e", "no-op jobs/s, steady"): run.steady,
        ("e2e", "no-op jobs/s, wall"): run.wall_rate,
        # e2e.py's percentiles (benchmarks/_common.py), as relay.py's above are its own
        ("e2e", "submit -> result p50, ms"): percentile(total, 0.50),
        ("e2e", "submit -> result p99, ms"): percentile(total, 0.99),
    }


# --- the table ------------------------------------------------------------------------------


def formatted(figure: str, value: float) -> str:
    if figure.endswith(", ms"):
        return f"{value:.1f}"
    if "/s" in figure:
        return f"{value:,.0f}"
    return f"{value:.2f}"


def table(single: ServerSet, cluster: ServerSet) -> list[str]:
    header = (
        f"{'benchmark':<9} {'figure':<30} {'single':>8} {'cluster':>8} {'cluster/single':>14}"
        f"  rounds (single | cluster)"
    )
    lines = [header, "-" * len(header)]
    for key in single.rounds[0]:
        benchmark, figure = key
        on_single = [r[key] for r in single.rounds]
        on_cluster = [r[key] for r in cluster.rounds]
        a, b = median(on_single), median(on_cluster)
        per_round = (
            " ".join(formatted(figure, v) for v in on_single)
            + " | "
            + " ".join(formatted(figure, v) for v in on_cluster)
        )
        lines.append(
            f"{benchmark:<9} {figure:<30} {formatted(figure, a):>8} {formatted(figure, b):>8} "
            f"{b / a if a else float('nan'):>14.2f}  {per_round}"
        )
    return lines


def load_average() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


# --- main ----------------------------------------------------------------------------------


def interrupt_on_terminate(signum: int, frame: FrameType | None) -> None:
    """SIGTERM and SIGHUP as Ctrl-C: the benchmarks' own cleanup runs, then the servers are
    deleted. Inside a running event loop the SIGINT handler is asyncio's, which cancels the
    benchmark's main task (its ``finally`` blocks drop the scratch database and vhosts); a
    process started in the background has SIGINT ignored, and gets KeyboardInterrupt anyway."""
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler):
        handler(signal.SIGINT, frame)
    else:
        raise KeyboardInterrupt


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds on each set")
    parser.add_argument("--nodes", type=int, default=3, help="RabbitMQ nodes of the cluster")
    parser.add_argument("--relay-rows", type=int, default=10_000, help="preloaded outbox rows")
    parser.add_argument("--relay-rate", type=float, default=200.0, help="relay latency, jobs/s")
    parser.add_argument("--e2e-jobs", type=int, default=3000, help="no-op jobs per e2e run")
    parser.add_argument("--e2e-rate", type=float, default=100.0, help="e2e latency, jobs/s")
    parser.add_argument("--seconds", type=float, default=8.0, help="each latency phase")
    parser.add_argument(
        "--base-dir", default=tempfile.gettempdir(), help="where the servers' directories go"
    )
    args = parser.parse_args()
    if args.rounds < 1 or args.nodes < 2:
        parser.error("--rounds must be at least 1 and --nodes at least 2")
    return args


def main() -> int:
    args = parse_args()
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, interrupt_on_terminate)
    base = Path(args.base_dir)
    sets = [
        ServerSet("single", 1, servers_directory(base, "single")),
        ServerSet("cluster", args.nodes, servers_directory(base, "cluster")),
    ]
    print(
        f"cluster benchmark: {args.rounds} round(s) on each of a single RabbitMQ node and a "
        f"{args.nodes}-node cluster, alternated; relay {args.relay_rows:,} rows, latency at "
        f"{args.relay_rate:g} jobs/s; e2e {args.e2e_jobs:,} no-op jobs, latency at "
        f"{args.e2e_rate:g} jobs/s; {args.seconds:g}s per latency phase; "
        f"{os.cpu_count()} CPUs, load average {load_average()}",
        flush=True,
    )
    finished = False
    try:
        run_all(sets, args)
        finished = True
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    finally:
        tear_down(sets, keep_logs=not finished)
    return 0


def run_all(sets: list[ServerSet], args: argparse.Namespace) -> None:
    started = time.monotonic()
    for server_set in sets:
        server_set.up()
        print(check_replicas(server_set), flush=True)
    for number in range(1, args.rounds + 1):
        for server_set in sets:
            print(
                f"\n== round {number}, {server_set.name} ({time.monotonic() - started:.0f}s in) ==",
                flush=True,
            )
            server_set.rounds.append(run_round(server_set, args))
    single, cluster = sets
    print(
        f"\nmedians of {args.rounds} round(s) each, single node vs a {args.nodes}-node "
        f"cluster (quorum queues on every node), in {time.monotonic() - started:.0f}s:"
    )
    print("\n".join(table(single, cluster)))
    print(f"load average after: {load_average()}", flush=True)


def servers_directory(base: Path, name: str) -> Path:
    """A fresh directory the PostgreSQL server (its own OS user) can traverse."""
    directory = Path(tempfile.mkdtemp(prefix=f"jobrelay-bench-{name}-", dir=base))
    directory.chmod(0o755)
    return directory


def tear_down(sets: list[ServerSet], *, keep_logs: bool) -> None:
    """Stop both sets and delete their data, whatever happened; a second Ctrl-C waits."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    for server_set in sets:
        print(f"stopping the {server_set.name} servers, deleting their data", flush=True)
        if not server_set.down():
            print(
                f"  could not stop them: run JOBRELAY_SERVERS_DIR={server_set.directory} "
                f"python scripts/servers.py down --delete-data",
                file=sys.stderr,
            )
        elif keep_logs and (server_set.directory / "logs").exists():
            print(f"  their logs are in {server_set.directory}/logs", file=sys.stderr)
        else:
            shutil.rmtree(server_set.directory, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
