"""Load shedding by waiting time: each API worker handles at most ``Settings.admitted_requests``
requests at once; past those a request waits its turn, first come first served, and is answered
``503 overloaded`` with ``Retry-After`` (before its body is read, so it changes nothing) only
when it would wait longer than ``Settings.api_max_queue_seconds`` to be handled
(docs/overload.md, SPEC section 19).

Shedding is for overload, not for bursts. Refused as soon as every slot was busy (the rule
before this one), 50 submissions arriving together at an idle worker got 30 answers 503, though
all would have been answered within 0.1 s. Let in without bound, a burst queues in the worker
until its requests are answered after their clients gave up (and retried, doubling the work).
So a newcomer is shed at once when its expected wait passes the bound, and a waiter whose
actual wait passes it is shed then: nothing waits longer, whatever the estimate said. A worker
that, within the last ``OVERLOAD_MEMORY_SECONDS``, shed a request, or (having shed within the
last ``SHED_MEMORY_SECONDS``) kept one waiting longer than a tenth of the bound, is overloaded,
not absorbing a burst: newcomers then get that tenth (``queue_bound``), which keeps accepted
requests fast while the rest come back later.

The job read that waits (``GET /v1/jobs/{job_id}?wait=``) is not counted (it has its own bound,
``api/waiting.py``); a ``wait`` parameter on any other route is no reason to be let in. Probes
and scrapers are never shed: an overloaded worker is alive, and its metrics are what an
operator needs then.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Callable, Collection
from typing import Any
from urllib.parse import parse_qsl

from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from jobrelay.api import routing
from jobrelay.api.metrics import ApiMetrics
from jobrelay.api.problems import (
    OVERLOADED_RETRY_AFTER,
    overloaded_retry_after,
    problem,
    retry_after,
)

NEVER_SHED = frozenset({"/healthz", "/readyz", "/metrics"})

# The share of the bound a newcomer may wait while the worker is overloaded: within the last
# OVERLOAD_MEMORY_SECONDS it shed a request, or a request waited longer than this share for its
# turn. Demand the queue could not absorb, or only with waits that long, is no burst but more
# than the worker handles (CoDel's "standing queue", as in Facebook's adaptive queue
# timeouts): the worker answers at the same rate however long the queue, so a longer wait only
# adds latency to every accepted request while the clients past it are better told to come
# back. Measured at 512 clients (docs/overload.md): with the whole 0.5 s for everyone, p99 of
# accepted requests 0.8 s; with the share only once the queue had stood for the bound, 0.58 s,
# because a queue cut that short drains now and then under the same overload and each time
# started again with the whole bound; with the share after a shed only, 0.53 s, because each
# time the memory lapsed the queue grew to the whole bound before the next shed. A wait past
# the share says so at once (as CoDel's sojourn time above its target does), and a burst
# handled within the share never trips it. With the bound itself at the share (0.05 s), p99
# was 0.19 s: what the queue adds on top of handling under overload.
STANDING_QUEUE_SHARE = 0.1
OVERLOAD_MEMORY_SECONDS = 1.0

# A wait past the share says "overloaded" only at a worker that shed within this long. At a
# worker at rest a burst's own queue outlasts the share whenever its requests take more than
# a few milliseconds each or arrive spread over tens of them (a client opening 100
# connections): counted as overload, it cut the bound to the share in the middle of the burst
# and its last requests were shed though the whole burst was answered well within the bound
# (tests/integration/test_pressure_api.py, on a busy CI machine). A worker that shed lately
# is in an overload whose clients come back after Retry-After (1 to 4 s, so well within ten):
# there a wait past the share is the standing queue growing again, and is cut at once.
SHED_MEMORY_SECONDS = 10.0

# The weight of the newest handling time in the moving average. Each worker handles hundreds
# of requests a second under load: 1/20 forgets a change in a few tens of milliseconds, and one
# slow request (a large list) moves the estimate by a twentieth of its excess, not all of it.
HANDLING_WEIGHT = 0.05


class HandlingTime:
    """A moving average (exponentially weighted) of how long an admitted request is handled,
    from its slot to its answer, and the wait it predicts for a request queued behind others.

    With ``slots`` requests handled at once, each taking ``seconds`` on average, a slot frees
    every ``seconds / slots`` on average (Little's law), so the request with ``ahead`` others
    queued before it gets one after about ``(ahead + 1) * seconds / slots``. The handling time
    is measured under the load itself: when the slots share a smaller pool, the time each waits
    for a connection is in it, so the estimate follows what the worker really achieves.
    """

    def __init__(self, weight: float = HANDLING_WEIGHT) -> None:
        self.weight = weight
        self.seconds: float | None = None  # none measured yet

    def record(self, seconds: float) -> None:
        if self.seconds is None:
            self.seconds = seconds
        else:
            self.seconds += self.weight * (seconds - self.seconds)

    def expected_wait(self, ahead: int, slots: int) -> float:
        """Seconds until a slot, for a request with ``ahead`` waiting before it; 0 until a
        request was measured (then only the deadline bounds the wait)."""
        return (ahead + 1) * (self.seconds or 0.0) / slots


def queue_bound(bound: float, since_overload: float) -> float:
    """The longest a newcomer may wait, when the worker was last seen overloaded (a request
    shed, or one that waited past the share) ``since_overload`` seconds ago: the whole bound
    for a burst at a worker that keeps up, a share of it while it is overloaded
    (``STANDING_QUEUE_SHARE``)."""
    if since_overload < OVERLOAD_MEMORY_SECONDS:
        return bound * STANDING_QUEUE_SHARE
    return bound


class SheddingMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        admitted: int,
        max_queue_seconds: float,
        metrics: ApiMetrics,
        waiting_reads: Collection[Callable[..., Any]] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``max_queue_seconds``: the longest a request may wait for a slot. ``clock``: measures
        the handling times and the time since the last shed."""
        self.app = app
        self.admitted = admitted
        self.metrics = metrics
        # The endpoints whose ?wait= reads are not counted: matched by route, not by query.
        self.waiting_reads = frozenset(waiting_reads)
        self.max_queue_seconds = max_queue_seconds
        self.clock = clock
        self.in_flight = 0
        # A waiter's future is resolved True when a finishing request hands it its slot, False
        # when its deadline passed first. Only pending futures are kept: first in, first out.
        self.waiters: deque[asyncio.Future[bool]] = deque()
        self.overloaded_at = -math.inf  # when a request was last shed or waited too long
        self.shed_at = -math.inf  # when a request was last shed
        self.handling = HandlingTime()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.admitted or self._exempt(scope):
            await self.app(scope, receive, send)
            return
        refusal = await self._take_slot(self.max_queue_seconds)
        if refusal is not None:
            self.overloaded_at = self.shed_at = self.clock()
            self.metrics.shed("overloaded").inc()
            await refusal(scope, receive, send)
            return
        started = self.clock()
        try:
            await self.app(scope, receive, send)
        finally:
            self.handling.record(self.clock() - started)
            self._release()

    async def _take_slot(self, bound: float) -> JSONResponse | None:
        """None once this request holds a slot; otherwise its refusal."""
        if self.in_flight < self.admitted and not self.waiters:
            self._set_in_flight(self.in_flight + 1)
            return None
        if bound <= 0:
            return overloaded(
                f"this worker handles {self.admitted} requests at once",
                overloaded_retry_after(1.0),
            )
        share = bound * STANDING_QUEUE_SHARE
        queued_at = self.clock()
        bound = queue_bound(bound, queued_at - self.overloaded_at)
        expected = self.handling.expected_wait(len(self.waiters), self.admitted)
        if expected > bound:
            return overloaded(
                f"this worker handles {self.admitted} requests at once and would have kept "
                f"this one waiting about {expected:.2f} s, past its {bound:g} s",
                overloaded_retry_after(expected / bound),
            )
        if await self._wait_for_slot(bound):
            now = self.clock()
            if now - queued_at > share and now - self.shed_at < SHED_MEMORY_SECONDS:
                self.overloaded_at = now  # let in, but after a wait past the share
            return None
        return overloaded(
            f"this worker handles {self.admitted} requests at once and this one waited "
            f"{bound:g} s without a turn",
            overloaded_retry_after(1.0),
        )

    async def _wait_for_slot(self, bound: float) -> bool:
        """Queue until a slot is handed over (True) or ``bound`` seconds pass (False)."""
        loop = asyncio.get_running_loop()
        turn: asyncio.Future[bool] = loop.create_future()
        self.waiters.append(turn)
        self._count_waiting()
        deadline = loop.call_later(bound, self._expire, turn)
        try:
            return await turn
        except asyncio.CancelledError:
            # Cancelled (the server stopping) after a slot was handed over: pass it on.
            if turn.done() and not turn.cancelled() and turn.result():
                self._release()
            else:
                self._forget(turn)
            raise
        finally:
            deadline.cancel()

    def _expire(self, turn: asyncio.Future[bool]) -> None:
        if not turn.done():
            turn.set_result(False)
            self._forget(turn)

    def _forget(self, turn: asyncio.Future[bool]) -> None:
        # Deadlines pass in arrival order, so the one leaving is nearly always at the front.
        if turn in self.waiters:
            self.waiters.remove(turn)
            self._count_waiting()

    def _release(self) -> None:
        """A slot is free: hand it to the first waiter (still in flight), else give it back."""
        while self.waiters:
            turn = self.waiters.popleft()
            if not turn.done():
                turn.set_result(True)
                self._count_waiting()
                return
        self._set_in_flight(self.in_flight - 1)

    def _set_in_flight(self, count: int) -> None:
        self.in_flight = count
        self.metrics.in_flight.set(count)

    def _count_waiting(self) -> None:
        self.metrics.waiting.set(len(self.waiters))

    def _exempt(self, scope: Scope) -> bool:
        """Probes and scrapers; and the job read that waits, which holds no connection while
        it waits and has its own bound (``api/waiting.py``)."""
        if scope["path"] in NEVER_SHED:
            return True
        if scope["method"] != "GET" or not _asks_to_wait(scope):
            return False
        route = routing.route_of(scope)
        return getattr(route, "endpoint", None) in self.waiting_reads


def _asks_to_wait(scope: Scope) -> bool:
    query = scope.get("query_string", b"").decode("latin-1")
    return any(name == "wait" for name, _ in parse_qsl(query, keep_blank_values=True))


def overloaded(detail: str, seconds: int = OVERLOADED_RETRY_AFTER) -> JSONResponse:
    return problem(
        503,
        "overloaded",
        "The API is at capacity; retry with the same key after Retry-After",
        detail,
        headers=retry_after(seconds),
    )
