"""Network partitions between RabbitMQ nodes (profiles ``partitions`` and ``partitions-short``,
docs/cluster.md "Partitions"): the RabbitMQ team's Jepsen scenarios, who is cut from whom in
each, the ``Partitioner`` that cuts and heals a cluster in network namespaces through
``scripts/servers.py``, and what each partition cost in delay.

A partition is a map of grudges, as in Jepsen's nemesis: node n drops every packet it receives
from each node of ``grudges[n]`` (nodes numbered from 1). Where both sides of a cut hold a
grudge, the cut is symmetric; the majorities ring's is not.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import psycopg

from chaos.handlers import BATCH, DURABLE, LIMITED
from jobrelay.db.engine import libpq_url
from tests.support.servers import servers_script

HALVES = "partition_halves"  # {1} | {2, 3}: the first half of the nodes, fixed
RANDOM_HALVES = "partition_random_halves"  # the same split of shuffled nodes
MAJORITIES_RING = "partition_majorities_ring"  # each node sees a majority, none the same one
RANDOM_NODE = "partition_random_node"  # one node, drawn, cut off from the others
SCENARIOS = (HALVES, RANDOM_HALVES, MAJORITIES_RING, RANDOM_NODE)
DURATIONS = (10.0, 30.0)  # seconds, as the RabbitMQ team's Jepsen runs

# Job types whose delay is their own (a durable sleep, a limit's queue, a batch's wait).
NOT_PLAIN = (LIMITED, DURABLE, BATCH)

Grudges = dict[int, frozenset[int]]


# --- who is cut from whom (pure) ----------------------------------------------------------------


def grudges(scenario: str, nodes: int, rng: random.Random) -> Grudges:
    """Scenario ``scenario`` on nodes 1..``nodes``: for each node, the nodes it drops. Drawn
    from ``rng`` where the scenario is random."""
    numbers = list(range(1, nodes + 1))
    if scenario == HALVES:
        return complete(bisect(numbers))
    if scenario == RANDOM_HALVES:
        rng.shuffle(numbers)
        return complete(bisect(numbers))
    if scenario == MAJORITIES_RING:
        rng.shuffle(numbers)
        return majorities_ring(numbers)
    if scenario == RANDOM_NODE:
        alone = rng.choice(numbers)
        return complete([[alone], [n for n in numbers if n != alone]])
    raise ValueError(f"no partition scenario {scenario!r}: one of {', '.join(SCENARIOS)}")


def bisect(numbers: list[int]) -> list[list[int]]:
    """The smaller half first, as Jepsen's ``bisect``: [1] and [2, 3] of three nodes."""
    half = len(numbers) // 2
    return [numbers[:half], numbers[half:]]


def complete(components: Iterable[list[int]]) -> Grudges:
    """Every node drops every node outside its own component (a symmetric cut)."""
    parts = [set(part) for part in components]
    everyone = set().union(*parts)
    return {node: frozenset(everyone - part) for part in parts for node in part}


def majorities_ring(ring: list[int]) -> Grudges:
    """Each node hears a majority of the nodes, centred on itself in ``ring``'s order, and drops
    the rest: with three nodes a, b, c, a hears b, b hears c, c hears a (each drops one node, and
    every link is cut one way)."""
    size = len(ring)
    majority = size // 2 + 1
    found: Grudges = {}
    for place, node in enumerate(ring):
        start = place - (majority - 1) // 2
        heard = {ring[(start + step) % size] for step in range(majority)}
        found[node] = frozenset(set(ring) - heard)
    return found


def cut_pairs(found: Grudges) -> set[tuple[int, int]]:
    """The directed cuts (receiver, sender) of a map of grudges."""
    return {(node, sender) for node, senders in found.items() for sender in senders}


# --- cutting and healing ------------------------------------------------------------------------


@dataclass(frozen=True)
class Window:
    """One partition: which, how long, when (wall clock, as the database's timestamps), and
    what healing it took."""

    scenario: str
    seconds: float
    grudges: Grudges
    began: float  # time.time() when the rules were in
    healed: float  # ... when the rules were gone
    whole: float  # ... when every node served again, none reporting a partition
    restarted: tuple[int, ...]  # nodes that had to be restarted after the heal

    @property
    def key(self) -> tuple[str, float]:
        return self.scenario, self.seconds


@dataclass
class Partitioner:
    """Cuts the cluster of ``scripts/servers.py up --rabbitmq-netns`` apart, one partition at a
    time, and keeps a record of each."""

    nodes: int
    log: Callable[[str], None]
    windows: list[Window] = field(default_factory=list)
    costs: dict[tuple[str, float], Cost] = field(default_factory=dict)

    async def partition(self, scenario: str, seconds: float, seed: int) -> None:
        """``scenario`` for ``seconds``, drawn from ``seed``; then healed, and the cluster whole
        again (pause_minority brings a paused side back by itself; docs/cluster.md)."""
        servers = servers_script()
        found = grudges(scenario, self.nodes, random.Random(seed))
        await asyncio.to_thread(servers.rabbit_partition, {n: sorted(s) for n, s in found.items()})
        began = time.time()
        try:
            await asyncio.sleep(seconds)
        finally:
            restarted = await asyncio.to_thread(servers.rabbit_heal_partition)
        healed = began + seconds
        window = Window(scenario, seconds, found, began, healed, time.time(), tuple(restarted))
        self.windows.append(window)
        self.log(
            f"{scenario} {describe(found)} for {seconds:.0f}s: whole "
            f"{window.whole - healed:.1f}s after the heal"
            + (f", nodes restarted {list(restarted)}" if restarted else "")
        )

    async def heal(self) -> None:
        """No partition left (after an interrupted run too)."""
        await asyncio.to_thread(servers_script().rabbit_heal_partition)

    def measure(self, database_url: str) -> None:
        """What each kind of partition cost, from the jobs' own timestamps."""
        self.costs = costs(self.windows, read_finished(database_url))

    def lines(self) -> list[str]:
        """One line per scenario and duration (``chaos: partition ...``)."""
        return [cost.describe() for _key, cost in sorted(self.costs.items())]

    def figures(self) -> list[str]:
        """The summary line's part: the number of partitions, by kind, and their worst delay."""
        kinds: dict[str, int] = defaultdict(int)
        for window in self.windows:
            kinds[f"{window.scenario}_{window.seconds:.0f}s"] += 1
        gaps = [cost.longest_gap for cost in self.costs.values()]
        during = [cost.during.high for cost in self.costs.values() if cost.during.count]
        return [
            f"partitions={len(self.windows)}",
            f"partition_kinds={','.join(f'{k}:{n}' for k, n in sorted(kinds.items())) or 'none'}",
            f"partition_node_restarts={sum(len(w.restarted) for w in self.windows)}",
            f"partition_max_latency={max(during, default=0.0):.1f}s",
            f"partition_max_gap={max(gaps, default=0.0):.1f}s",
        ]


