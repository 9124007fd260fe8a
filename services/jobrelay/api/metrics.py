"""The API's Prometheus metrics and the ASGI middleware that records requests."""

from __future__ import annotations

import functools
import time
from pathlib import Path

from prometheus_client import (
    CollectorRegistry,
    Counter,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from jobrelay.api import multiprocess, routing
from jobrelay.api.stats_metrics import StatsCollector, StatsSnapshots
from jobrelay.metrics import ProcessMetrics


class ApiMetrics(ProcessMetrics):
    """The API's Prometheus metrics, in a registry of their own that the app holds: two apps
    in one process (tests) never share counts, and ``/metrics`` serves exactly these, with the
    process and runtime collectors the default registry would have added, and the system's
    counts (``api/stats_metrics.py``).

    With ``multiprocess_dir`` (several workers, ``api/multiprocess.py``) the metrics are
    written to that directory and ``/metrics`` serves what every worker wrote there instead.
    """

    def __init__(self, multiprocess_dir: Path | None = None) -> None:
        super().__init__()
        self.multiprocess_dir = multiprocess_dir
        self.served = self._served_registry(multiprocess_dir)
        # Added to the scrape as this process read them: never summed over the workers.
        self.stats = StatsSnapshots()
        self.served.register(StatsCollector(self.stats))
        self.requests = self.histogram(
            "jobrelay_api_request_seconds",
            "API request latency by route template, method and status",
            ["route", "method", "status"],
            # Up to a minute: a job read with ?wait= may take its full MAX_WAIT_SECONDS (60).
            buckets=(
                0.001,
                0.0025,
                0.005,
                0.01,
                0.025,
                0.05,
                0.1,
                0.25,
                0.5,
                1,
                2.5,
                5,
                10,
                30,
                60,
            ),
        )
        self.submissions_total = self.counter(
            "jobrelay_api_submissions_total",
            "Job submissions by job type and outcome (created, existing, deduplicated, conflict)",
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
            "Requests the API workers are handling now (what load shedding bounds, per worker)",
            multiprocess_mode="livesum",
        )
        self.waiting = self.gauge(
            "jobrelay_api_requests_waiting",
            "Requests the API workers hold for a free slot now (each waits at most "
            "JOBRELAY_API_MAX_QUEUE_SECONDS, then is shed)",
            multiprocess_mode="livesum",
        )
        # A worker that took a dead worker's pid reopens its files: not its requests.
        self.in_flight.set(0)
        self.waiting.set(0)
        # ``labels()`` takes the metric's lock and rebuilds its key on every call, and every
        # request records one sample (every submission two): the labelled children are looked
        # up once per label set instead. The caches are bounded (a client chooses the method);
        # an evicted child is looked up again, its counts untouched.
        self.request_seconds = functools.lru_cache(maxsize=1024)(self._request_seconds)
        self.submissions = functools.lru_cache(maxsize=1024)(self._submissions)
        self.shed = functools.lru_cache(maxsize=8)(self.shed_total.labels)

    def _served_registry(self, multiprocess_dir: Path | None) -> CollectorRegistry:
        if multiprocess_dir is not None:
            return multiprocess.served_registry(multiprocess_dir)
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        return self.registry

    def exposition(self) -> bytes:
        """The text ``/metrics`` serves (after ``stats.refresh``)."""
        if self.multiprocess_dir is not None:
            multiprocess.forget_dead_workers(self.multiprocess_dir)
        return generate_latest(self.served)

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
            # A request shed before routing is still counted under its route's template.
            route = routing.path_template(scope.get("route") or routing.route_of(scope))
            self.metrics.request_seconds(route, scope["method"], status).observe(
                time.perf_counter() - started
            )
