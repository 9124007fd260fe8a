"""What the Prometheus metrics of every process share: a registry of its own (no globals, so
several services in one test process never share counts), metrics made in it, and ``/metrics``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server


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

    def gauge(self, name: str, text: str) -> Gauge:
        return Gauge(name, text, registry=self.registry)

    def histogram(
        self, name: str, text: str, labels: Sequence[str] = (), *, buckets: Sequence[float]
    ) -> Histogram:
        return Histogram(name, text, labels, buckets=buckets, registry=self.registry)

    def serve(self, port: int, host: str = "0.0.0.0") -> None:
        """Expose ``/metrics`` on ``port`` from a background thread."""
        start_http_server(port, addr=host, registry=self.registry)
