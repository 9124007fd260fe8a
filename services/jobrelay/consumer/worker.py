"""One delivery, start to end (docs/life-of-a-job.md, step 3): decode, claim, run under a
heartbeat, decide, store once, and only then ack or nack — in one place, after processing.
The heartbeat also carries a client's cancel of the running job to the handler. A job that runs
past ``long_job_ack_seconds`` has its message acked early, its lease alone holding it from then
on (``consumer/early_ack.py``, docs/long-jobs.md).

The database is the judge of who owns a job: every report is fenced by the claim's lease token,
and the broker only hears about an outcome after PostgreSQL committed it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import socket
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar

from pydantic import BaseModel

from jobrelay import telemetry
from jobrelay.consumer.early_ack import EarlyAck
from jobrelay.consumer.handler_call import call_handler, job_context, refusal_failure
from jobrelay.consumer.lease import (
    CANCEL_POLL_SECONDS,
    CancelRequested,
    HeldRun,
    LeaseEnd,
    LeaseKeeper,
    LeaseLost,
)
from jobrelay.consumer.metrics import ConsumerMetrics
from jobrelay.consumer.progress import ProgressReporter
from jobrelay.core.deliveries import DeliveryOutcome
from jobrelay.core.errors import (
    InvalidPayload,
    PermanentError,
    StoreUnavailable,
    UnknownJobType,
)
from jobrelay.core.execution import (
    HOLD_AT_LIMIT_SECONDS,
    Claimed,
    ClaimRules,
    Deferred,
    Delivery,
    ExecutionStore,
    Finish,
    Held,
    LeaseTerms,
    PutBack,
    Refusal,
    Refused,
)
from jobrelay.core.flow import Limit
from jobrelay.core.jobs import (
    Cancelled,
    Job,
    Outcome,
    Quarantine,
    RetryLater,
    Succeeded,
    decide_outcome,
)
from jobrelay.core.masking import Masker
from jobrelay.core.message import Envelope, MalformedMessage
from jobrelay.core.registry import JobType, Registry
from jobrelay.core.retry import RetryPolicy, backoff
from jobrelay.core.settings import Settings
from jobrelay.core.states import JobState

log = logging.getLogger("jobrelay.consumer")
T = TypeVar("T")


class Disposition(StrEnum):
    ACK = "ack"
    DEAD_LETTER = "dead_letter"  # nack(requeue=False): to the quarantine exchange
    REQUEUE = "requeue"  # nack(requeue=True): the message must survive


@dataclass(frozen=True)
class Verdict:
    disposition: Disposition
    outcome: DeliveryOutcome  # the metrics label, the execution span's outcome
    pause: bool = False  # back off before requeueing (the database is unreachable)


# Tries at the quarantine copy of a long job's message acked early (a reconnect in between).
LATE_DEAD_LETTER_TRIES = 4

INTERRUPTED = Verdict(Disposition.REQUEUE, DeliveryOutcome.INTERRUPTED)
STORE_UNAVAILABLE = Verdict(Disposition.REQUEUE, DeliveryOutcome.STORE_UNAVAILABLE, pause=True)


class Backoff:
    """Growing, jittered pauses while the database is unreachable: back off, never spin.

    Counted per call being retried, not shared by the workers: a shared count would grow with
    the number of workers and keep all of them asleep long after the database is back.
    """

    def __init__(self, base: float = 0.1, cap: float = 2.0, rng: random.Random | None = None):
        self.base = base
        self.cap = cap
        self.rng = rng or random.Random()

    def before_requeue(self) -> float:
        """The pause before a delivery is handed back because the database stayed away."""
        return backoff(1, self.cap, self.cap, self.rng)

    def pause(self, failures: int) -> float:
        return backoff(failures, self.base, self.cap, self.rng)

    def before_republish(self, failures: int) -> float:
        """The pause before another try at a publish to the broker: ten times the database's,
        for a robust connection's reconnect takes seconds."""
        return backoff(failures, 10 * self.base, 10 * self.cap, self.rng)


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


