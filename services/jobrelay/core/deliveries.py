"""How one delivery ended, as the consumer settles it: the label of its metrics
(``consumer/metrics.py``) and the ``jobrelay.outcome`` of its execution span (``telemetry.py``)."""

from __future__ import annotations

from enum import StrEnum


class DeliveryOutcome(StrEnum):
    SUCCEEDED = "succeeded"
    RETRIED = "retried"
    QUARANTINED = "quarantined"
    CANCELLED = "cancelled"
    DEFERRED = "deferred"  # a type this consumer does not know: put back, no attempt
    HELD = "held"  # its queue paused or its type at a limit: put back, no attempt
    SLEPT = "slept"  # a durable call put the job to sleep (docs/durable-execution.md): no attempt
    DUPLICATE = "duplicate"
    STALE = "stale"  # the outcome was rejected: the lease is no longer ours
    ATTEMPTS_EXHAUSTED = "attempts_exhausted"
    UNKNOWN_JOB = "unknown_job"
    MALFORMED = "malformed"
    LEASE_LOST = "lease_lost"
    STORE_UNAVAILABLE = "store_unavailable"
    INTERRUPTED = "interrupted"  # the consumer stopped while it ran
    ERROR = "error"  # a bug: requeued
