"""One delivery, start to end (docs/life-of-a-job.md, step 3): decode, claim, run under a
heartbeat, decide, store once, and only then ack or nack — in one place, after processing.
The heartbeat also carries a client's cancel of the running job to the handler.

The database is the judge of who owns a job: every report is fenced by the claim's lease token,
and the broker only hears about an outcome after PostgreSQL committed it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import logging
import os
import random
import socket
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar, cast

from pydantic import BaseModel

from jobrelay import tracing
from jobrelay.consumer.metrics import ConsumerMetrics
from jobrelay.core.errors import (
    InvalidPayload,
    PermanentError,
    StoreUnavailable,
    TransientError,
    UnknownJobType,
)
from jobrelay.core.execution import (
    Claimed,
    Deferred,
    Delivery,
    ExecutionStore,
    Finish,
    LeaseTerms,
    PutBack,
    Refusal,
    Refused,
    Renewal,
)
from jobrelay.core.failures import MESSAGE_MAX_BYTES, Failure, class_name, cut_head, storable
from jobrelay.core.jobs import (
    Cancelled,
    Outcome,
    Quarantine,
    RetryLater,
    Succeeded,
    decide_outcome,
)
from jobrelay.core.jsonvalues import unstorable_json
from jobrelay.core.masking import Masker
from jobrelay.core.message import Envelope, MalformedMessage
from jobrelay.core.registry import AsyncHandler, JobContext, JobType, Registry, SyncHandler
from jobrelay.core.retry import RetryPolicy, backoff
from jobrelay.core.settings import Settings
from jobrelay.core.states import JobState
from jobrelay.eventloop import cancel_and_wait

log = logging.getLogger("jobrelay.consumer")
T = TypeVar("T")


class Disposition(StrEnum):
    ACK = "ack"
    DEAD_LETTER = "dead_letter"  # nack(requeue=False): to the quarantine exchange
    REQUEUE = "requeue"  # nack(requeue=True): the message must survive


@dataclass(frozen=True)
class Verdict:
    disposition: Disposition
    outcome: str  # the metrics label: succeeded, retried, quarantined, duplicate, ...
    pause: bool = False  # back off before requeueing (the database is unreachable)


INTERRUPTED = Verdict(Disposition.REQUEUE, "interrupted")
STORE_UNAVAILABLE = Verdict(Disposition.REQUEUE, "store_unavailable", pause=True)


@dataclass(frozen=True)
class HandlerRun:
    result: dict[str, Any] | None
    error: BaseException | None
    seconds: float


@dataclass(frozen=True)
class LeaseLost:
    reason: str  # "taken" (the database says it is not ours) or "unreachable"
    seconds: float


@dataclass(frozen=True)
class CancelRequested:
    """The job's client asked to cancel it: the handler was stopped after ``seconds``."""

    seconds: float


