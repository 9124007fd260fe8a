"""Prometheus metrics of one consumer process, on a registry of its own (no globals)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

from jobrelay.metrics import ProcessMetrics

DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800)


class ConsumerMetrics(ProcessMetrics):
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        super().__init__(registry)
        self.deliveries = self.counter(
            "jobrelay_consumer_deliveries_total",
            "Deliveries handled, by outcome (succeeded, retried, quarantined, cancelled, "
            "slept, duplicate, stale, malformed, unknown_job, attempts_exhausted, lease_lost, "
            "store_unavailable, interrupted). cancelled: its client cancelled the running job; "
            "slept: its handler's sleep or wait put it to sleep.",
            ["outcome"],
        )
        self.job_duration = self.histogram(
            "jobrelay_consumer_job_duration_seconds",
            "Handler run time of one attempt, by job type and outcome.",
            ["type", "outcome"],
            buckets=DURATION_BUCKETS,
        )
        self.lease_renewals = self.counter(
            "jobrelay_consumer_lease_renewals_total",
            "Leases extended by the heartbeat.",
        )
        self.lease_losses = self.counter(
            "jobrelay_consumer_lease_losses_total",
            "Attempts abandoned because their lease could not be renewed.",
        )
        self.in_flight = self.gauge(
            "jobrelay_consumer_in_flight_jobs",
            "Deliveries being processed right now.",
        )
        # Counted in a plain int and read at scrape time: no gauge lock twice per delivery.
        self.running = 0
        self.in_flight.set_function(lambda: self.running)
        # Each label set's child, looked up once: labels() takes a lock and builds a key.
        self._delivered: dict[str, Counter] = {}
        self._ran: dict[tuple[str, str], Histogram] = {}
        self.store_errors = self.counter(
            "jobrelay_consumer_store_unavailable_total",
            "Database calls that failed because PostgreSQL could not be reached.",
        )
        self.long_job_acks = self.counter(
            "jobrelay_consumer_long_job_acks_total",
            "Deliveries acked before their outcome because the job ran past "
            "JOBRELAY_LONG_JOB_ACK_SECONDS (docs/long-jobs.md); its lease alone held it after.",
        )
        self.settle_errors = self.counter(
            "jobrelay_consumer_settle_errors_total",
            "Acks or nacks that failed (channel gone after a reconnect); the message comes again.",
        )

    def delivered(self, outcome: str) -> None:
        """One delivery settled with ``outcome``."""
        child = self._delivered.get(outcome)
        if child is None:
            child = self._delivered[outcome] = self.deliveries.labels(outcome)
        child.inc()

    def ran(self, job_type: str, outcome: str, seconds: float) -> None:
        """One attempt of ``job_type`` ran ``seconds`` to ``outcome``."""
        key = (job_type, outcome)
        child = self._ran.get(key)
        if child is None:
            child = self._ran[key] = self.job_duration.labels(job_type, outcome)
        child.observe(seconds)
