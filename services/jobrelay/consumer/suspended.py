"""An attempt that a durable call ended (docs/durable-execution.md): neither a result nor a
failure of the handler's, and no attempt used.

``Suspended``: the store has put the job to sleep in the transaction that recorded the sleep or
the wait (``sleeping``: no lease, no slot, an outbox row due at its wake time if it has one), so
there is nothing left to store: the message is acked, and the job is relayed again when it
wakes. ``LeaseGone`` is a lost lease to the worker (``Worker._lease_lost``): nothing recorded, the
message requeued.
"""

from __future__ import annotations

import logging
from typing import Any

from jobrelay.consumer.metrics import ConsumerMetrics
from jobrelay.consumer.verdict import Disposition, Verdict
from jobrelay.core.deliveries import DeliveryOutcome
from jobrelay.core.durable import Suspended
from jobrelay.core.jobs import Job

log = logging.getLogger("jobrelay.consumer")

SLEPT = Verdict(Disposition.ACK, DeliveryOutcome.SLEPT)


def slept(
    suspended: Suspended, seconds: float, job: Job, metrics: ConsumerMetrics, extra: dict[str, Any]
) -> Verdict:
    """The job sleeps: say until when, or what for, and ack its message."""
    metrics.ran(job.type, DeliveryOutcome.SLEPT, seconds)
    context: dict[str, Any] = {**extra, "event": "sleeping"}
    until = ""
    if suspended.wake_at is not None:
        context["wake_at"] = suspended.wake_at.isoformat()
        until = f" until {context['wake_at']}"
    if suspended.waiting_for:
        context["waiting_for"] = _waiting_for(suspended.waiting_for)
        log.info("waiting for %s%s", context["waiting_for"], until, extra=context)
    else:
        log.info("sleeping%s", until, extra=context)
    return SLEPT


def _waiting_for(waiting_for: dict[str, str]) -> str:
    """``signal 'approved'``, ``child '6f1c...'``: a signal's name is the handler's, cut short."""
    return ", ".join(f"{what} {str(name)[:100]!r}" for what, name in waiting_for.items())
