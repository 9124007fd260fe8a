"""Accepted jobs per second as concurrent clients grow past the API's capacity, with load
shedding on and off (docs/overload.md), and a check that well-behaved retries keep every job
exactly once.

    python scripts/servers.py run -- python -m benchmarks.overload \\
        [--seconds 20] [--levels 32,128,512] [--workers 2]

For each mode the API runs with ``--workers`` processes (``--pool-size`` connections each) on a
fresh scratch database:

- shedding on: ``JOBRELAY_API_MAX_CONCURRENCY`` unset, so each worker handles its default
  (sized from its pool) at once; the rest wait their turn, and one that would wait longer than
  ``JOBRELAY_API_MAX_QUEUE_SECONDS`` (its default 0.5 s, or ``--max-queue-seconds``) is
  answered ``503 overloaded`` with ``Retry-After`` (1 s or more, spread) instead;
- shedding off: ``JOBRELAY_API_MAX_CONCURRENCY=0``: every request waits its turn in its worker.

At each level N virtual clients submit jobs for ``--seconds``, one request at a time each, over
keep-alive sockets with minimal hand-written HTTP/1.1 (the generator shares the cores with the API
and PostgreSQL, so it must cost little), in ``--generator-processes`` processes (one is enough:
about 150 us of CPU per request, at most ~13 % of a core at 512 clients on 2 cores; a second
process changed nothing but the noise). Each behaves as a well-behaved client: keys
``<run>-<client>-<n>``; on 503 or 429 it sleeps ``Retry-After`` (plus up to 10 % + 50 ms of
jitter) and sends the same key again; on a connection error, or no answer within 30 s (a timeout,
which should not happen), it reconnects and sends the same key again; on 202 or 200 it goes on to
the next key.

How to read it, per mode and level:

- ``accepted``: 202/200 answers received within the window, per second. ``vs 32`` is that rate
  over the 32-client level's (the first level if 32 is not run). Past capacity, a ratio near 1
  means the extra clients cost the API little; a falling one, that overload eats into useful work.
- ``shed``: ``503 overloaded`` answers per second; ``other``: every other non-2xx answer by
  status and problem code (``503 database_unavailable``, ``429 rate_limited``, ...), then
  connection errors and timeouts. With shedding off (or before it exists) the extra clients
  queue inside the workers instead, until some wait longer than
  ``JOBRELAY_DB_POOL_TIMEOUT_SECONDS`` for a connection: ``503 database_unavailable``.
- ``latency``: p50/p99/max of the accepted requests, from sending that request to its full
  answer (earlier shed attempts of the same key not included): what shedding keeps bounded.
  Queued instead, it grows with N (about N / accepted rate). In brackets, the same of the
  requests sent after the window's first 2 s: every client's first request arrives at the
  window's start, a burst of N that the workers absorb within
  ``JOBRELAY_API_MAX_QUEUE_SECONDS``. ``per key`` is from the key's first attempt to its
  2xx, Retry-After sleeps included: what a client waited in all.
- ``Retry-After missing``: non-2xx answers without a usable ``Retry-After`` (should be 0).
- ``cpu``: CPU seconds within the window of the API processes, of the load generator, and of the
  whole machine (of cores x window; the rest is mostly PostgreSQL). A generator near a full core
  would be measuring itself: run it in more processes.
- ``exactly once``: when the window ends, clients take no new keys but each keeps retrying the
  one it has in flight (at most 60 s), then sends its last accepted key once more (which must be
  answered 200). The run's jobs in the database must then be exactly the keys answered 2xx, and
  no key may have been answered 202 twice; otherwise the benchmark says what differs and exits 1.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import random
import resource
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from multiprocessing.connection import Connection

from benchmarks._common import (
    admin_database_url,
    create_client,
    drop_database,
    free_port,
    percentile,
    scratch_database,
    sql,
    start_api,
    submission,
)
from jobrelay import eventloop

BODY = json.dumps({"type": "catalog.export", "payload": {"course": "JavaScript"}}).encode()
REQUEST_TIMEOUT = 30.0  # an answer later than this is a timeout
# Every client sends its first request at the window's start: a burst of N, which a worker
# absorbs within JOBRELAY_API_MAX_QUEUE_SECONDS by design. The latency after it is reported too.
STEADY_AFTER = 2.0
DRAIN_LIMIT = 60.0  # how long after the window a client may keep retrying its last key
FALLBACK_RETRY_AFTER = 1.0  # when a 503/429/5xx carries no usable Retry-After
MAX_CONCURRENCY = "JOBRELAY_API_MAX_CONCURRENCY"
MAX_QUEUE_SECONDS = "JOBRELAY_API_MAX_QUEUE_SECONDS"


@dataclass
class Level:
    """One generator process's share of a level: clients ``first .. first+count-1``."""

    port: int
    token: str
    run: str
    first: int
    count: int
    start_at: float  # time.monotonic(), one clock for every process on Linux
    end_at: float
    replay: bool = True


