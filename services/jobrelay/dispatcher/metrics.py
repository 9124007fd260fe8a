"""The dispatcher's Prometheus metrics, in a registry of its own (several dispatchers can run
in one test process without clashing)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge

from jobrelay.core.relay import FAILURE_REASONS
from jobrelay.metrics import ProcessMetrics

PREFIX = "jobrelay_dispatcher_"


class DispatcherMetrics(ProcessMetrics):
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        super().__init__(registry)
        self.published = self.counter(
            PREFIX + "messages_published",
            "Outbox rows published and confirmed by the broker.",
        )
        self.failures = self.counter(
            PREFIX + "publish_failures",
            "Publishes that were not confirmed, by reason; the row is retried after a backoff.",
            ["reason"],
            known=FAILURE_REASONS,
        )
        self.oldest_due_age = self.gauge(
            PREFIX + "oldest_due_unpublished_age_seconds",
            "How long the oldest due, unpublished outbox row has waited (0 when none).",
        )
        self.batch_size = self.histogram(
            PREFIX + "batch_size",
            "Outbox rows leased per batch.",
            buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000),
        )
        self.rescued = self.counter(
            PREFIX + "rescued_leases",
            "Running jobs whose lease expired, put back to queued with a new outbox row.",
        )
        self.retention_deleted = self.counter(
            PREFIX + "retention_deleted_rows",
            "Rows deleted by retention, by table.",
            ["table"],
        )
        self.redispatched = self.counter(
            PREFIX + "redispatched",
            "Jobs published again because their message was provably lost: their work queue "
            "was empty while they waited, published long ago and never claimed.",
            ["queue"],
        )
        self.quarantine_reconciled = self.counter(
            PREFIX + "quarantine_reconciled",
            "Jobs marked quarantined (delivery_limit) because the broker dead-lettered their "
            "message on its own.",
        )
        self.quarantine_removed = self.counter(
            PREFIX + "quarantine_removed_messages",
            "Messages removed from the quarantine queue: surplus (a second copy of a "
            "quarantined job's message) or stale (its job is no longer quarantined).",
            ["reason"],
            known=("surplus", "stale"),
        )
        self.quarantine_restored = self.counter(
            PREFIX + "quarantine_restored_messages",
            "Messages published again into the quarantine queue for quarantined jobs that had "
            "none (a dead-letter lost to a broker-node fault): the database is the truth.",
        )
        self.broker_blocked = self.gauge(
            PREFIX + "broker_blocked",
            "1 while the broker blocks publishing (connection.blocked: a memory or disk alarm); "
            "nothing is leased then, accepted jobs wait in the outbox.",
        )
        self.broker_blocks = self.counter(
            PREFIX + "broker_blocks",
            "Times the broker blocked publishing.",
        )
        self.scheduled = self.counter(
            PREFIX + "scheduled_jobs",
            "Jobs made by periodic schedules (one a tick, whichever dispatcher made it), by "
            "schedule.",
            ["schedule"],
        )
        # Flow control (docs/flow-control.md): the relay window per work queue.
        self.window_in_use = Gauge(
            "jobrelay_relay_window_in_use",
            "Messages of the work queue published and not yet claimed (the broker's ready "
            "count plus this dispatcher's publishes in flight), at the last fill.",
            ["queue"],
            registry=self.registry,
        )
        self.backlog_held = Gauge(
            "jobrelay_relay_backlog_held",
            "Due outbox rows of the work queue not yet published: held back by the relay "
            "window, a pause or a limit (read every couple of seconds).",
            ["queue"],
            registry=self.registry,
        )
        self.listener_connected = self.gauge(
            PREFIX + "listener_connected",
            "1 while the LISTEN connection for new outbox rows is up.",
        )