def describe(found: Grudges) -> str:
    """``1x2,1x3`` for node 1 cut from 2 and 3 both ways; ``2<1`` where 2 drops 1 only."""
    pairs = cut_pairs(found)
    both = sorted((a, b) for a, b in pairs if a < b and (b, a) in pairs)
    one_way = sorted((a, b) for a, b in pairs if (b, a) not in pairs)
    return ",".join([*(f"{a}x{b}" for a, b in both), *(f"{a}<{b}" for a, b in one_way)])


# --- what a partition costs ---------------------------------------------------------------------


@dataclass(frozen=True)
class Latencies:
    """Submit-to-finish seconds of some jobs."""

    count: int = 0
    median: float = 0.0
    p99: float = 0.0
    high: float = 0.0

    @classmethod
    def of(cls, values: list[float]) -> Latencies:
        if not values:
            return cls()
        ordered = sorted(values)
        p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
        return cls(len(ordered), statistics.median(ordered), p99, ordered[-1])

    def describe(self) -> str:
        return f"p50/p99/max {self.median:.1f}/{self.p99:.1f}/{self.high:.1f}s"


@dataclass(frozen=True)
class Cost:
    """What the partitions of one scenario and duration cost."""

    scenario: str
    seconds: float
    times: int
    during: Latencies  # plain jobs accepted while such a partition was in or healing
    outside: Latencies  # plain jobs accepted while no partition was
    longest_gap: float  # the longest stretch without a finished job overlapping one of them
    whole_after: float  # the longest time from the heal until the cluster was whole
    restarts: int  # nodes restarted after the heal

    def describe(self) -> str:
        return (
            f"partition {self.scenario} {self.seconds:.0f}s: {self.times} times, plain jobs "
            f"accepted during {self.during.count} ({self.during.describe()}) vs outside "
            f"{self.outside.count} ({self.outside.describe()}), longest gap without a finished "
            f"job {self.longest_gap:.1f}s, whole {self.whole_after:.1f}s after the heal, "
            f"node restarts {self.restarts}"
        )


def costs(
    windows: list[Window], finished: list[tuple[float, float]]
) -> dict[tuple[str, float], Cost]:
    """For each scenario and duration: submit-to-finish latencies of the jobs (``(created,
    finished)`` epoch seconds) accepted during such a partition (until the cluster was whole)
    against those accepted outside every partition, and the longest gap between two finished
    jobs that overlaps one of them."""
    outside = Latencies.of(
        [end - start for start, end in finished if not any(_within(w, start) for w in windows)]
    )
    ends = sorted(end for _start, end in finished)
    found: dict[tuple[str, float], Cost] = {}
    by_key: dict[tuple[str, float], list[Window]] = defaultdict(list)
    for window in windows:
        by_key[window.key].append(window)
    for key, group in by_key.items():
        during = [end - start for start, end in finished if any(_within(w, start) for w in group)]
        found[key] = Cost(
            key[0],
            key[1],
            len(group),
            Latencies.of(during),
            outside,
            max(_longest_gap(ends, w) for w in group),
            max(w.whole - w.healed for w in group),
            sum(len(w.restarted) for w in group),
        )
    return found


def _within(window: Window, moment: float) -> bool:
    return window.began <= moment <= window.whole


def _longest_gap(ends: list[float], window: Window) -> float:
    """The longest time between two consecutive finishes (or the window's edges) overlapping
    ``window``."""
    inside = [end for end in ends if window.began <= end <= window.whole]
    before = [end for end in ends if end < window.began][-1:]
    after = [end for end in ends if end > window.whole][:1]
    moments = [*(before or [window.began]), *inside, *(after or [window.whole])]
    return max((b - a for a, b in itertools.pairwise(moments)), default=0.0)


def read_finished(database_url: str) -> list[tuple[float, float]]:
    """(created, finished) epoch seconds of the run's plain jobs that succeeded at their first
    attempt: their delay is the system's, not a retry's, a sleep's, a limit's, a predecessor's
    or a batch's."""
    with psycopg.connect(libpq_url(database_url), connect_timeout=5) as connection:
        rows = connection.execute(
            "SELECT created_at, finished_at FROM jobrelay.jobs WHERE state = 'succeeded'"
            " AND attempts = 1 AND workflow_id IS NULL AND parent_job_id IS NULL"
            " AND sequence_key IS NULL AND NOT (type = ANY(%s))",
            [list(NOT_PLAIN)],
        ).fetchall()
    return [(created.timestamp(), done.timestamp()) for created, done in rows]