@dataclass
class Tally:
    """What the virtual clients saw; merged across generator processes."""

    accepted_202: int = 0  # within the window, like everything not said otherwise
    accepted_200: int = 0
    latencies: list[float] = field(default_factory=list)
    # Those of requests sent after the window's first STEADY_AFTER seconds: without the burst
    # of every client's first request arriving together.
    steady_latencies: list[float] = field(default_factory=list)
    key_latencies: list[float] = field(default_factory=list)
    refused: Counter[str] = field(default_factory=Counter)  # "503 overloaded": count
    refused_after: Counter[str] = field(default_factory=Counter)  # in the drain and replays
    missing_retry_after: int = 0  # every phase
    non_2xx: int = 0  # every phase
    connection_errors: int = 0  # every phase
    timeouts: int = 0  # every phase
    drained: int = 0  # keys accepted after the window
    acked: set[str] = field(default_factory=set)  # every key answered 202 or 200
    created: set[str] = field(default_factory=set)  # every key answered 202
    created_twice: list[str] = field(default_factory=list)
    unresolved: list[str] = field(default_factory=list)  # never answered 2xx within the drain
    abandoned: list[str] = field(default_factory=list)  # answered a 4xx other than 429
    replays: Counter[int] = field(default_factory=Counter)  # status of the last key sent again
    drain_seconds: float = 0.0  # from the window's end to the last client's end
    cpu_window: float = 0.0  # generator CPU seconds within the window
    cpu_all: float = 0.0  # generator CPU seconds for the whole level, connecting and drain too

    def merge(self, other: Tally) -> None:
        self.accepted_202 += other.accepted_202
        self.accepted_200 += other.accepted_200
        self.latencies += other.latencies
        self.steady_latencies += other.steady_latencies
        self.key_latencies += other.key_latencies
        self.refused += other.refused
        self.refused_after += other.refused_after
        self.missing_retry_after += other.missing_retry_after
        self.non_2xx += other.non_2xx
        self.connection_errors += other.connection_errors
        self.timeouts += other.timeouts
        self.drained += other.drained
        self.created_twice += other.created_twice + sorted(self.created & other.created)
        self.acked |= other.acked
        self.created |= other.created
        self.unresolved += other.unresolved
        self.abandoned += other.abandoned
        self.replays += other.replays
        self.drain_seconds = max(self.drain_seconds, other.drain_seconds)
        self.cpu_window += other.cpu_window
        self.cpu_all += other.cpu_all


# --- the load generator: runs in its own processes ----------------------------------------------


async def read_answer(reader: asyncio.StreamReader) -> tuple[int, bytes | None, bool, bytes]:
    """Status, Retry-After, whether the server closes the connection, body."""
    status_line = await reader.readline()
    if not status_line:
        raise ConnectionResetError("the server closed the connection")
    status = int(status_line.split(None, 2)[1])
    length = 0
    retry_after = None
    close = False
    chunked = False
    while (line := await reader.readline()) != b"\r\n":
        if not line:
            raise ConnectionResetError("the server closed the connection")
        name, _, value = line.partition(b":")
        name = name.lower()
        if name == b"content-length":
            length = int(value)
        elif name == b"retry-after":
            retry_after = value.strip()
        elif name == b"connection":
            close = b"close" in value.lower()
        elif name == b"transfer-encoding":
            chunked = b"chunked" in value.lower()
    if not chunked:
        return status, retry_after, close, await reader.readexactly(length)
    chunks = []
    while size := int((await reader.readline()).split(b";")[0], 16):
        chunks.append(await reader.readexactly(size))
        await reader.readexactly(2)
    while (line := await reader.readline()) not in (b"\r\n", b""):  # trailers
        pass
    return status, retry_after, close, b"".join(chunks)