class Worker:
    def __init__(
        self,
        store: ExecutionStore,
        registry: Registry,
        settings: Settings,
        metrics: ConsumerMetrics | None = None,
        *,
        heartbeat_interval: float | None = None,
        cancel_poll_interval: float | None = None,
        store_patience: float | None = None,
        rng: random.Random | None = None,
        name: str | None = None,
        backoff: Backoff | None = None,
        runtime_limits: Callable[[], Mapping[str, Limit]] | None = None,
    ) -> None:
        """``runtime_limits``: the runtime limits (``type_limits``) by type as the consumer
        last read them (``consumer/limits.py``); they only choose how a job is claimed: the
        claim itself reads the limit in force."""
        self.store = store
        self.registry = registry
        self.lease_seconds = settings.lease_seconds
        self.long_job_ack_seconds = settings.long_job_ack_seconds
        self.results_dir = settings.results_dir
        self.policy = RetryPolicy(settings.retry_base_seconds, settings.retry_max_seconds)
        self.unknown_type_patience = settings.unknown_type_patience_seconds
        # Masks the service's own passwords (and any token) out of stored failures.
        self.mask = Masker.from_settings(settings)
        self.metrics = metrics or ConsumerMetrics()
        self.lease = LeaseKeeper(
            store,
            self.metrics,
            lease_seconds=settings.lease_seconds,
            heartbeat_interval=heartbeat_interval or settings.lease_seconds / 3,
            # Between renewals the heartbeat polls for a cancel request this often.
            cancel_poll_interval=cancel_poll_interval or CANCEL_POLL_SECONDS,
        )
        # How long a claim or a final write keeps retrying through a database outage before
        # the delivery is requeued instead.
        self.store_patience = store_patience or max(10.0, 2 * settings.lease_seconds)
        self.rng = rng
        self._random = rng or random.Random()
        self.backoff = backoff or Backoff(rng=rng)
        self.runtime_limits = runtime_limits or _no_runtime_limits
        self._unknown_types = _FirstTimeWarned()
        self.progress = ProgressReporter(store)
        self.name = name or f"{socket.gethostname()}:{os.getpid()}"

    # --- the one place a delivery is settled ------------------------------------------------

    async def handle(
        self,
        delivery: Delivery,
        *,
        traceparent: str | None = None,
        on_acked_early: Callable[[], None] | None = None,
    ) -> Verdict:
        """Process one delivery and settle it with the broker. Never raises but on cancel.
        ``traceparent``: the message's trace context (its header), which the execution
        continues (``jobrelay/telemetry.py``); ``on_acked_early``: called when a long job's
        message is acked before its outcome."""
        self.metrics.in_flight.inc()
        verdict = INTERRUPTED
        execution = telemetry.executing(traceparent)
        early = EarlyAck(delivery, self.long_job_ack_seconds, self.metrics, on_sent=on_acked_early)
        try:
            verdict = await self.process(
                delivery.body, redelivered=bool(delivery.redelivered), early=early
            )
            if verdict.pause:
                await asyncio.sleep(self.backoff.before_requeue())
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("delivery failed unexpectedly; requeued", extra={"event": "bug"})
            verdict = Verdict(Disposition.REQUEUE, DeliveryOutcome.ERROR)
            await asyncio.sleep(1.0)
        finally:
            await early.disarm()
            if early.sent:
                await self._settle_acked_early(delivery, verdict, early.extra)
            else:
                await self._settle(delivery, verdict)
            execution.end(verdict.outcome)
            self.metrics.in_flight.dec()
        return verdict

    async def _settle(self, delivery: Delivery, verdict: Verdict) -> None:
        self.metrics.deliveries.labels(verdict.outcome).inc()
        try:
            async with asyncio.timeout(10):
                if verdict.disposition is Disposition.ACK:
                    await delivery.ack()
                else:
                    await delivery.nack(requeue=verdict.disposition is Disposition.REQUEUE)
        except Exception as error:
            # Typically ChannelInvalidStateError after a reconnect: the broker already put the
            # message back, and its redelivery will be recorded as a duplicate.
            self.metrics.settle_errors.inc()
            log.warning(
                "could not %s a delivery (%s); the broker will deliver it again",
                verdict.disposition,
                type(error).__name__,
                extra={"event": "settle_failed", "outcome": verdict.outcome},
            )

    async def _settle_acked_early(
        self, delivery: Delivery, verdict: Verdict, extra: dict[str, object]
    ) -> None:
        """Settle a long job's delivery that was acked early (docs/long-jobs.md): an ack is
        done; a quarantine still needs its message in the quarantine queue; a requeue has no
        message to put back, and needs none: the job comes back through its lease, which
        expires unrenewed and is rescued by the dispatcher with a new outbox row."""
        self.metrics.deliveries.labels(verdict.outcome).inc()
        if verdict.disposition is Disposition.ACK:
            return
        if verdict.disposition is Disposition.REQUEUE:
            log.info(
                "not finished; its message was acked early: the job comes back once its "
                "lease expires",
                extra={**extra, "event": "long_job_given_back", "outcome": verdict.outcome},
            )
            return
        try:
            await self._patiently_publish(delivery.dead_letter_after_ack)
        except Exception as error:
            # The quarantine is committed; the quarantine sweep restores a missing message.
            self.metrics.settle_errors.inc()
            log.warning(
                "quarantined, but its message could not be put in the quarantine queue (%s)",
                type(error).__name__,
                extra={**extra, "event": "settle_failed", "outcome": verdict.outcome},
            )

    async def _patiently_publish(self, publish: Callable[[], Awaitable[None]]) -> None:
        """A few tries at a publish, each with a timeout: a reconnect of the broker in
        between takes seconds."""
        for failures in range(1, LATE_DEAD_LETTER_TRIES + 1):
            try:
                async with asyncio.timeout(10):
                    return await publish()
            except Exception:
                if failures == LATE_DEAD_LETTER_TRIES:
                    raise
                await asyncio.sleep(self.backoff.before_republish(failures))

    # --- processing -------------------------------------------------------------------------

    async def process(
        self, body: bytes, *, redelivered: bool = False, early: EarlyAck | None = None
    ) -> Verdict:
        """Decide what becomes of one message; ``early``: its ack ahead of the outcome, armed
        once a claim committed (``handle``'s)."""
        try:
            envelope = Envelope.decode(body)
        except MalformedMessage as error:
            log.warning(
                "malformed message dead-lettered to the quarantine",
                extra={"event": "malformed_message", "reason": str(error)},
            )
            return Verdict(Disposition.DEAD_LETTER, DeliveryOutcome.MALFORMED)
        if envelope.type not in self.registry:
            return await self._defer(envelope, redelivered=redelivered, early=early)
        return await self._claim_and_run(envelope, redelivered=redelivered, early=early)

    async def _claim_and_run(
        self,
        envelope: Envelope,
        *,
        redelivered: bool,
        job_type: str | None = None,
        early: EarlyAck | None = None,
    ) -> Verdict:
        """Claim the job if it is of a type this consumer runs (``job_type``, else the
        message's), then run it."""
        job_type = job_type or envelope.type
        lease = LeaseTerms.fresh(self.lease_seconds)
        rules = self._claim_rules(job_type)
        asked = time.monotonic()
        try:
            claim = await self._patiently(
                lambda: self.store.claim(
                    envelope.job_id,
                    lease,
                    detail=f"consumer {self.name}",
                    job_type=job_type,
                    rules=rules,
                )
            )
        except StoreUnavailable:
            return STORE_UNAVAILABLE
        if isinstance(claim, Held):
            return self._held(claim)
        if isinstance(claim, Refused):
            if claim.reason is Refusal.OTHER_TYPE and claim.job is not None:
                return await self._by_own_type(
                    envelope, claim.job, redelivered=redelivered, early=early
                )
            return self._refused(envelope, claim, redelivered=redelivered)
        return await self._attempt(claim, lease_deadline=asked + self.lease_seconds, early=early)

    def _claim_rules(self, job_type: str) -> ClaimRules:
        """How to claim a job of ``job_type``: in a transaction of its own when a limit is in
        force for it (a runtime row, else the registry's), in a group otherwise."""
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

    def _held(self, held: Held) -> Verdict:
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

    async def _by_own_type(
        self, envelope: Envelope, job: Job, *, redelivered: bool, early: EarlyAck | None = None
    ) -> Verdict:
        """The message named another type than the job's: the job's own type decides. Known
        here: claimed and run as that type; unknown: deferred (never claimed, never an
        attempt), as any job of an unknown type."""
        if job.type in self.registry:
            return await self._claim_and_run(
                envelope, redelivered=redelivered, job_type=job.type, early=early
            )
        return await self._defer(envelope, redelivered=redelivered, job_type=job.type, early=early)

    async def _defer(
        self,
        envelope: Envelope,
        *,
        redelivered: bool,
        job_type: str | None = None,
        early: EarlyAck | None = None,
    ) -> Verdict:
        """A type this consumer does not know (a rolling deploy, other handlers): never run,
        never an attempt; the job comes back later for a consumer that knows it. ``job_type``:
        the job's own type, when the message named another."""
        job_type = job_type or envelope.type
        extra = {"job_id": str(envelope.job_id), "type": job_type[:100]}
        try:
            deferral = await self._patiently(
                lambda: self.store.defer_unknown_type(
                    envelope.job_id,
                    PutBack(
                        job_type=job_type,
                        delay_seconds=self.policy.unknown_type_delay(self.rng),
                        patience_seconds=self.unknown_type_patience,
                        detail=f"not known to consumer {self.name}",
                    ),
                )
            )
        except StoreUnavailable:
            return STORE_UNAVAILABLE
        if isinstance(deferral, Deferred):
            if deferral.quarantined:
                log.warning(
                    "job type unknown since %s: quarantined",
                    deferral.unknown_since.isoformat(),
                    extra={**extra, "event": "quarantined", "reason": "unknown_job_type"},
                )
                return Verdict(Disposition.DEAD_LETTER, DeliveryOutcome.QUARANTINED)
            log.log(
                self._unknown_types.level(job_type),
                "job type unknown here: deferred to %s",
                deferral.available_at.isoformat(),
                extra={**extra, "event": "deferred", "reason": "unknown_job_type"},
            )
            return Verdict(Disposition.ACK, DeliveryOutcome.DEFERRED)
        if (
            deferral.reason is Refusal.OTHER_TYPE
            and deferral.job is not None
            and deferral.job.type != job_type
        ):
            return await self._by_own_type(
                envelope, deferral.job, redelivered=redelivered, early=early
            )
        return self._refused(envelope, deferral, redelivered=redelivered)

    def _refused(self, envelope: Envelope, refused: Refused, *, redelivered: bool) -> Verdict:
        extra = {"job_id": str(envelope.job_id), "event": refused.reason.value}
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

    async def _attempt(
        self, claim: Claimed, *, lease_deadline: float, early: EarlyAck | None = None
    ) -> Verdict:
        job = claim.job
        extra = {"job_id": str(job.id), "attempt": job.attempts, "type": job.type}
        telemetry.execution_claimed(job)  # from here on the handler's trace is the job's
        log.info("claimed", extra={**extra, "event": "claimed"})
        if early is not None:
            early.arm(dict(extra))  # the claim committed: the lease may hold the job alone
        if job.cancel_requested_at is not None:
            # Asked of an earlier attempt that ended before it could carry it out (its consumer
            # crashed or stopped): the handler does not run again.
            log.info(
                "cancel requested earlier: not run",
                extra={**extra, "event": LeaseEnd.CANCEL_REQUESTED},
            )
            return await self._conclude(claim, Cancelled(), job.type, 0.0)
        try:
            job_type, payload = self._resolve(job.type, job.payload)
        except (UnknownJobType, InvalidPayload, PermanentError) as error:
            failure = refusal_failure(error, self.mask)
            quarantine = Quarantine(error.code, failure.message, failure)
            return await self._conclude(claim, quarantine, job.type, 0.0)
        try:
            run = await self._run_under_lease(claim, job_type, payload, lease_deadline, early)
        except StoreUnavailable:  # its parents' results could not be read
            log.warning(
                "parents' results not read: database unreachable; requeued",
                extra={**extra, "event": "store_unavailable"},
            )
            return STORE_UNAVAILABLE
        if isinstance(run, LeaseLost):
            self.metrics.lease_losses.inc()
            self.metrics.job_duration.labels(job.type, DeliveryOutcome.LEASE_LOST).observe(
                run.seconds
            )
            log.warning(
                "lease lost (%s): handler abandoned, no outcome reported",
                run.reason,
                extra={**extra, "event": "lease_lost"},
            )
            return Verdict(
                Disposition.REQUEUE,
                DeliveryOutcome.LEASE_LOST,
                pause=run.reason is LeaseEnd.UNREACHABLE,
            )
        if isinstance(run, CancelRequested):
            log.info(
                "cancel requested: handler stopped",
                extra={**extra, "event": LeaseEnd.CANCEL_REQUESTED},
            )
            return await self._conclude(claim, Cancelled(), job.type, run.seconds)
        outcome = decide_outcome(
            # Within its run: a replayed job's backoff starts again from the first attempt's.
            attempt=job.run_attempt,
            max_attempts=job.run_max_attempts,
            result=run.result,
            error=run.error,
            policy=self.policy,
            rng=self.rng,
            mask=self.mask,
        )
        return await self._conclude(claim, outcome, job.type, run.seconds, run.error)

    def _resolve(self, name: str, raw_payload: Any) -> tuple[JobType, BaseModel]:
        job_type = self.registry.get(name)
        if job_type.handler is None:
            raise PermanentError(f"no handler for job type {name[:100]!r}", code="no_handler")
        return job_type, self.registry.validate_payload(name, raw_payload)

    async def _conclude(
        self,
        claim: Claimed,
        outcome: Outcome,
        job_type: str,
        seconds: float,
        error: BaseException | None = None,
    ) -> Verdict:
        """The one store call for a decided outcome, shielded from cancellation."""
        job = claim.job
        extra = {"job_id": str(job.id), "attempt": job.attempts, "type": job_type}
        try:
            finish = await _shielded(
                self._patiently(
                    lambda: self.store.finish(
                        job.id, lease_token=claim.lease_token, attempt=job.attempts, outcome=outcome
                    )
                )
            )
        except StoreUnavailable:
            log.warning(
                "outcome not stored: database unreachable; requeued",
                extra={**extra, "event": "store_unavailable"},
            )
            return STORE_UNAVAILABLE
        verdict = _verdict_for(outcome, finish)
        self.metrics.job_duration.labels(job_type, verdict.outcome).observe(seconds)
        if finish is Finish.STALE:
            log.warning(
                "outcome rejected: the lease is no longer ours",
                extra={**extra, "event": "stale_completion_rejected"},
            )
        elif isinstance(outcome, Succeeded | Cancelled):
            log.info("attempt finished", extra={**extra, "event": verdict.outcome})
        else:
            summary = outcome.failure.summary() if outcome.failure else outcome.error
            context = _outcome_context(outcome, finish)
            telemetry.execution_failed(context.get("reason", verdict.outcome), summary)
            # The traceback goes with the line (the formatter masks it and cuts it to size).
            log.warning(
                "attempt failed: %s",
                summary,
                exc_info=error,
                extra={**extra, "event": verdict.outcome, **context},
            )
        return verdict

    # --- the handler under a heartbeat (consumer/lease.py, consumer/handler_call.py) -------

    async def _run_under_lease(
        self,
        claim: Claimed,
        job_type: JobType,
        payload: BaseModel,
        lease_deadline: float,
        early: EarlyAck | None = None,
    ) -> HeldRun:
        job = claim.job
        # A workflow's job reads its parents' results (docs/workflows.md); others skip the read.
        parents = (
            await self._patiently(lambda: self.store.parent_results(job.id))
            if job.workflow_id is not None
            else None
        )
        context = job_context(
            job,
            self.results_dir,
            parent_results=parents,
            progress_sink=self.progress.sink_for(claim),
        )
        handler = asyncio.create_task(call_handler(job_type, context, payload))
        try:
            held = await self.lease.watch(
                handler, lambda: self._heartbeat(claim, lease_deadline), lease_deadline
            )
            await self.progress.flush_job(job.id)  # its last report, while the lease is ours
            return held
        except asyncio.CancelledError:
            # Shutdown past its grace period: the handler is stopped; the job is given back,
            # for its requeued message to claim at once. A message acked early is not
            # requeued: its lease is left to expire, and the dispatcher rescues the job.
            if early is not None:
                await _shielded(early.disarm())  # no early ack after the release
            if early is None or not early.sent:
                await _shielded(self.lease.release(claim))
            raise

    async def _heartbeat(self, claim: Claimed, deadline: float) -> LeaseEnd:
        return await self.lease.heartbeat(claim, deadline)

    # --- database outages -------------------------------------------------------------------

    async def _patiently(self, call: Callable[[], Awaitable[T]]) -> T:
        """Retry a call through a database outage with growing pauses, up to the patience."""
        deadline = time.monotonic() + self.store_patience
        failures = 0
        while True:
            try:
                return await call()
            except StoreUnavailable:
                self.metrics.store_errors.inc()
                failures += 1
                pause = self.backoff.pause(failures)
                if time.monotonic() + pause > deadline:
                    raise
                log.warning(
                    "database unreachable; retrying in %.2fs",
                    pause,
                    extra={"event": "store_unavailable"},
                )
                await asyncio.sleep(pause)


