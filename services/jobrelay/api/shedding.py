"""Load shedding: each API worker admits at most ``Settings.admitted_requests`` requests at
once and answers the rest ``503 overloaded`` with ``Retry-After`` at once, before reading their
body (docs/overload.md).

``?wait`` reads are not counted (they have their own bound, ``api/waiting.py``).

Without it a burst queues without bound in the worker: every request is eventually accepted,
but after seconds, past the point where its client gave up (and may retry, doubling the work).
Shed at the door, an accepted request waits at most for the admitted ones ahead of it, and a
client is told to come back instead of being kept waiting. Probes and scrapers are never shed:
an overloaded worker is alive, and its metrics are what an operator needs then.
"""

from __future__ import annotations

from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from jobrelay.api.metrics import ApiMetrics
from jobrelay.api.problems import OVERLOADED_RETRY_AFTER, problem, retry_after

NEVER_SHED = frozenset({"/healthz", "/readyz", "/metrics"})


class SheddingMiddleware:
    def __init__(self, app: ASGIApp, admitted: int, metrics: ApiMetrics) -> None:
        self.app = app
        self.admitted = admitted
        self.metrics = metrics
        self.in_flight = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.admitted or _exempt(scope):
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


def _exempt(scope: Scope) -> bool:
    """Probes and scrapers; and ``?wait`` reads, which hold no connection while they wait and
    have their own bound (``api/waiting.py``)."""
    if scope["path"] in NEVER_SHED:
        return True
    query = b"&" + scope.get("query_string", b"")
    return scope["method"] == "GET" and b"&wait=" in query


def overloaded(detail: str) -> JSONResponse:
    return problem(
        503,
        "overloaded",
        "The API is at capacity; retry with the same key after Retry-After",
        detail,
        headers=retry_after(OVERLOADED_RETRY_AFTER),
    )
