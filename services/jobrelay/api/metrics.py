"""The API's Prometheus metrics and the ASGI middleware that records requests."""

from __future__ import annotations

import functools
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


# ``labels()`` takes the metric's lock and rebuilds its key on every call, and every request
# records one sample (every submission two): the labelled children are looked up once per label
# set instead. The caches are bounded (a client chooses the method), the metrics' children not
# affected: an evicted child is looked up again.
@functools.lru_cache(maxsize=1024)
def request_seconds(route: str, method: str, status: int) -> Histogram:
    return REQUESTS.labels(route, method, str(status))


@functools.lru_cache(maxsize=1024)
def submissions(job_type: str, outcome: str) -> Counter:
    return SUBMISSIONS.labels(job_type, outcome)


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
            request_seconds(route, scope["method"], status).observe(time.perf_counter() - started)
