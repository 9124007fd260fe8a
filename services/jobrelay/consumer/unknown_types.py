"""A job of a type this consumer does not know (a rolling deploy, another team's handlers,
docs/life-of-a-job.md): never claimed, never an attempt. It is deferred, put back for a consumer
that knows its type, and quarantined once its type stayed unknown past the patience."""

from __future__ import annotations

import logging
import random
import uuid

from jobrelay.consumer.patience import Patience
from jobrelay.consumer.verdict import Disposition, Verdict
from jobrelay.core.deliveries import DeliveryOutcome
from jobrelay.core.execution import Deferred, DeferResult, ExecutionStore, PutBack
from jobrelay.core.retry import RetryPolicy

log = logging.getLogger("jobrelay.consumer")


class UnknownTypes:
    """The deferrals of one consumer: ``policy`` draws each one's delay, ``patience_seconds``
    is how long a type may stay unknown (``unknown_type_patience_seconds``)."""

    def __init__(
        self,
        store: ExecutionStore,
        patiently: Patience,
        policy: RetryPolicy,
        *,
        patience_seconds: float,
        consumer_name: str,
        rng: random.Random | None = None,
    ) -> None:
        self.store = store
        self.patiently = patiently
        self.policy = policy
        self.patience_seconds = patience_seconds
        self.detail = f"not known to consumer {consumer_name}"  # journaled with the deferral
        self.rng = rng
        self._warned = _FirstTimeWarned()

    async def defer(self, job_id: uuid.UUID, job_type: str) -> DeferResult:
        """Put the job back unclaimed (``Deferred``), or say why not: the store's refusal, of a
        job that is not due, is gone, or is of another type than ``job_type``."""
        return await self.patiently(
            lambda: self.store.defer_unknown_type(
                job_id,
                PutBack(
                    job_type=job_type,
                    delay_seconds=self.policy.unknown_type_delay(self.rng),
                    patience_seconds=self.patience_seconds,
                    detail=self.detail,
                ),
            )
        )

    def verdict(self, deferral: Deferred, job_id: uuid.UUID, job_type: str) -> Verdict:
        """Deferred: the job waits in the outbox for its new due time, its message is acked;
        quarantined past the patience: its message goes to the quarantine queue."""
        extra = {"job_id": str(job_id), "type": job_type[:100]}
        if deferral.quarantined:
            log.warning(
                "job type unknown since %s: quarantined",
                deferral.unknown_since.isoformat(),
                extra={**extra, "event": "quarantined", "reason": "unknown_job_type"},
            )
            return Verdict(Disposition.DEAD_LETTER, DeliveryOutcome.QUARANTINED)
        log.log(
            self._warned.level(job_type),
            "job type unknown here: deferred to %s",
            deferral.available_at.isoformat(),
            extra={**extra, "event": "deferred", "reason": "unknown_job_type"},
        )
        return Verdict(Disposition.ACK, DeliveryOutcome.DEFERRED)


class _FirstTimeWarned:
    """The log level of a deferral: a warning the first time this process defers a type, debug
    after (a consumer without a type's handler defers every one of its jobs). At most ``limit``
    types are remembered: past that, forged types cannot grow the memory, and log at debug."""

    def __init__(self, limit: int = 1000) -> None:
        self.limit = limit
        self.seen: set[str] = set()

    def level(self, job_type: str) -> int:
        if job_type in self.seen or len(self.seen) >= self.limit:
            return logging.DEBUG
        self.seen.add(job_type)
        return logging.WARNING
