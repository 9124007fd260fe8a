"""The faults, and a schedule of them drawn from the seed.

Each fault is injected and healed before the next one starts (a killed process is restarted, a
paused one continued, the proxy set back to ``pass``, a stopped broker node started again), so
that at the end the system is whole again and must reach quiescence by itself.

On a RabbitMQ cluster (profile ``cluster``, docs/cluster.md) the node faults stop, kill or pause
one node at a time; each service reaches every node through a proxy of its own, so the AMQP
proxy faults hit one node's connections. On a cluster in network namespaces (profile
``partitions``) the partition faults cut the nodes apart (chaos/partitions.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import psycopg

from chaos import partitions
from chaos.partitions import Partitioner
from chaos.proxy import Mode, Proxy
from chaos.system import Service, patroni
from jobrelay.db.engine import libpq_url
from tests.support.servers import servers_script


class Fault(StrEnum):
    KILL_CONSUMER = "kill_consumer"
    KILL_DISPATCHER = "kill_dispatcher"
    PAUSE_CONSUMER = "pause_consumer"  # SIGSTOP past its lease, then SIGCONT
    CLOSE_CONNECTIONS = "close_connections"  # rabbitmqctl close_all_connections
    BROKER_RESTART = "broker_restart"  # rabbitmqctl stop_app + start_app
    PG_RESTART = "pg_restart"  # immediate stop + start
    BLACKHOLE_DB = "blackhole_db"
    BLACKHOLE_AMQP = "blackhole_amqp"
    RESET_DB = "reset_db"
    RESET_AMQP = "reset_amqp"
    DELAY_DB = "delay_db"
    # One node of a cluster at a time:
    NODE_STOP_APP = "node_stop_app"  # rabbitmqctl stop_app, later start_app
    NODE_KILL = "node_kill"  # SIGKILL its beam, later start it again (it rejoins)
    NODE_PAUSE = "node_pause"  # SIGSTOP its processes, later SIGCONT
    # The primary of a Patroni cluster (profile pg-failover, docs/failover.md):
    PRIMARY_KILL = "primary_kill"  # SIGKILL its postmaster: Patroni fails over
    PRIMARY_STOP = "primary_stop"  # SIGTERM its Patroni (a clean stop), later start it again
    PRIMARY_SWITCHOVER = "primary_switchover"  # patronictl switchover --force
    # Between the nodes of a cluster in network namespaces (profile partitions, docs/cluster.md):
    PARTITION_HALVES = partitions.HALVES
    PARTITION_RANDOM_HALVES = partitions.RANDOM_HALVES
    PARTITION_MAJORITIES_RING = partitions.MAJORITIES_RING
    PARTITION_RANDOM_NODE = partitions.RANDOM_NODE


NODE_FAULTS = (Fault.NODE_STOP_APP, Fault.NODE_KILL, Fault.NODE_PAUSE)
PRIMARY_FAULTS = (Fault.PRIMARY_KILL, Fault.PRIMARY_STOP, Fault.PRIMARY_SWITCHOVER)
PARTITION_FAULTS = tuple(Fault(scenario) for scenario in partitions.SCENARIOS)
# The localservers.patroni helper behind each primary fault.
PRIMARY_HELPERS = {
    Fault.PRIMARY_KILL: "kill_postmaster",
    Fault.PRIMARY_STOP: "stop_patroni",
    Fault.PRIMARY_SWITCHOVER: "switchover",
}

WEIGHTS = {
    Fault.KILL_CONSUMER: 3.0,
    Fault.KILL_DISPATCHER: 2.0,
    Fault.PAUSE_CONSUMER: 2.0,
    Fault.CLOSE_CONNECTIONS: 1.5,
    Fault.BROKER_RESTART: 1.0,
    Fault.PG_RESTART: 1.5,
    Fault.BLACKHOLE_DB: 1.0,
    Fault.BLACKHOLE_AMQP: 1.0,
    Fault.RESET_DB: 1.5,
    Fault.RESET_AMQP: 1.0,
    Fault.DELAY_DB: 0.5,
}


def database_proxy_names(servers: int) -> list[str]:
    """The proxy of the database server, "db"; of each server of a Patroni cluster, "db1",
    "db2", ...: a database fault cuts them all at once."""
    return ["db"] if servers == 1 else [f"db{n}" for n in range(1, servers + 1)]


@dataclass(frozen=True)
class Planned:
    at: float  # seconds after the load starts
    fault: Fault
    target: int  # which consumer/dispatcher, modulo their number
    seconds: float  # how long the fault lasts (where that means something)


def schedule(
    rng: random.Random,
    count: int,
    window: float,
    *,
    node_faults: int = 0,
    primary_faults: int = 0,
) -> list[Planned]:
    """``count`` process and connection faults plus ``node_faults`` broker node faults and
    ``primary_faults`` PostgreSQL primary faults over ``window`` seconds: every kind at least
    once when the counts allow, the rest drawn by weight (node and primary faults take turns);
    all of it a function of the seed. With primary faults the cluster's primary is the server
    that fails, so the lone server's restart is left out."""
    weighted = {
        kind: weight
        for kind, weight in WEIGHTS.items()
        if not (primary_faults and kind is Fault.PG_RESTART)
    }
    kinds = list(weighted)[:count]
    faults, weights = list(weighted), list(weighted.values())
    kinds += rng.choices(faults, weights, k=max(0, count - len(kinds)))
    kinds += [NODE_FAULTS[n % len(NODE_FAULTS)] for n in range(node_faults)]
    kinds += [PRIMARY_FAULTS[n % len(PRIMARY_FAULTS)] for n in range(primary_faults)]
    rng.shuffle(kinds)
    times = sorted(rng.uniform(2.0, window) for _ in kinds)
    return [
        Planned(at, kind, rng.randrange(1000), rng.uniform(2.0, 5.0))
        for at, kind in zip(times, kinds, strict=True)
    ]


