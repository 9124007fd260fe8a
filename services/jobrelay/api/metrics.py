"""The API's Prometheus metrics and the ASGI middleware that records requests."""

from __future__ import annotations

import time

from prometheus_client import Counter, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

REQUESTS = Histogram(
    "jobrelay_api_request_seconds",
    "API request latency by route template, method and status",
    ["route", "method", "status"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
)
SUBMISSIONS = Counter(
    "jobrelay_api_submissions_total",
    "Job submissions by job type and outcome (created, existing, conflict)",
    ["type", "outcome"],
)


class RequestMetricsMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def record_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, record_status)
        finally:
            route = getattr(scope.get("route"), "path", "unmatched")
            REQUESTS.labels(route, scope["method"], str(status)).observe(
                time.perf_counter() - started
            )
