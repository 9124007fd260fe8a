"""Taking a delivery's job (docs/life-of-a-job.md, step 3): claimed under a fresh lease token
if this consumer runs its type, deferred unclaimed if it does not know it
(``consumer/unknown_types.py``). The job's own type decides, not the one its message names.
Any answer but a claim is the delivery's verdict already: held, deferred, a duplicate..."""

from __future__ import annotations

import logging
import random
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping

from jobrelay.consumer.patience import Patience
from jobrelay.consumer.unknown_types import UnknownTypes
from jobrelay.consumer.verdict import STORE_UNAVAILABLE, Disposition, Verdict
from jobrelay.core.deliveries import DeliveryOutcome
from jobrelay.core.errors import StoreUnavailable
from jobrelay.core.execution import (
    HOLD_AT_LIMIT_SECONDS,
    Claimed,
    ClaimResult,
    ClaimRules,
    Deferred,
    DeferResult,
    ExecutionStore,
    Held,
    LeaseTerms,
    Refusal,
    Refused,
)
from jobrelay.core.flow import Limit
from jobrelay.core.message import Envelope
from jobrelay.core.registry import Registry
from jobrelay.core.states import JobState

log = logging.getLogger("jobrelay.consumer")


class Claims:
    """``runtime_limits``: the runtime limits (``type_limits``) by type as the consumer last
    read them (``consumer/limits.py``); they only choose how a job is claimed: the claim itself
    reads the limit in force."""

    def __init__(
        self,
        store: ExecutionStore,
        registry: Registry,
        patiently: Patience,
        unknown_types: UnknownTypes,
        *,
        lease_seconds: float,
        consumer_name: str,
        runtime_limits: Callable[[], Mapping[str, Limit]] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.store = store
        self.registry = registry
        self.patiently = patiently
        self.unknown_types = unknown_types
        self.lease_seconds = lease_seconds
        self.detail = f"consumer {consumer_name}"  # journaled with the claim
        self.runtime_limits = runtime_limits or _no_runtime_limits
        self._random = rng or random.Random()

    async def take(
        self, envelope: Envelope, *, redelivered: bool
    ) -> tuple[Claimed, float] | Verdict:
        """The job claimed, with the ``time.monotonic()`` its lease runs out by (counted from
        before the claim was asked); or, nothing claimed, the delivery's verdict."""
        job_id, job_type = envelope.job_id, envelope.type
        try:
            asked = time.monotonic()
            answer = await self._ask(job_id, job_type)
            if (
                isinstance(answer, Refused)
                and answer.reason is Refusal.OTHER_TYPE
                and answer.job is not None
            ):
                # The message named another type than the job's (nothing was done): ask again
                # as the job's own type, which this consumer runs or defers. Once is enough: a
                # job's type never changes.
                job_type, asked = answer.job.type, time.monotonic()
                answer = await self._ask(job_id, job_type)
        except StoreUnavailable:
            return STORE_UNAVAILABLE
        if isinstance(answer, Claimed):
            return answer, asked + self.lease_seconds
        if isinstance(answer, Held):
            return held(answer)
        if isinstance(answer, Deferred):
            return self.unknown_types.verdict(answer, job_id, job_type)
        return refused(job_id, answer, redelivered=redelivered)

    def _ask(self, job_id: uuid.UUID, job_type: str) -> Awaitable[ClaimResult | DeferResult]:
        """The store asked to claim the job as ``job_type`` if this consumer runs that type,
        else to defer it: the call, for the caller to await."""
        if job_type not in self.registry:
            return self.unknown_types.defer(job_id, job_type)
        lease, rules = LeaseTerms.fresh(self.lease_seconds), self.rules_for(job_type)
        return self.patiently(
            lambda: self.store.claim(
                job_id, lease, detail=self.detail, job_type=job_type, rules=rules
            )
        )

    def rules_for(self, job_type: str) -> ClaimRules:
        """How to claim a job of ``job_type``: in the group of the limited claims (one
        transaction, exact checks) when a limit is in force for it (a runtime row, else the
        registry's), in the group statement otherwise."""
        runtime = self.runtime_limits()
        code = self.registry.types[job_type].limit if job_type in self.registry else None
        in_force = runtime.get(job_type, code)
        limited = in_force is not None and (
            in_force.concurrency is not None or in_force.rate is not None
        )
        return ClaimRules(
            limited=limited or job_type in runtime,  # a runtime row: never in a group
            code_limit=code,
            hold_seconds=self._random.uniform(*HOLD_AT_LIMIT_SECONDS),
        )


def held(held: Held) -> Verdict:
    """Put back without a claim (its queue paused, its type or key at a limit): the job
    waits in the outbox for its new due time, so its message is acked."""
    job = held.job
    log.info(
        "held (%s): due again at %s",
        held.detail,
        held.available_at.isoformat(),
        extra={
            "job_id": str(job.id),
            "type": job.type,
            "event": "held",
            "reason": held.reason.value,
        },
    )
    return Verdict(Disposition.ACK, DeliveryOutcome.HELD)


def refused(job_id: uuid.UUID, refused: Refused, *, redelivered: bool) -> Verdict:
    """Why the job could not be claimed (or deferred), as the delivery's verdict."""
    extra = {"job_id": str(job_id), "event": refused.reason.value}
    if refused.reason is Refusal.UNKNOWN_JOB:
        # A message is published only after its job's row committed, and every service
        # reaches the primary only: the row is gone (a failover to a standby that had not
        # received it, docs/failover.md). Nothing can run it, and the message names no
        # more than the id logged here: acked, never retried nor kept.
        log.warning("message for a job not in the database acked", extra=extra)
        return Verdict(Disposition.ACK, DeliveryOutcome.UNKNOWN_JOB)
    if refused.reason is Refusal.EXHAUSTED:
        log.warning("job has no attempts left: quarantined", extra=extra)
        return Verdict(Disposition.DEAD_LETTER, DeliveryOutcome.ATTEMPTS_EXHAUSTED)
    if redelivered and refused.job is not None and refused.job.state == JobState.QUARANTINED:
        # The broker gave this message back: its earlier settle was lost (the channel closed
        # between the quarantine's COMMIT and its nack, or the process died there). Acking
        # it would leave the quarantined job with no message in the quarantine queue.
        log.warning(
            "redelivered message of a quarantined job dead-lettered",
            extra={**extra, "event": "quarantine_redelivered"},
        )
        return Verdict(Disposition.DEAD_LETTER, DeliveryOutcome.QUARANTINED)
    log.info("duplicate delivery acked", extra={**extra, "event": "duplicate_delivery"})
    return Verdict(Disposition.ACK, DeliveryOutcome.DUPLICATE)


def _no_runtime_limits() -> Mapping[str, Limit]:
    return {}