def _no_runtime_limits() -> Mapping[str, Limit]:
    return {}


def _verdict_for(outcome: Outcome, finish: Finish) -> Verdict:
    if finish is Finish.STALE:
        return Verdict(Disposition.ACK, DeliveryOutcome.STALE)
    if isinstance(outcome, Cancelled) or finish is Finish.CANCELLED:
        return Verdict(Disposition.ACK, DeliveryOutcome.CANCELLED)
    if isinstance(outcome, Succeeded):
        return Verdict(Disposition.ACK, DeliveryOutcome.SUCCEEDED)
    if isinstance(outcome, RetryLater):
        return Verdict(Disposition.ACK, DeliveryOutcome.RETRIED)
    return Verdict(Disposition.DEAD_LETTER, DeliveryOutcome.QUARANTINED)


def _outcome_context(outcome: Outcome, finish: Finish) -> dict[str, str]:
    if isinstance(outcome, RetryLater) and finish is Finish.CANCELLED:  # not retried after all
        return {"reason": outcome.error_code}
    if isinstance(outcome, RetryLater):
        # The due time is the database's (now() + the delay): the log says the delay.
        return {"reason": outcome.error_code, "retry_in": f"{outcome.delay_seconds:.3f}s"}
    if isinstance(outcome, Quarantine):
        return {"reason": outcome.reason_code}
    return {}


async def _shielded(coroutine: Awaitable[T]) -> T:
    """Run to the end even if the caller is cancelled (the caller still sees the cancel)."""
    task = asyncio.ensure_future(coroutine)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        await asyncio.wait({task})
        raise
