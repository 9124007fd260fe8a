"""The dispatcher's Prometheus metrics, in a registry of its own (several dispatchers can run
in one test process without clashing)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from jobrelay.core.relay import FAILURE_REASONS

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
        self.redispatched = Counter(
            PREFIX + "redispatched",
            "Jobs published again because their message was provably lost: their work queue "
            "was empty while they waited, published long ago and never claimed.",
            ["queue"],
            registry=self.registry,
        )
        self.quarantine_reconciled = Counter(
            PREFIX + "quarantine_reconciled",
            "Jobs marked quarantined (delivery_limit) because the broker dead-lettered their "
            "message on its own.",
            registry=self.registry,
        )
        self.quarantine_removed = Counter(
            PREFIX + "quarantine_removed_messages",
            "Messages removed from the quarantine queue: surplus (a second copy of a "
            "quarantined job's message) or stale (its job is no longer quarantined).",
            ["reason"],
            registry=self.registry,
        )
        for reason in ("surplus", "stale"):
            self.quarantine_removed.labels(reason=reason)
        self.listener_connected = Gauge(
            PREFIX + "listener_connected",
            "1 while the LISTEN connection for new outbox rows is up.",
            registry=self.registry,
        )

    def serve(self, port: int, addr: str = "0.0.0.0") -> None:
        start_http_server(port, addr=addr, registry=self.registry)
