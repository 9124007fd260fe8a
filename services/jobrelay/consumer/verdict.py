"""How one delivery ends, decided before the broker hears of it: a ``Verdict`` says ack,
dead-letter or requeue, and the outcome its metrics and span are labelled with. The worker
decides it and carries it out in one place (``consumer/worker.py::Worker._settle``)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from jobrelay.core.deliveries import DeliveryOutcome
from jobrelay.core.execution import Finish
from jobrelay.core.jobs import Cancelled, Outcome, RetryLater, Succeeded


class Disposition(StrEnum):
    ACK = "ack"
    DEAD_LETTER = "dead_letter"  # nack(requeue=False): to the quarantine exchange
    REQUEUE = "requeue"  # nack(requeue=True): the message must survive


@dataclass(frozen=True)
class Verdict:
    disposition: Disposition
    outcome: DeliveryOutcome  # the metrics label, the execution span's outcome
    pause: bool = False  # back off before requeueing (the database is unreachable)


INTERRUPTED = Verdict(Disposition.REQUEUE, DeliveryOutcome.INTERRUPTED)
STORE_UNAVAILABLE = Verdict(Disposition.REQUEUE, DeliveryOutcome.STORE_UNAVAILABLE, pause=True)


def verdict_of(outcome: Outcome, finish: Finish) -> Verdict:
    """The verdict of an attempt whose outcome the store has answered ``finish`` to."""
    if finish is Finish.STALE:
        return Verdict(Disposition.ACK, DeliveryOutcome.STALE)
    if isinstance(outcome, Cancelled) or finish is Finish.CANCELLED:
        return Verdict(Disposition.ACK, DeliveryOutcome.CANCELLED)
    if isinstance(outcome, Succeeded):
        return Verdict(Disposition.ACK, DeliveryOutcome.SUCCEEDED)
    if isinstance(outcome, RetryLater):
        return Verdict(Disposition.ACK, DeliveryOutcome.RETRIED)
    return Verdict(Disposition.DEAD_LETTER, DeliveryOutcome.QUARANTINED)
