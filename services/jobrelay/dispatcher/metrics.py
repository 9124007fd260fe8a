"""The dispatcher's Prometheus metrics, in a registry of its own (several dispatchers can run
in one test process without clashing)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from jobrelay.dispatcher.ports import FAILURE_REASONS

PREFIX = "jobrelay_dispatcher_"


class DispatcherMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.published = Counter(
            PREFIX + "messages_published",
            "Outbox rows published and confirmed by the broker.",
            registry=self.registry,
        )
        self.failures = Counter(
            PREFIX + "publish_failures",
            "Publishes that were not confirmed, by reason; the row is retried after a backoff.",
            ["reason"],
            registry=self.registry,
        )
        for reason in FAILURE_REASONS:
            self.failures.labels(reason=reason)
        self.oldest_due_age = Gauge(
            PREFIX + "oldest_due_unpublished_age_seconds",
            "How long the oldest due, unpublished outbox row has waited (0 when none).",
            registry=self.registry,
        )
        self.batch_size = Histogram(
            PREFIX + "batch_size",
            "Outbox rows leased per batch.",
            buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000),
            registry=self.registry,
        )
        self.rescued = Counter(
            PREFIX + "rescued_leases",
            "Running jobs whose lease expired, put back to queued with a new outbox row.",
            registry=self.registry,
        )
        self.retention_deleted = Counter(
            PREFIX + "retention_deleted_rows",
            "Rows deleted by retention, by table.",
            ["table"],
            registry=self.registry,
        )
        self.listener_connected = Gauge(
            PREFIX + "listener_connected",
            "1 while the LISTEN connection for new outbox rows is up.",
            registry=self.registry,
        )

    def serve(self, port: int, addr: str = "0.0.0.0") -> None:
        start_http_server(port, addr=addr, registry=self.registry)
