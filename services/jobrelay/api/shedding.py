"""Load shedding: each API worker admits at most ``Settings.admitted_requests`` requests at
once and answers the rest ``503 overloaded`` with ``Retry-After`` at once, before reading their
body (docs/overload.md).

The job read that waits (``GET /v1/jobs/{job_id}?wait=``) is not counted (it has its own bound,
``api/waiting.py``); a ``wait`` parameter on any other route is no reason to be let in.

Without it a burst queues without bound in the worker: every request is eventually accepted,
but after seconds, past the point where its client gave up (and may retry, doubling the work).
Shed at the door, an accepted request waits at most for the admitted ones ahead of it, and a
client is told to come back instead of being kept waiting. Probes and scrapers are never shed:
an overloaded worker is alive, and its metrics are what an operator needs then.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any
from urllib.parse import parse_qsl

from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from jobrelay.api import routing
from jobrelay.api.metrics import ApiMetrics
from jobrelay.api.problems import OVERLOADED_RETRY_AFTER, problem, retry_after

NEVER_SHED = frozenset({"/healthz", "/readyz", "/metrics"})


class SheddingMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        admitted: int,
        metrics: ApiMetrics,
        waiting_reads: Collection[Callable[..., Any]] = (),
    ) -> None:
        self.app = app
        self.admitted = admitted
        self.metrics = metrics
        # The endpoints whose ?wait= reads are not counted: matched by route, not by query.
        self.waiting_reads = frozenset(waiting_reads)
        self.in_flight = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.admitted or self._exempt(scope):
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.admitted:
            self.metrics.shed("overloaded").inc()
            detail = f"this worker admits {self.admitted} requests at once"
            await overloaded(detail)(scope, receive, send)
            return
        self.in_flight += 1
        self.metrics.in_flight.set(self.in_flight)
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1
            self.metrics.in_flight.set(self.in_flight)

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


def overloaded(detail: str) -> JSONResponse:
    return problem(
        503,
        "overloaded",
        "The API is at capacity; retry with the same key after Retry-After",
        detail,
        headers=retry_after(OVERLOADED_RETRY_AFTER),
    )