# How often a running job's heartbeat asks whether its cancel was requested, between renewals.
CANCEL_POLL_SECONDS = 1.0
# What the heartbeat returns when it ends an attempt for a cancel (else: why the lease is lost).
CANCEL = "cancel_requested"


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
    ) -> None:
        self.store = store
        self.registry = registry
        self.lease_seconds = settings.lease_seconds
        self.results_dir = settings.results_dir
        self.policy = RetryPolicy(settings.retry_base_seconds, settings.retry_max_seconds)
        self.unknown_type_patience = settings.unknown_type_patience_seconds
        # Masks the service's own passwords (and any token) out of stored failures.
        self.mask = Masker.from_settings(settings)
        self.metrics = metrics or ConsumerMetrics()
        self.heartbeat_interval = heartbeat_interval or settings.lease_seconds / 3
        # Between renewals the heartbeat polls for a cancel request this often (``_heartbeat``).
        self.cancel_poll_interval = cancel_poll_interval or CANCEL_POLL_SECONDS
        # How long a claim or a final write keeps retrying through a database outage before
        # the delivery is requeued instead.
        self.store_patience = store_patience or max(10.0, 2 * settings.lease_seconds)
        self.rng = rng
        self.backoff = backoff or Backoff(rng=rng)
        self._unknown_types = _FirstTimeWarned()
        self.name = name or f"{socket.gethostname()}:{os.getpid()}"

    # --- the one place a delivery is settled ------------------------------------------------

    async def handle(self, delivery: Delivery, *, traceparent: str | None = None) -> Verdict:
        """Process one delivery and settle it with the broker. Never raises but on cancel.
        ``traceparent``: the message's trace context (its header), which the execution
        continues (``jobrelay/tracing.py``)."""
        self.metrics.in_flight.inc()
        verdict = INTERRUPTED
        execution = tracing.executing(traceparent)
        try:
            verdict = await self.process(delivery.body, redelivered=bool(delivery.redelivered))
            if verdict.pause:
                await asyncio.sleep(self.backoff.before_requeue())
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("delivery failed unexpectedly; requeued", extra={"event": "bug"})
            verdict = Verdict(Disposition.REQUEUE, "error")
            await asyncio.sleep(1.0)
        finally:
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

    # --- processing -------------------------------------------------------------------------

    async def process(self, body: bytes, *, redelivered: bool = False) -> Verdict:
        try:
            envelope = Envelope.decode(body)
        except MalformedMessage as error:
            log.warning(
                "malformed message dead-lettered to the quarantine",
                extra={"event": "malformed_message", "reason": str(error)},
            )
            return Verdict(Disposition.DEAD_LETTER, "malformed")
        if envelope.type not in self.registry:
            return await self._defer(envelope, redelivered=redelivered)
        return await self._claim_and_run(envelope, redelivered=redelivered)

    async def _claim_and_run(self, envelope: Envelope, *, redelivered: bool) -> Verdict:
        lease = LeaseTerms.fresh(self.lease_seconds)
        asked = time.monotonic()
        try:
            claim = await self._patiently(
                lambda: self.store.claim(envelope.job_id, lease, detail=f"consumer {self.name}")
            )
        except StoreUnavailable:
            return STORE_UNAVAILABLE
        if isinstance(claim, Refused):
            return self._refused(envelope, claim, redelivered=redelivered)
        return await self._attempt(claim, lease_deadline=asked + self.lease_seconds)

    async def _defer(
        self, envelope: Envelope, *, redelivered: bool, job_type: str | None = None
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
                return Verdict(Disposition.DEAD_LETTER, "quarantined")
            log.log(
                self._unknown_types.level(job_type),
                "job type unknown here: deferred to %s",
                deferral.available_at.isoformat(),
                extra={**extra, "event": "deferred", "reason": "unknown_job_type"},
            )
            return Verdict(Disposition.ACK, "deferred")
        if deferral.reason is Refusal.OTHER_TYPE and deferral.job is not None:
            # The message names another type than the job's: the job's own type decides, and
            # one this consumer does not know either is deferred, not claimed.
            own_type = deferral.job.type
            if own_type in self.registry:
                return await self._claim_and_run(envelope, redelivered=redelivered)
            if own_type != job_type:
                return await self._defer(envelope, redelivered=redelivered, job_type=own_type)
        return self._refused(envelope, deferral, redelivered=redelivered)

    def _refused(self, envelope: Envelope, refused: Refused, *, redelivered: bool) -> Verdict:
        extra = {"job_id": str(envelope.job_id), "event": refused.reason.value}
        if refused.reason is Refusal.UNKNOWN_JOB:
            log.warning("message for an unknown job dead-lettered", extra=extra)
            return Verdict(Disposition.DEAD_LETTER, "unknown_job")
        if refused.reason is Refusal.EXHAUSTED:
            log.warning("job has no attempts left: quarantined", extra=extra)
            return Verdict(Disposition.DEAD_LETTER, "attempts_exhausted")
        if redelivered and refused.job is not None and refused.job.state == JobState.QUARANTINED:
            # The broker gave this message back: its earlier settle was lost (the channel closed
            # between the quarantine's COMMIT and its nack, or the process died there). Acking
            # it would leave the quarantined job with no message in the quarantine queue.
            log.warning(
                "redelivered message of a quarantined job dead-lettered",
                extra={**extra, "event": "quarantine_redelivered"},
            )
            return Verdict(Disposition.DEAD_LETTER, "quarantined")
        log.info("duplicate delivery acked", extra={**extra, "event": "duplicate_delivery"})
        return Verdict(Disposition.ACK, "duplicate")

    async def _attempt(self, claim: Claimed, *, lease_deadline: float) -> Verdict:
        job = claim.job
        extra = {"job_id": str(job.id), "attempt": job.attempts, "type": job.type}
        tracing.execution_claimed(job)  # from here on the handler's trace is the job's
        log.info("claimed", extra={**extra, "event": "claimed"})
        if job.cancel_requested_at is not None:
            # Asked of an earlier attempt that ended before it could carry it out (its consumer
            # crashed or stopped): the handler does not run again.
            log.info("cancel requested earlier: not run", extra={**extra, "event": CANCEL})
            return await self._conclude(claim, Cancelled(), job.type, 0.0)
        try:
            job_type, payload = self._resolve(job.type, job.payload)
        except (UnknownJobType, InvalidPayload, PermanentError) as error:
            failure = self._refusal_failure(error)
            quarantine = Quarantine(error.code, failure.message, failure)
            return await self._conclude(claim, quarantine, job.type, 0.0)
        run = await self._run_under_lease(claim, job_type, payload, lease_deadline)
        if isinstance(run, LeaseLost):
            self.metrics.lease_losses.inc()
            self.metrics.job_duration.labels(job.type, "lease_lost").observe(run.seconds)
            log.warning(
                "lease lost (%s): handler abandoned, no outcome reported",
                run.reason,
                extra={**extra, "event": "lease_lost"},
            )
            return Verdict(Disposition.REQUEUE, "lease_lost", pause=run.reason == "unreachable")
        if isinstance(run, CancelRequested):
            log.info("cancel requested: handler stopped", extra={**extra, "event": CANCEL})
            return await self._conclude(claim, Cancelled(), job.type, run.seconds)
        outcome = decide_outcome(
            attempt=job.attempts,
            max_attempts=job.max_attempts,
            result=run.result,
            error=run.error,
            policy=self.policy,
            rng=self.rng,
            mask=self.mask,
        )
        return await self._conclude(claim, outcome, job.type, run.seconds, run.error)

    def _refusal_failure(self, error: UnknownJobType | InvalidPayload | PermanentError) -> Failure:
        """Why a claimed job was not run: no traceback (the handler never ran), and for a
        payload the fields that failed (never their values)."""
        message = str(error)
        errors = getattr(error, "extra", {}).get("errors")
        if errors:
            message = f"{message}: {json.dumps(errors, ensure_ascii=False)}"
        message = cut_head(storable(self.mask(message)), MESSAGE_MAX_BYTES)
        return Failure(class_name(type(error)), message)

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
            tracing.execution_failed(context.get("reason", verdict.outcome), summary)
            # The traceback goes with the line (the formatter masks it and cuts it to size).
            log.warning(
                "attempt failed: %s",
                summary,
                exc_info=error,
                extra={**extra, "event": verdict.outcome, **context},
            )
        return verdict

    # --- the handler under a heartbeat ------------------------------------------------------

    async def _run_under_lease(
        self, claim: Claimed, job_type: JobType, payload: BaseModel, lease_deadline: float
    ) -> HandlerRun | LeaseLost | CancelRequested:
        job = claim.job
        context = JobContext(
            job_id=job.id,
            job_type=job.type,
            attempt=job.attempts,
            max_attempts=job.max_attempts,
            results_dir=self.results_dir,
            logger=logging.LoggerAdapter(
                logging.getLogger("jobrelay.handler"),
                {"job_id": str(job.id), "attempt": job.attempts, "type": job.type},
            ),
        )
        started = time.monotonic()
        handler = asyncio.create_task(self._call_handler(job_type, context, payload))
        heartbeat: asyncio.Task[str] | None = None
        try:
            # Most handlers end before the first renewal or cancel poll is due: their heartbeat
            # never starts.
            await asyncio.wait({handler}, timeout=self._first_beat_in(lease_deadline))
            if not handler.done():
                heartbeat = asyncio.create_task(self._heartbeat(claim, lease_deadline))
                await asyncio.wait({handler, heartbeat}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            # Shutdown past its grace period: stop the handler and give the job back, so the
            # requeued message can claim it at once instead of waiting for the lease to expire.
            await cancel_and_wait([handler, *([heartbeat] if heartbeat else [])])
            await _shielded(self._release(claim))
            raise
        if heartbeat is not None and heartbeat.done():  # the lease is gone, or a cancel asked
            return await self._stop_handler(handler, heartbeat.result(), started)
        if heartbeat is not None:
            await cancel_and_wait([heartbeat])
        return handler.result()

    @staticmethod
    async def _stop_handler(
        handler: asyncio.Task[HandlerRun], why: str, started: float
    ) -> HandlerRun | LeaseLost | CancelRequested:
        """End an attempt the heartbeat ended: an ``async`` handler is cancelled at its next
        await; a plain one's thread runs on to its end and its result is dropped. A handler
        that had ended already reports its own end: a cancel request is moot then."""
        if why == CANCEL and handler.done():
            return handler.result()
        await cancel_and_wait([handler])
        seconds = time.monotonic() - started
        return CancelRequested(seconds) if why == CANCEL else LeaseLost(why, seconds)

    def _first_beat_in(self, deadline: float) -> float:
        first = min(self.heartbeat_interval, self.cancel_poll_interval)
        return max(0.0, min(first, deadline - time.monotonic()))

    async def _call_handler(
        self, job_type: JobType, context: JobContext, payload: BaseModel
    ) -> HandlerRun:
        assert job_type.handler is not None
        started = time.monotonic()
        try:
            async with asyncio.timeout(job_type.timeout_seconds):
                if job_type.runs_in_thread:
                    result = await _in_thread(cast(SyncHandler, job_type.handler), context, payload)
                else:
                    result = await cast(AsyncHandler, job_type.handler)(context, payload)
            _check_result(result)
        except TimeoutError as timed_out:
            error: BaseException = TransientError(
                f"handler timed out after {job_type.timeout_seconds:g}s", code="timeout"
            )
            # Its traceback shows where the handler was waiting when the time ran out.
            error.__cause__ = timed_out
            return HandlerRun(None, error, time.monotonic() - started)
        except Exception as failure:
            return HandlerRun(None, failure, time.monotonic() - started)
        return HandlerRun(result, None, time.monotonic() - started)

    async def _heartbeat(self, claim: Claimed, deadline: float) -> str:
        """Keep the lease and watch for a cancel request; return (ending the attempt) why the
        attempt must end: ``CANCEL``, or the lease cannot be kept (``"taken"``,
        ``"unreachable"``).

        It renews the lease every ``heartbeat_interval`` (lease/3), and the renewal says in the
        same statement whether a cancel was requested. Between renewals it polls for that alone
        every ``cancel_poll_interval`` (1 s), so a cancel takes effect within about a second
        however long the lease. The cost: a renewal writes a row version (and an entry in the
        index on ``lease_until``), so renewals stay at lease/3; a poll only reads by primary
        key, and the polls of one consumer's jobs fall on one shared grid of the loop's clock
        (``_until_next_beat``), where ``ExecutionStore`` makes one statement of them: about one
        read a second per consumer process, not per running job.
        """
        job_id, lease = claim.job.id, LeaseTerms(claim.lease_token, self.lease_seconds)
        interval = self.heartbeat_interval
        renew_at = deadline - self.lease_seconds + interval  # the claim was the last renewal
        while True:
            asked = time.monotonic()
            if asked < renew_at:
                if await self._cancel_requested(job_id, lease):
                    return CANCEL
            else:
                try:
                    async with asyncio.timeout(max(0.1, min(interval, deadline - asked))):
                        renewal = await self.store.renew(job_id, lease)
                except (StoreUnavailable, TimeoutError):
                    self.metrics.store_errors.inc()
                    if time.monotonic() >= deadline:
                        return "unreachable"
                    renew_at = time.monotonic() + min(interval, self.cancel_poll_interval)
                else:
                    if renewal is Renewal.LOST:
                        return "taken"
                    self.metrics.lease_renewals.inc()
                    if renewal is Renewal.CANCEL_REQUESTED:
                        return CANCEL
                    deadline, renew_at = asked + self.lease_seconds, asked + interval
            await asyncio.sleep(self._until_next_beat(renew_at, deadline))

    async def _cancel_requested(self, job_id: uuid.UUID, lease: LeaseTerms) -> bool:
        """The poll between renewals. A failed one answers no: the next renewal decides."""
        try:
            async with asyncio.timeout(self.cancel_poll_interval):
                return await self.store.cancel_requested(job_id, lease)
        except (StoreUnavailable, TimeoutError):
            self.metrics.store_errors.inc()
            return False

    def _until_next_beat(self, renew_at: float, deadline: float) -> float:
        """The pause until the next renewal, or the next poll if that comes first. Polls fall
        on multiples of ``cancel_poll_interval`` of the loop's clock, the same for every
        heartbeat of this process, so that they wake in one turn of the loop."""
        now, poll = time.monotonic(), self.cancel_poll_interval
        loop_now = asyncio.get_running_loop().time()
        next_poll = (loop_now // poll + 1) * poll - loop_now
        return max(0.01, min(renew_at - now, next_poll, deadline - now))

    async def _release(self, claim: Claimed) -> None:
        # Unreachable database: the lease expires on its own and the dispatcher rescues the job.
        with contextlib.suppress(StoreUnavailable):
            await self.store.release(
                claim.job.id, lease_token=claim.lease_token, detail="released: consumer stopping"
            )

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


async def _in_thread(handler: SyncHandler, context: JobContext, payload: BaseModel) -> Any:
    """Run a plain `def` handler in a thread of its own and wait for it.

    A thread cannot be interrupted: a timeout, a lost lease or a shutdown stops the wait, and
    the thread runs on to its end with its result dropped. It is a daemon thread, so that such
    a thread never keeps a stopping consumer from exiting (a pool's threads would be joined at
    exit), and it is not taken from the loop's default executor, which DNS lookups share.
    """
    loop = asyncio.get_running_loop()
    done: asyncio.Future[Any] = loop.create_future()
    call = contextvars.copy_context()

    def settle(result: Any, error: BaseException | None) -> None:
        if done.done():  # the wait was given up
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(result)

    def run() -> None:
        result: Any = None
        error: BaseException | None = None
        try:
            result = call.run(handler, context, payload)
        except StopIteration as stopped:  # a future cannot hold one
            error = RuntimeError("the handler raised StopIteration")
            error.__cause__ = stopped
        except BaseException as failure:
            error = failure
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=run, name=f"jobrelay-handler-{context.job_id}", daemon=True).start()
    return await done


def _check_result(result: Any) -> None:
    if not isinstance(result, dict):
        raise PermanentError("the handler returned no dict", code="invalid_result")
    try:
        # What the store will write: a cycle or a nesting too deep for the encoder fails here
        # (the walk of unstorable_json would not end on a cycle).
        json.dumps(result, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        raise PermanentError("the handler's result is not JSON", code="invalid_result") from None
    problem = unstorable_json(result)  # what jsonb refuses: NUL, NaN, keys that are no strings
    if problem is not None:
        raise PermanentError(
            f"the handler's result cannot be stored as JSON: {problem}", code="invalid_result"
        )


def _verdict_for(outcome: Outcome, finish: Finish) -> Verdict:
    if finish is Finish.STALE:
        return Verdict(Disposition.ACK, "stale")
    if isinstance(outcome, Cancelled) or finish is Finish.CANCELLED:
        return Verdict(Disposition.ACK, "cancelled")
    if isinstance(outcome, Succeeded):
        return Verdict(Disposition.ACK, "succeeded")
    if isinstance(outcome, RetryLater):
        return Verdict(Disposition.ACK, "retried")
    return Verdict(Disposition.DEAD_LETTER, "quarantined")


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
