"""The API's Prometheus metrics and the ASGI middleware that records requests."""

from __future__ import annotations

import functools
import time

from prometheus_client import (
    Counter,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from jobrelay.metrics import ProcessMetrics


class ApiMetrics(ProcessMetrics):
    """The API's Prometheus metrics, in a registry of their own that the app holds: two apps
    in one process (tests) never share counts, and ``/metrics`` serves exactly these, with the
    process and runtime collectors the default registry would have added."""

    def __init__(self) -> None:
        super().__init__()
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        self.requests = self.histogram(
            "jobrelay_api_request_seconds",
            "API request latency by route template, method and status",
            ["route", "method", "status"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
        )
        self.submissions_total = self.counter(
            "jobrelay_api_submissions_total",
            "Job submissions by job type and outcome (created, existing, conflict)",
            ["type", "outcome"],
        )
        self.shed_total = self.counter(
            "jobrelay_api_shed_requests_total",
            "Requests refused to protect the API: overloaded (503), rate_limited (429), "
            "database_unavailable (503: no pooled connection in time, or none to be had)",
            ["reason"],
            known=("overloaded", "rate_limited", "database_unavailable"),
        )
        self.in_flight = self.gauge(
            "jobrelay_api_requests_in_flight",
            "Requests this worker is handling now (what load shedding bounds)",
        )
        # ``labels()`` takes the metric's lock and rebuilds its key on every call, and every
        # request records one sample (every submission two): the labelled children are looked
        # up once per label set instead. The caches are bounded (a client chooses the method);
        # an evicted child is looked up again, its counts untouched.
        self.request_seconds = functools.lru_cache(maxsize=1024)(self._request_seconds)
        self.submissions = functools.lru_cache(maxsize=1024)(self._submissions)
        self.shed = functools.lru_cache(maxsize=8)(self.shed_total.labels)

    def _request_seconds(self, route: str, method: str, status: int) -> Histogram:
        return self.requests.labels(route, method, str(status))

    def _submissions(self, job_type: str, outcome: str) -> Counter:
        return self.submissions_total.labels(job_type, outcome)


class RequestMetricsMiddleware:
    def __init__(self, app: ASGIApp, metrics: ApiMetrics) -> None:
        self.app = app
        self.metrics = metrics

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
            self.metrics.request_seconds(route, scope["method"], status).observe(
                time.perf_counter() - started
            )
