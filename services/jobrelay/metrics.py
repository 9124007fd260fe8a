"""What the Prometheus metrics of every process share: a registry of its own (no globals, so
several services in one test process never share counts), metrics made in it, and ``/metrics``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

# How the values of one gauge in several processes add up (prometheus_client's multiprocess
# modes); "live…": only the processes still running count.
GaugeMode = Literal[
    "all",
    "liveall",
    "min",
    "livemin",
    "max",
    "livemax",
    "sum",
    "livesum",
    "mostrecent",
    "livemostrecent",
]


class ProcessMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()

    def counter(
        self,
        name: str,
        text: str,
        labels: Sequence[str] = (),
        *,
        known: Iterable[str] = (),
    ) -> Counter:
        """``known``: values of the (one) label exported at 0 before their first count, so a
        rate over them exists from the start."""
        metric = Counter(name, text, labels, registry=self.registry)
        for value in known:
            metric.labels(value)
        return metric

    def gauge(self, name: str, text: str, *, multiprocess_mode: GaugeMode = "all") -> Gauge:
        """``multiprocess_mode``: how the workers' values add up when they share a directory
        (``api/multiprocess.py``), e.g. ``livesum``; ignored in a process of its own."""
        return Gauge(name, text, registry=self.registry, multiprocess_mode=multiprocess_mode)

    def histogram(
        self, name: str, text: str, labels: Sequence[str] = (), *, buckets: Sequence[float]
    ) -> Histogram:
        return Histogram(name, text, labels, buckets=buckets, registry=self.registry)

    def serve(self, port: int, host: str = "0.0.0.0") -> None:
        """Expose ``/metrics`` on ``port`` from a background thread."""
        start_http_server(port, addr=host, registry=self.registry)