def problem_code(body: bytes) -> str:
    try:
        code = json.loads(body).get("code")
    except (ValueError, AttributeError):
        return "-"
    return str(code) if code else "-"


def retry_delay(value: bytes | None) -> float | None:
    """Seconds of a Retry-After header (delay-seconds; an HTTP date counts as not usable)."""
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


class VirtualClient:
    def __init__(self, level: Level, index: int, tally: Tally) -> None:
        self.level = level
        self.index = index
        self.tally = tally
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.deadline = level.end_at + DRAIN_LIMIT

    async def connect(self) -> bool:
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT):
                self.reader, self.writer = await asyncio.open_connection(
                    "127.0.0.1", self.level.port
                )
        except OSError:  # TimeoutError included
            self.tally.connection_errors += 1
            await asyncio.sleep(random.uniform(0.05, 0.25))
            return False
        return True

    def disconnect(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None

    async def run(self) -> None:
        level, tally = self.level, self.tally
        await self.connect()
        await asyncio.sleep(max(0.0, level.start_at - time.monotonic()))
        number = 0
        last_acked = None
        try:
            while time.monotonic() < level.end_at:
                key = f"{level.run}-{self.index}-{number}"
                number += 1
                if await self.settle(key) is None:
                    tally.unresolved.append(key)
                    return
                last_acked = key
            if level.replay and last_acked is not None:
                status = await self.settle(last_acked)
                tally.replays[status or 0] += 1
        finally:
            self.disconnect()

    async def settle(self, key: str) -> int | None:
        """Send ``key`` until it is answered 202 or 200 (that status), a 4xx other than 429
        (that status), or the drain's deadline passes (None)."""
        level, tally = self.level, self.tally
        request = submission(level.token, key, BODY)
        first = None
        while time.monotonic() < self.deadline:
            if self.writer is None and not await self.connect():
                continue
            assert self.reader is not None and self.writer is not None
            sent = time.monotonic()
            if first is None:
                first = sent
            try:
                async with asyncio.timeout(REQUEST_TIMEOUT):
                    self.writer.write(request)
                    status, retry_after, close, body = await read_answer(self.reader)
            except TimeoutError:
                tally.timeouts += 1
                self.disconnect()
                continue
            except (OSError, EOFError, ValueError, IndexError):  # IncompleteReadError is EOF
                tally.connection_errors += 1
                self.disconnect()
                await asyncio.sleep(random.uniform(0.05, 0.25))
                continue
            done = time.monotonic()
            if close:
                self.disconnect()
            in_window = done <= level.end_at
            if status in (200, 202):
                if status == 202:
                    if key in tally.created:
                        tally.created_twice.append(key)
                    tally.created.add(key)
                if key not in tally.acked:
                    tally.acked.add(key)
                    if in_window:
                        tally.latencies.append(done - sent)
                        if sent >= level.start_at + STEADY_AFTER:
                            tally.steady_latencies.append(done - sent)
                        tally.key_latencies.append(done - first)
                        if status == 202:
                            tally.accepted_202 += 1
                        else:
                            tally.accepted_200 += 1
                    else:
                        tally.drained += 1
                return status
            tally.non_2xx += 1
            (tally.refused if in_window else tally.refused_after)[
                f"{status} {problem_code(body)}"
            ] += 1
            delay = retry_delay(retry_after)
            if delay is None:
                tally.missing_retry_after += 1
            if status < 500 and status != 429:
                tally.abandoned.append(f"{key}: {status} {problem_code(body)}")
                return status
            delay = FALLBACK_RETRY_AFTER if delay is None else delay
            delay += random.uniform(0, 0.1 * delay + 0.05)
            await asyncio.sleep(min(delay, max(0.0, self.deadline - time.monotonic())))
        return None


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def run_level(level: Level) -> Tally:
    tally = Tally()
    before = cpu_seconds()

    async def sample() -> None:
        await asyncio.sleep(max(0.0, level.start_at - time.monotonic()))
        at_start = cpu_seconds()
        await asyncio.sleep(max(0.0, level.end_at - time.monotonic()))
        tally.cpu_window = cpu_seconds() - at_start

    sampler = asyncio.create_task(sample())
    clients = [VirtualClient(level, level.first + i, tally) for i in range(level.count)]
    await asyncio.gather(*(client.run() for client in clients))
    tally.drain_seconds = max(0.0, time.monotonic() - level.end_at)
    await sampler
    tally.cpu_all = cpu_seconds() - before
    return tally


def generator_main(conn: Connection) -> None:
    """A generator process: runs each Level it is sent and sends back its Tally."""
    while (level := conn.recv()) is not None:
        conn.send(eventloop.run(run_level(level)))


class Generators:
    """``count`` generator processes, started once and reused for every level."""

    def __init__(self, count: int) -> None:
        context = multiprocessing.get_context("spawn")  # no inherited event loop or sockets
        self.pipes: list[Connection] = []
        self.processes = []
        for _ in range(count):
            parent, child = context.Pipe()
            process = context.Process(target=generator_main, args=(child,), daemon=True)
            process.start()
            self.pipes.append(parent)
            self.processes.append(process)

    def start(self, port: int, token: str, run: str, clients: int, seconds: float) -> Level:
        """Sends each process its share of the level; the window's start and end are in the
        Level returned (collect() waits for the level's end)."""
        # Time to open the connections before the start.
        start_at = time.monotonic() + 0.5 + clients / 500
        level = Level(port, token, run, 0, 0, start_at, start_at + seconds)
        processes = len(self.pipes)
        first = 0
        for i, pipe in enumerate(self.pipes):
            count = clients // processes + (i < clients % processes)
            pipe.send(Level(port, token, run, first, count, level.start_at, level.end_at))
            first += count
        return level

    def collect(self) -> Tally:
        tally = Tally()
        for pipe in self.pipes:
            tally.merge(pipe.recv())
        return tally

    def close(self) -> None:
        for pipe in self.pipes:
            with contextlib.suppress(OSError):
                pipe.send(None)
        for process in self.processes:
            process.join(10)
            if process.is_alive():
                process.terminate()


# --- CPU of the API processes and of the machine, from /proc --------------------------------


def tree_cpu_seconds(root: int) -> float:
    """CPU seconds so far of ``root`` and every process under it (uvicorn and its workers)."""
    processes: dict[int, tuple[int, int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        # After the command: state, ppid, ... utime (11th) and stime (12th).
        processes[int(entry)] = (int(fields[1]), int(fields[11]) + int(fields[12]))
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in processes.items():
        children.setdefault(ppid, []).append(pid)
    ticks, pending = 0, [root]
    while pending:
        pid = pending.pop()
        ticks += processes.get(pid, (0, 0))[1]
        pending += children.get(pid, [])
    return ticks / os.sysconf("SC_CLK_TCK")


def machine_busy_seconds() -> float:
    with open("/proc/stat") as stat:
        values = [int(v) for v in stat.readline().split()[1:]]
    idle = values[3] + values[4]  # idle, iowait
    return (sum(values[:8]) - idle) / os.sysconf("SC_CLK_TCK")


# --- one mode: an API, its levels, the checks --------------------------------------------------


@dataclass
class Figures:
    clients: int
    tally: Tally
    api_cpu: float
    machine_cpu: float
    failures: list[str]


def exactly_once(url: str, client_id: uuid.UUID, run: str, tally: Tally) -> list[str]:
    rows = asyncio.run(
        sql(
            url,
            "SELECT idempotency_key FROM jobrelay.jobs WHERE client_id = %s "
            "AND starts_with(idempotency_key, %s)",
            (client_id, f"{run}-"),
        )
    )
    stored = {key for (key,) in rows}
    failures = []
    if len(stored) != len(tally.acked):
        failures.append(f"{len(stored)} jobs in the database, {len(tally.acked)} keys answered 2xx")
    if extra := sorted(stored - tally.acked):
        failures.append(f"{len(extra)} jobs never answered 2xx, e.g. {extra[:3]}")
    if missing := sorted(tally.acked - stored):
        failures.append(f"{len(missing)} keys answered 2xx have no job, e.g. {missing[:3]}")
    if tally.created_twice:
        failures.append(
            f"{len(tally.created_twice)} keys answered 202 twice, e.g. {tally.created_twice[:3]}"
        )
    if tally.unresolved:
        failures.append(
            f"{len(tally.unresolved)} keys still not accepted {DRAIN_LIMIT:.0f} s after the "
            f"window, e.g. {tally.unresolved[:3]}"
        )
    if set(tally.replays) - {200}:
        failures.append(f"last accepted keys sent again were answered {dict(tally.replays)}")
    return failures


def run_mode(
    args: argparse.Namespace, generators: Generators, admin_url: str, shedding: bool
) -> list[Figures]:
    url = scratch_database(admin_url)
    client_id, token = asyncio.run(create_client(url, "bench-overload"))
    port = free_port()
    env = {}
    if not shedding:
        env[MAX_CONCURRENCY] = "0"
    else:
        if args.admitted is not None:
            env[MAX_CONCURRENCY] = str(args.admitted)
        if args.max_queue_seconds is not None:
            env[MAX_QUEUE_SECONDS] = str(args.max_queue_seconds)
    api = start_api(url, port, args.workers, pool_size=args.pool_size, **env)
    base = uuid.uuid4().hex[:8]
    figures = []
    try:
        generators.start(port, token, f"{base}-warm", 8, 2.0)
        generators.collect()
        for clients in args.levels:
            run = f"{base}-{clients}"
            level = generators.start(port, token, run, clients, args.seconds)
            time.sleep(max(0.0, level.start_at - time.monotonic()))
            api_cpu, machine_cpu = -tree_cpu_seconds(api.pid), -machine_busy_seconds()
            time.sleep(max(0.0, level.end_at - time.monotonic()))
            api_cpu += tree_cpu_seconds(api.pid)
            machine_cpu += machine_busy_seconds()
            tally = generators.collect()
            figures.append(
                Figures(
                    clients,
                    tally,
                    api_cpu,
                    machine_cpu,
                    exactly_once(url, client_id, run, tally),
                )
            )
            report_level(args, figures[-1], figures[0])
            time.sleep(1.0)
    finally:
        api.terminate()
        api.wait(10)
        drop_database(admin_url, url)
    return figures


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f}" if seconds >= 0.1 else f"{seconds * 1000:.1f}"


def report_level(args: argparse.Namespace, figures: Figures, base: Figures) -> None:
    t, seconds = figures.tally, args.seconds
    accepted = (t.accepted_202 + t.accepted_200) / seconds
    base_rate = (base.tally.accepted_202 + base.tally.accepted_200) / seconds
    shed = t.refused.get("503 overloaded", 0)
    others = [f"{name}: {n}" for name, n in sorted(t.refused.items()) if name != "503 overloaded"]
    if t.connection_errors:
        others.append(f"connection errors: {t.connection_errors}")
    if t.timeouts:
        others.append(f"timeouts: {t.timeouts}")
    after = ", ".join(f"{name}: {n}" for name, n in sorted(t.refused_after.items()))
    print(
        f"  {figures.clients:4d} clients: accepted {accepted:7.0f}/s "
        f"(202: {t.accepted_202}, 200: {t.accepted_200}; "
        f"vs {base.clients}: {accepted / base_rate if base_rate else float('nan'):.2f}), "
        f"shed {shed / seconds:.0f}/s; other: {', '.join(others) or 'none'}"
    )
    print(
        f"        latency p50 {ms(percentile(t.latencies, 0.5))} ms, "
        f"p99 {ms(percentile(t.latencies, 0.99))} ms, "
        f"max {ms(max(t.latencies, default=float('nan')))} ms "
        f"(after the first {STEADY_AFTER:g} s: p50 {ms(percentile(t.steady_latencies, 0.5))}, "
        f"p99 {ms(percentile(t.steady_latencies, 0.99))} ms); "
        f"per key p50 {ms(percentile(t.key_latencies, 0.5))} ms, "
        f"p99 {ms(percentile(t.key_latencies, 0.99))} ms"
    )
    print(
        f"        Retry-After missing on {t.missing_retry_after} of {t.non_2xx} non-2xx answers; "
        f"drain {t.drain_seconds:.1f} s ({t.drained} keys accepted after the window"
        f"{'; refused then: ' + after if after else ''})"
    )
    cores = len(os.sched_getaffinity(0))
    print(
        f"        cpu in the window: api {figures.api_cpu:.1f} s, "
        f"generator {t.cpu_window:.1f} s ({t.cpu_window / seconds:.0%} of a core; "
        f"{t.cpu_all:.1f} s with connecting and drain), "
        f"machine {figures.machine_cpu:.1f} s busy of {cores * seconds:g}"
    )
    if figures.failures:
        print("        exactly once: FAILED: " + "; ".join(figures.failures))
    else:
        print(
            f"        exactly once: ok ({len(t.acked)} keys, {len(t.acked)} jobs; "
            f"last keys sent again: {t.replays.get(200, 0)} x 200)"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=20, help="window per level")
    parser.add_argument("--levels", default="32,128,512", help="concurrent clients per level")
    parser.add_argument("--workers", type=int, default=2, help="API worker processes")
    parser.add_argument("--pool-size", type=int, default=16, help="database pool per worker")
    parser.add_argument(
        "--generator-processes", type=int, default=1, help="processes of the load generator"
    )
    parser.add_argument("--modes", default="on,off", help="shedding modes to run: on, off")
    parser.add_argument(
        "--admitted",
        type=int,
        default=None,
        help="requests a worker handles at once with shedding on (default: the API's default)",
    )
    parser.add_argument(
        "--max-queue-seconds",
        type=float,
        default=None,
        help="longest wait for a turn before a request is shed (default: the API's default)",
    )
    args = parser.parse_args()
    args.levels = [int(level) for level in args.levels.split(",")]
    if 32 in args.levels:  # the base of the ratios comes first
        args.levels.remove(32)
        args.levels.insert(0, 32)
    modes = [mode.strip() for mode in args.modes.split(",")]
    if set(modes) - {"on", "off"}:
        parser.error("--modes takes on, off or both")
    for name in (MAX_CONCURRENCY, MAX_QUEUE_SECONDS):
        if name in os.environ:
            print(f"ignoring {name}={os.environ.pop(name)} from the environment")

    admin_url = admin_database_url()
    print(
        f"overload benchmark: {args.workers} API workers, pool {args.pool_size} each, "
        f"{args.seconds:g} s per level, levels {','.join(map(str, args.levels))}, "
        f"generator in {args.generator_processes} process(es), "
        f"{len(os.sched_getaffinity(0))} cores"
    )
    results: dict[str, list[Figures]] = {}
    generators = Generators(args.generator_processes)
    try:
        for mode in modes:
            print(
                f"shedding {mode} ("
                + (
                    (
                        f"{MAX_CONCURRENCY}={args.admitted}"
                        if args.admitted is not None
                        else f"{MAX_CONCURRENCY} unset: the default"
                    )
                    + (
                        f", {MAX_QUEUE_SECONDS}={args.max_queue_seconds:g}"
                        if args.max_queue_seconds is not None
                        else f", {MAX_QUEUE_SECONDS} unset: the default"
                    )
                    if mode == "on"
                    else f"{MAX_CONCURRENCY}=0"
                )
                + ")"
            )
            results[mode] = run_mode(args, generators, admin_url, shedding=mode == "on")
            print(
                f"  API CPU over the mode's levels: {sum(f.api_cpu for f in results[mode]):.1f} s"
            )
    finally:
        generators.close()

    print("accepted/s by clients: " + ", ".join(map(str, args.levels)))
    for mode, figures in results.items():
        rates = [(f.tally.accepted_202 + f.tally.accepted_200) / args.seconds for f in figures]
        ratios = [rate / rates[0] if rates[0] else float("nan") for rate in rates]
        print(
            f"  shedding {mode:3s}: "
            + ", ".join(
                f"{rate:.0f} ({ratio:.2f})" for rate, ratio in zip(rates, ratios, strict=True)
            )
        )
    failures = [
        f"shedding {mode}, {f.clients} clients: {failure}"
        for mode, figures in results.items()
        for f in figures
        for failure in f.failures
    ]
    if failures:
        print("exactly once: FAILED\n  " + "\n  ".join(failures))
        return 1
    print("exactly once: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
