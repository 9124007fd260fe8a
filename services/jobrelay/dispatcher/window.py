"""The relay window and the flow pick (docs/flow-control.md): what the dispatcher may publish
next, per work queue.

Per queue at most ``JOBRELAY_RELAY_WINDOW`` messages are published and not yet claimed; the rest
stay in the outbox, due but unpublished. "Published, not yet claimed" is measured as the
broker's ready count of the queue (a passive declare, ``broker/depth.py``) plus this
dispatcher's rows still being published. The count is read before a fill unless the last one,
read within ``WINDOW_MEASURE_SECONDS``, plus every row leased since, leaves room for a whole batch
in every queue: then the fill is what a new read would allow, one broker round trip fewer in the
path of a job at a light load. A queue's messages are in the shared queue of
before and in the queues of its types (``jobrelay.type.<type>``): the types a running consumer
serves (``job_types.served_until``) are counted. A type nobody runs waits in its own queue,
outside the window, so it holds no other type back. While a queue's window is full, the count is
read again every ``WINDOW_RECHECK_SECONDS``, so a claim frees room at once without a
notification per claim. What fills the room is the flow pick (``queries.LEASE_FLOW_PICK``):
priority order, clients in turn, nothing for a paused queue, keys at their concurrency limit and
types over their rate skipped. The paused queues and the runtime limits are read every
``CONTROLS_REFRESH_SECONDS``, so a change takes effect within seconds with no restart.

With no window (0), no pause and no limit, a fill is the plain ``lease_batch`` of before.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from jobrelay.core.errors import StoreUnavailable
from jobrelay.core.flow import Limit, limits_in_force
from jobrelay.core.relay import (
    FlowControls,
    FlowRules,
    OutboxRow,
    OutboxStore,
    QueueDepth,
    QueueDepths,
    QueuePick,
)
from jobrelay.core.topology import DEFAULT_QUEUE_NAME, queue_short_name, type_queue_name
from jobrelay.dispatcher.metrics import DispatcherMetrics

log = logging.getLogger(__name__)

# How often a full window is measured again (a claim frees room within this).
WINDOW_RECHECK_SECONDS = 0.05
# How long a measure of the broker's ready counts stands in for a new one while the window
# surely has room for a whole batch (what other dispatchers and redeliveries add meanwhile is
# seen within this).
WINDOW_MEASURE_SECONDS = 1.0
# How often rows held back by a pause or a limit are tried again.
HELD_RECHECK_SECONDS = 0.5
# How often the paused queues, the runtime limits and the backlog gauge are read.
CONTROLS_REFRESH_SECONDS = 2.0


def short_routes(type_queues: Mapping[str, str]) -> dict[str, str]:
    """JOBRELAY_TYPE_QUEUES with short queue names (``jobrelay.jobs.slow`` → ``slow``)."""
    return {job_type: queue_short_name(queue) for job_type, queue in type_queues.items()}


def work_queues(routes: Mapping[str, str]) -> list[str]:
    """``default`` and every queue a type is routed to: what a dispatcher registers and fills."""
    return sorted({DEFAULT_QUEUE_NAME, *routes.values()})


@dataclass(frozen=True)
class FillPlan:
    """What one fill may lease: a pick per queue with room, and the queues whose window is
    full (their backlog, if any, is held back)."""

    picks: list[QueuePick]
    full: list[str]
    in_use: dict[str, int]


def plan_fill(
    queues: Iterable[str],
    *,
    window: int,
    batch_size: int,
    ready: Mapping[str, int],
    in_flight: Mapping[str, int],
    paused: frozenset[str],
) -> FillPlan:
    """Room per queue: the window less its messages ready in the broker and this dispatcher's
    rows still being published (counted twice at worst once the broker has them: a fill errs
    on the small side); at most a batch per queue. A paused queue gets no pick. ``window`` 0:
    no window, a batch per queue."""
    picks: list[QueuePick] = []
    full: list[str] = []
    in_use: dict[str, int] = {}
    for queue in queues:
        used = ready.get(queue, 0) + in_flight.get(queue, 0)
        in_use[queue] = used
        if queue in paused:
            continue
        room = batch_size if window == 0 else min(batch_size, window - used)
        if room <= 0:
            full.append(queue)
        else:
            picks.append(QueuePick(queue, room))
    return FillPlan(picks, full, in_use)


@dataclass
class RelayWindow:
    """The relay window of every work queue: decides each fill (``lease``: what the window has
    room for, by the flow pick) and how soon a held backlog is tried again (``recheck_in``)."""

    store: OutboxStore
    depths: QueueDepths | None
    window: int
    routes: dict[str, str] = field(default_factory=dict)
    code_limits: dict[str, Limit] = field(default_factory=dict)
    metrics: DispatcherMetrics = field(default_factory=DispatcherMetrics)
    clock: Callable[[], float] = time.monotonic
    controls: FlowControls = field(default_factory=FlowControls)
    recheck_in: float | None = None  # None: nothing held back by the last fill
    _in_flight: dict[str, int] = field(default_factory=dict)
    # The last read of the ready counts, when, and the rows leased per queue since.
    _measured: dict[str, int] = field(default_factory=dict)
    _measured_at: float | None = None
    _leased_since: dict[str, int] = field(default_factory=dict)
    _refreshed_at: float | None = None
    _registered: bool = False

    @property
    def queues(self) -> list[str]:
        return work_queues(self.routes)

    @property
    def rules(self) -> FlowRules:
        return FlowRules(
            self.routes, limits_in_force(self.code_limits, self.controls.runtime_limits)
        )

    def queue_of(self, job_type: str) -> str:
        return self.routes.get(job_type, DEFAULT_QUEUE_NAME)

    async def lease(self, batch_size: int, lease_seconds: float) -> list[OutboxRow]:
        """Lease the next rows to publish (counted in flight until ``settled``)."""
        await self.refresh()
        rules = self.rules
        if self.window == 0 and not self.controls.paused and not rules.limits:
            self.recheck_in = None
            rows = await self.store.lease_batch(batch_size, lease_seconds)
        else:
            rows = await self._lease_in_flow(rules, batch_size, lease_seconds)
        for row in rows:
            queue = self.queue_of(row.type)
            self._in_flight[queue] = self._in_flight.get(queue, 0) + 1
            self._leased_since[queue] = self._leased_since.get(queue, 0) + 1
        return rows

    def settled(self, rows: Sequence[OutboxRow]) -> None:
        """These rows' publishes are answered: the broker's count has them now."""
        for row in rows:
            queue = self.queue_of(row.type)
            self._in_flight[queue] = max(0, self._in_flight.get(queue, 0) - 1)

    async def _lease_in_flow(
        self, rules: FlowRules, batch_size: int, lease_seconds: float
    ) -> list[OutboxRow]:
        ready = await self._ready(batch_size) if self.window else {}
        plan = plan_fill(
            self.queues,
            window=self.window,
            batch_size=batch_size,
            ready=ready,
            in_flight=self._in_flight,
            paused=self.controls.paused,
        )
        for queue, used in plan.in_use.items():
            self.metrics.window_in_use.labels(queue=queue).set(used)
        rows = await self.store.lease_picks(plan.picks, rules, lease_seconds) if plan.picks else []
        asked = sum(pick.limit for pick in plan.picks)
        if plan.full:
            self.recheck_in = WINDOW_RECHECK_SECONDS
        elif rows:
            # Something went out: the next fill follows at once, as without flow control. Only
            # a fill that leased nothing while rows are held back (a pause, limits) waits, so
            # a backlog of limited keys is not published one short fill per recheck.
            self.recheck_in = None
        elif self.controls.paused or (rules.limits and asked):
            self.recheck_in = HELD_RECHECK_SECONDS
        else:
            self.recheck_in = None
        return rows

    async def _ready(self, batch_size: int) -> dict[str, int]:
        """Ready messages per queue: read from the broker, or at most the last read plus the
        rows leased since, while that leaves room for ``batch_size`` in every queue."""
        estimate = {
            queue: self._measured.get(queue, 0) + self._leased_since.get(queue, 0)
            for queue in self.queues
        }
        if (
            self._measured_at is not None
            and self.clock() - self._measured_at < WINDOW_MEASURE_SECONDS
            and all(
                estimate[queue] + self._in_flight.get(queue, 0) + batch_size <= self.window
                for queue in self.queues
            )
        ):
            return estimate
        measured_at = self.clock()
        self._measured = await self._read_ready()
        self._measured_at, self._leased_since = measured_at, {}
        return self._measured

    async def _read_ready(self) -> dict[str, int]:
        """Ready messages per queue: its shared queue's, plus its served types' queues'."""
        if self.depths is None:
            return {}
        types = sorted(self.controls.served)
        found: dict[str, QueueDepth] = await self.depths.depths(
            [*self.queues, *(type_queue_name(job_type) for job_type in types)]
        )
        ready = {queue: found[queue].ready for queue in self.queues if queue in found}
        for job_type in types:
            depth = found.get(type_queue_name(job_type))
            if depth is not None:
                queue = self.queue_of(job_type)
                ready[queue] = ready.get(queue, 0) + depth.ready
        return ready

    async def refresh(self, *, force: bool = False) -> None:
        """Every CONTROLS_REFRESH_SECONDS: register the queues (once), read the paused queues
        and the runtime limits, and set the backlog gauge. A database outage keeps the last
        controls (the lease that follows reports it)."""
        now = self.clock()
        if (
            not force
            and self._refreshed_at is not None
            and now - self._refreshed_at < CONTROLS_REFRESH_SECONDS
        ):
            return
        self._refreshed_at = now
        try:
            if not self._registered:
                await self.store.register_queues(self.queues)
                self._registered = True
            self.controls = await self.store.flow_controls()
            backlogs = await self.store.queue_backlogs(self.routes)
        except StoreUnavailable:
            return
        for queue in {*self.queues, *backlogs}:
            self.metrics.backlog_held.labels(queue=queue).set(backlogs.get(queue, 0))
