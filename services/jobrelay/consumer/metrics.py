"""Prometheus metrics of one consumer process, on a registry of its own (no globals)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800)


class ConsumerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.deliveries = Counter(
            "jobrelay_consumer_deliveries_total",
            "Deliveries handled, by outcome (succeeded, retried, quarantined, duplicate, stale, "
            "malformed, unknown_job, attempts_exhausted, lease_lost, store_unavailable, "
            "interrupted).",
            ["outcome"],
            registry=self.registry,
        )
        self.job_duration = Histogram(
            "jobrelay_consumer_job_duration_seconds",
            "Handler run time of one attempt, by job type and outcome.",
            ["type", "outcome"],
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )
        self.lease_renewals = Counter(
            "jobrelay_consumer_lease_renewals_total",
            "Leases extended by the heartbeat.",
            registry=self.registry,
        )
        self.lease_losses = Counter(
            "jobrelay_consumer_lease_losses_total",
            "Attempts abandoned because their lease could not be renewed.",
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "jobrelay_consumer_in_flight_jobs",
            "Deliveries being processed right now.",
            registry=self.registry,
        )
        self.store_errors = Counter(
            "jobrelay_consumer_store_unavailable_total",
            "Database calls that failed because PostgreSQL could not be reached.",
            registry=self.registry,
        )
        self.settle_errors = Counter(
            "jobrelay_consumer_settle_errors_total",
            "Acks or nacks that failed (channel gone after a reconnect); the message comes again.",
            registry=self.registry,
        )

    def serve(self, port: int, host: str = "0.0.0.0") -> None:
        """Expose ``/metrics`` on ``port`` from a background thread."""
        start_http_server(port, addr=host, registry=self.registry)