def partition_schedule(rng: random.Random, count: int, window: float) -> list[Planned]:
    """``count`` partitions evenly spread over ``window`` seconds (each needs its time: they
    run one at a time): every scenario in turn, each one's successive partitions lasting 10 s,
    30 s, 10 s, ... (so 16 give each scenario and duration twice), in an order drawn from the
    seed; a partition's target seeds its random split."""
    kinds = [PARTITION_FAULTS[n % len(PARTITION_FAULTS)] for n in range(count)]
    seconds = [
        partitions.DURATIONS[(n // len(PARTITION_FAULTS)) % len(partitions.DURATIONS)]
        for n in range(count)
    ]
    pairs = list(zip(kinds, seconds, strict=True))
    rng.shuffle(pairs)
    step = window / max(count, 1)
    return [
        Planned(step * (n + 0.25), kind, rng.randrange(1000), length)
        for n, (kind, length) in enumerate(pairs)
    ]


@dataclass
class Injector:
    consumers: list[Service]
    dispatchers: list[Service]
    proxies: dict[str, Proxy]  # "db", and "amqp1".."amqpN": one per broker node
    lease_seconds: float
    log: Callable[[str], None]
    injected: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)  # faults that could not be injected
    cluster: Any = None  # the Patroni cluster (localservers.patroni.PatroniCluster), if any
    failed_requests: Callable[[], int] = lambda: 0  # the submitter's ambiguous answers so far
    recoveries: list[Recovery] = field(default_factory=list)  # one per primary fault
    partitioner: Partitioner | None = None  # a cluster in network namespaces, if any

    async def run(self, planned: list[Planned], start: float) -> None:
        for fault in planned:
            await asyncio.sleep(max(0.0, start + fault.at - time.monotonic()))
            began = time.monotonic()
            try:
                await self.inject(fault)
            except Exception as error:  # a fault helper failed: say so, keep going
                self.failures.append(f"{fault.fault}: {type(error).__name__}: {error}")
                self.log(f"fault {fault.fault} failed: {type(error).__name__}: {error}")
                continue
            self.injected[fault.fault] += 1
            self.log(
                f"fault {fault.fault} at +{began - start:.1f}s took {time.monotonic() - began:.1f}s"
            )

    async def inject(self, fault: Planned) -> None:
        match fault.fault:
            case Fault.KILL_CONSUMER:
                await self._kill_and_restart(self._pick(self.consumers, fault.target), fault)
            case Fault.KILL_DISPATCHER:
                await self._kill_and_restart(self._pick(self.dispatchers, fault.target), fault)
            case Fault.PAUSE_CONSUMER:
                consumer = self._pick(self.consumers, fault.target)
                consumer.pause()
                try:
                    await asyncio.sleep(self.lease_seconds + fault.seconds)
                finally:
                    consumer.resume()
            case Fault.CLOSE_CONNECTIONS:
                await asyncio.to_thread(
                    servers_script().rabbitmqctl, "close_all_connections", "chaos fault"
                )
            case Fault.BROKER_RESTART:
                await asyncio.to_thread(servers_script().rabbit_restart_app)
            case Fault.PG_RESTART:
                await asyncio.to_thread(servers_script().pg_restart)
            case Fault.BLACKHOLE_DB:
                await self._proxy_fault("db", Mode.BLACKHOLE, fault.seconds)
            case Fault.BLACKHOLE_AMQP:
                await self._proxy_fault(self._amqp(fault), Mode.BLACKHOLE, fault.seconds)
            case Fault.RESET_DB:
                await self._proxy_fault("db", Mode.RESET, fault.seconds / 2)
            case Fault.RESET_AMQP:
                await self._proxy_fault(self._amqp(fault), Mode.RESET, fault.seconds / 2)
            case Fault.DELAY_DB:
                await self._proxy_fault("db", Mode.DELAY, fault.seconds, delay=0.1)
            case Fault.NODE_STOP_APP | Fault.NODE_KILL | Fault.NODE_PAUSE:
                await self._node_fault(fault)
            case Fault.PRIMARY_KILL | Fault.PRIMARY_STOP | Fault.PRIMARY_SWITCHOVER:
                await self._primary_fault(fault)
            case kind if kind in PARTITION_FAULTS:
                if self.partitioner is None:
                    raise RuntimeError(f"{kind} needs a cluster in network namespaces")
                await self.partitioner.partition(kind, fault.seconds, fault.target)

    @property
    def nodes(self) -> int:
        return sum(1 for name in self.proxies if name.startswith("amqp"))

    def _amqp(self, fault: Planned) -> str:
        return f"amqp{fault.target % self.nodes + 1}"

    async def _node_fault(self, fault: Planned) -> None:
        """Down for 2-5 s (a killed node then boots, which takes longer), then back."""
        servers = servers_script()
        node = fault.target % self.nodes + 1
        down, up = {
            Fault.NODE_STOP_APP: (servers.rabbit_stop_app, servers.rabbit_start_app),
            Fault.NODE_KILL: (servers.rabbit_kill, servers.rabbit_start),
            Fault.NODE_PAUSE: (servers.rabbit_pause, servers.rabbit_resume),
        }[fault.fault]
        await asyncio.to_thread(down, node)
        try:
            await asyncio.sleep(fault.seconds)
        finally:
            await asyncio.to_thread(up, node)

    async def _primary_fault(self, fault: Planned) -> None:
        """The primary fails; measured: how long until a server accepts writes again, and
        until the cluster is whole (the old primary back as the standby, in synchronous mode
        the synchronous one). A stopped Patroni stays down 2-5 s after the failover."""
        if self.cluster is None:
            raise RuntimeError(f"{fault.fault} needs a Patroni cluster (--postgres-ha)")
        module = patroni()
        began, failed_before = time.monotonic(), self.failed_requests()
        inject = module.PRIMARY_FAULTS[PRIMARY_HELPERS[fault.fault]]
        probe = WriteProbe(libpq_url(self.cluster.database_url()))
        probe.start()
        try:
            old = await asyncio.to_thread(inject, self.cluster)
            # The fault took effect once another node leads (a demoting primary still answers
            # for a moment); then, when do writes go through the multi-host URL again?
            with contextlib.suppress(module.ServerError):  # else the old primary came back
                await asyncio.to_thread(module.wait_leader, self.cluster, 60.0, other_than=old)
            if fault.fault is Fault.PRIMARY_STOP and module.leader(self.cluster) is None:
                # No node may take over (in synchronous mode, none the DCS names the standby):
                # writes wait for the stopped primary, started again as its supervisor would.
                self.log(f"{fault.fault}: no node took over from {old}: starting it again")
                await asyncio.to_thread(module.heal, self.cluster)
            writable = await asyncio.to_thread(writable_after, self.cluster, began)
            if fault.fault is Fault.PRIMARY_STOP:
                await asyncio.sleep(fault.seconds)
        finally:
            await asyncio.to_thread(module.heal, self.cluster)
            unwritable = await asyncio.to_thread(probe.stop)
        new = module.leader(self.cluster)
        recovery = Recovery(
            fault.fault,
            old,
            new.name if new is not None else "none",
            unwritable,
            writable,
            time.monotonic() - began,
            self.failed_requests() - failed_before,
        )
        self.recoveries.append(recovery)
        self.log(recovery.describe())

    @staticmethod
    def _pick(services: list[Service], target: int) -> Service:
        return services[target % len(services)]

    async def _kill_and_restart(self, service: Service, fault: Planned) -> None:
        await asyncio.to_thread(service.kill)
        await asyncio.sleep(fault.seconds / 4)  # down for 0.5-1.25 s
        await asyncio.to_thread(service.start)

    async def _proxy_fault(self, name: str, mode: Mode, seconds: float, delay: float = 0.0) -> None:
        """``name``'s proxy in ``mode`` for ``seconds``; "db" means every database proxy."""
        names = (
            [n for n in self.proxies if n.rstrip("0123456789") == name] if name == "db" else [name]
        )
        for proxy in (self.proxies[n] for n in names):
            await asyncio.to_thread(proxy.set_mode, mode, delay)
        try:
            await asyncio.sleep(seconds)
        finally:
            for proxy in (self.proxies[n] for n in names):
                await asyncio.to_thread(proxy.set_mode, Mode.PASS)

    async def heal(self) -> None:
        """Everything back to normal: proxies pass, servers up, every process running."""
        for proxy in self.proxies.values():
            await asyncio.to_thread(proxy.set_mode, Mode.PASS)
        servers = servers_script()
        await asyncio.to_thread(servers.pg_start)
        if self.cluster is not None:
            await asyncio.to_thread(patroni().heal, self.cluster)
        if self.partitioner is not None:
            await self.partitioner.heal()
        if self.nodes == 1:
            await asyncio.to_thread(servers.rabbitmqctl, "start_app")
        for node in range(1, self.nodes + 1) if self.nodes > 1 else ():
            await asyncio.to_thread(heal_node, node)
        for service in [*self.consumers, *self.dispatchers]:
            service.resume()


@dataclass(frozen=True)
class Recovery:
    """What one primary fault cost."""

    fault: Fault
    old_primary: str
    new_primary: str
    unwritable: float  # the longest time no write went through (a probe every 0.2 s)
    writable_after: float  # seconds from the fault's start (patronictl's own too) until writes
    healthy_after: float  # ... until the cluster was whole again
    failed_requests: int  # submissions answered 5xx or broken meanwhile (retried)

    def describe(self) -> str:
        return (
            f"{self.fault}: primary {self.old_primary} -> {self.new_primary}, no write for "
            f"{self.unwritable:.1f}s, writable {self.writable_after:.1f}s after the fault began, "
            f"whole after {self.healthy_after:.1f}s, {self.failed_requests} failed requests"
        )


class WriteProbe:
    """A new connection through the multi-host URL and a statement on it every ``interval``
    seconds, in a thread of its own; ``stop()`` returns the longest time between two probes
    that went through (or since the last one, if none did after it)."""

    def __init__(self, url: str, interval: float = 0.2) -> None:
        self.url = url
        self.interval = interval
        self.longest = 0.0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="write-probe", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> float:
        self._done.set()
        self._thread.join(30)
        return self.longest

    def _run(self) -> None:
        last = time.monotonic()
        while not self._done.wait(self.interval):
            try:
                with psycopg.connect(self.url, connect_timeout=2) as connection:
                    connection.execute("SELECT 1")
            except psycopg.Error:
                self.longest = max(self.longest, time.monotonic() - last)
                continue
            now = time.monotonic()
            self.longest = max(self.longest, now - last)
            last = now


def writable_after(cluster: Any, began: float, timeout: float = 120.0) -> float:
    """Seconds from ``began`` until the cluster's multi-host URL reaches a server that
    writes (libpq's target_session_attrs=read-write skips a standby)."""
    url = libpq_url(cluster.database_url())
    deadline = time.monotonic() + timeout
    while True:
        try:
            with psycopg.connect(url, connect_timeout=2) as connection:
                connection.execute("SELECT 1")
            return time.monotonic() - began
        except psycopg.Error:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def heal_node(node: int) -> None:
    """Broker node ``node`` serving again, whatever fault it was left in: continued if paused,
    booted if killed, its app started if stopped."""
    servers = servers_script()
    with contextlib.suppress(servers.ServerError):
        servers.rabbit_resume(node)
    try:
        servers.rabbit_start(node)  # nothing to do if it serves; boots it if it is gone
    except servers.ServerError:  # alive but not serving: its app was stopped
        servers.rabbit_start_app(node)
