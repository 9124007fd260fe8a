"""One delivery, start to end (docs/life-of-a-job.md, step 3): decode, claim, run under a
heartbeat, decide, store once, and only then ack or nack — in one place, after processing.
``Worker.handle`` reads top to bottom; each special case has a module of its own:

- ``claims.py``: the claim under a fresh lease token, by the job's own type (a message may name
  another); a type this consumer does not know is deferred (``unknown_types.py``), never claimed;
- ``batches.py``: a batch type's jobs, each claimed and leased as any job, share one call of
  its handler (docs/batch-handlers.md);
- ``lease.py``: the heartbeat, which also carries a client's cancel of the running job to the
  handler; ``handler_call.py``: the handler under its timeout, with its durable calls (steps,
  sleeps, signals, children: docs/durable-execution.md), written by the ``durable`` store;
- ``suspended.py``: an attempt that a durable call ended with the job asleep: acked (a call
  that found the lease gone is a lost lease);
- ``early_ack.py``: a job that runs past ``long_job_ack_seconds`` has its message acked early,
  its lease alone holding it from then on (docs/long-jobs.md), and settles later;
- ``patience.py``: every store call retried through a database outage, up to a patience;
- ``verdict.py``: what the broker is told.

The database is the judge of who owns a job: every report is fenced by the claim's lease token,
and the broker only hears about an outcome after PostgreSQL committed it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import socket
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel

from jobrelay import telemetry
from jobrelay.consumer.batches import Batches
from jobrelay.consumer.claims import Claims
from jobrelay.consumer.early_ack import EarlyAck
from jobrelay.consumer.handler_call import (
    HandlerRun,
    call_handler,
    durable_run,
    job_context,
    refusal_failure,
)
from jobrelay.consumer.lease import (
    CANCEL_POLL_SECONDS,
    CancelRequested,
    HeldRun,
    LeaseEnd,
    LeaseKeeper,
    LeaseLost,
)
from jobrelay.consumer.metrics import ConsumerMetrics
from jobrelay.consumer.patience import Backoff, Patience, PatientDurableStore
from jobrelay.consumer.progress import ProgressReporter
from jobrelay.consumer.suspended import slept
from jobrelay.consumer.unknown_types import UnknownTypes
from jobrelay.consumer.verdict import (
    INTERRUPTED,
    STORE_UNAVAILABLE,
    Disposition,
    Verdict,
    verdict_of,
)
from jobrelay.core.batches import BatchJob
from jobrelay.core.deliveries import DeliveryOutcome
from jobrelay.core.durable import CancelPending, DurableStore, Suspended
from jobrelay.core.errors import (
    InvalidPayload,
    PermanentError,
    StoreUnavailable,
    UnknownJobType,
)
from jobrelay.core.execution import Claimed, Delivery, ExecutionStore, Finish
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
from jobrelay.core.retry import RetryPolicy
from jobrelay.core.settings import Settings

log = logging.getLogger("jobrelay.consumer")
T = TypeVar("T")


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
        durable: DurableStore | None = None,
    ) -> None:
        """``store_patience``: how long a claim or a final write keeps retrying through a
        database outage before the delivery is requeued instead; ``runtime_limits``: the
        runtime limits by type as the consumer last read them (``consumer/claims.py``);
        ``durable``: where handlers' steps, sleeps, signals and children are recorded (None: a
        handler's durable call raises a ``RuntimeError``)."""
        self.store = store
        self.registry = registry
        self.long_job_ack_seconds = settings.long_job_ack_seconds  # the consumer may lower it
        self.results_dir = settings.results_dir
        self.policy = RetryPolicy(settings.retry_base_seconds, settings.retry_max_seconds)
        self.rng = rng
        # Masks the service's own passwords (and any token) out of stored failures.
        self.mask = Masker.from_settings(settings)
        self.metrics = metrics or ConsumerMetrics()
        self.name = name or f"{socket.gethostname()}:{os.getpid()}"
        self.backoff = backoff or Backoff(rng=rng)
        self.patiently = Patience(
            store_patience or max(10.0, 2 * settings.lease_seconds), self.backoff, self.metrics
        )
        self.claims = Claims(
            store,
            registry,
            self.patiently,
            UnknownTypes(
                store,
                self.patiently,
                self.policy,
                patience_seconds=settings.unknown_type_patience_seconds,
                consumer_name=self.name,
                rng=rng,
            ),
            lease_seconds=settings.lease_seconds,
            consumer_name=self.name,
            runtime_limits=runtime_limits,
            rng=rng,
        )
        self.lease = LeaseKeeper(
            store,
            self.metrics,
            lease_seconds=settings.lease_seconds,
            heartbeat_interval=heartbeat_interval or settings.lease_seconds / 3,
            # Between renewals the heartbeat polls for a cancel request this often.
            cancel_poll_interval=cancel_poll_interval or CANCEL_POLL_SECONDS,
        )
        self.progress = ProgressReporter(store)
        self.durable = PatientDurableStore(durable, self.patiently) if durable is not None else None
        self.batches = Batches(self.results_dir)  # batch types' open batches

    # --- one delivery, top to bottom --------------------------------------------------------

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
        self.metrics.running += 1
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
            await self._settle(delivery, verdict, early)
            execution.end(verdict.outcome)
            self.metrics.running -= 1
        return verdict

    async def process(
        self, body: bytes, *, redelivered: bool = False, early: EarlyAck | None = None
    ) -> Verdict:
        """Decide what becomes of one message: its job claimed (``consumer/claims.py``), run
        and its outcome stored, or why nothing ran. ``early``: its ack ahead of the outcome,
        armed once the claim committed (``handle``'s)."""
        try:
            envelope = Envelope.decode(body)
        except MalformedMessage as error:
            log.warning(
                "malformed message dead-lettered to the quarantine",
                extra={"event": "malformed_message", "reason": str(error)},
            )
            return Verdict(Disposition.DEAD_LETTER, DeliveryOutcome.MALFORMED)
        taken = await self.claims.take(envelope, redelivered=redelivered)
        if isinstance(taken, Verdict):  # not claimed: deferred, held, a duplicate...
            return taken
        claim, lease_deadline = taken
        return await self._attempt(claim, lease_deadline, early)

    async def _attempt(
        self, claim: Claimed, lease_deadline: float, early: EarlyAck | None
    ) -> Verdict:
        """Run a claimed job and decide its outcome, then store it in one call (``_conclude``);
        a lost lease, or parents' results that could not be read, store nothing."""
        job = claim.job
        telemetry.execution_claimed(job)  # from here on the handler's trace is the job's
        if log.isEnabledFor(logging.INFO):  # the bench and most deployments hide INFO
            log.info("claimed", extra={**_fields(job), "event": "claimed"})
        if early is not None:
            # The claim committed: the lease may hold the job alone.
            early.arm(lambda: _fields(job))
        if job.cancel_requested_at is not None:
            # Asked of an earlier attempt that ended before it could carry it out (its consumer
            # crashed or stopped): the handler does not run again.
            log.info(
                "cancel requested earlier: not run",
                extra={**_fields(job), "event": LeaseEnd.CANCEL_REQUESTED},
            )
            return await self._conclude(claim, Cancelled(), 0.0)
        try:
            job_type, payload = self._resolve(job.type, job.payload)
        except (UnknownJobType, InvalidPayload, PermanentError) as error:
            failure = refusal_failure(error, self.mask)
            return await self._conclude(
                claim, Quarantine(error.code, failure.message, failure), 0.0
            )
        try:
            run = await self._run_under_lease(claim, job_type, payload, lease_deadline, early)
        except StoreUnavailable:  # its parents' results could not be read
            log.warning(
                "parents' results not read: database unreachable; requeued",
                extra={**_fields(job), "event": "store_unavailable"},
            )
            return STORE_UNAVAILABLE
        if isinstance(run, HandlerRun) and isinstance(run.interrupt, Suspended):
            return slept(run.interrupt, run.seconds, job, self.metrics, _fields(job))
        if isinstance(run, HandlerRun) and isinstance(run.interrupt, CancelPending):
            run = CancelRequested(run.seconds)  # it would have slept with its cancel pending
        elif isinstance(run, HandlerRun) and run.interrupt is not None:  # LeaseGone
            run = LeaseLost(LeaseEnd.TAKEN, run.seconds)
        if isinstance(run, LeaseLost):
            return self._lease_lost(job, run, _fields(job))
        if isinstance(run, CancelRequested):
            log.info(
                "cancel requested: handler stopped",
                extra={**_fields(job), "event": LeaseEnd.CANCEL_REQUESTED},
            )
            return await self._conclude(claim, Cancelled(), run.seconds)
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
        return await self._conclude(claim, outcome, run.seconds, run.error)

    async def _settle(self, delivery: Delivery, verdict: Verdict, early: EarlyAck) -> None:
        """The one place a delivery is acked or nacked, once its outcome is committed (a
        message acked early is settled by ``EarlyAck.settle``)."""
        self.metrics.delivered(verdict.outcome)
        if early.sent:
            await early.settle(verdict, self.backoff)
            return
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

    # --- the steps of an attempt -----------------------------------------------------------

    def _resolve(self, name: str, raw_payload: Any) -> tuple[JobType, BaseModel]:
        job_type = self.registry.get(name)
        if job_type.handler is None:
            raise PermanentError(f"no handler for job type {name[:100]!r}", code="no_handler")
        return job_type, self.registry.validate_payload(name, raw_payload)

    async def _run_under_lease(
        self,
        claim: Claimed,
        job_type: JobType,
        payload: BaseModel,
        lease_deadline: float,
        early: EarlyAck | None,
    ) -> HeldRun:
        """The handler under the lease's heartbeat (``consumer/lease.py``)."""
        job = claim.job
        if job_type.batch is not None:  # its part of its batch's call, the lease kept meanwhile
            handler = asyncio.create_task(self.batches.run(job_type, _in_batch(job), payload))
        else:
            # A workflow's job reads its parents' results (docs/workflows.md); others skip it.
            parents = (
                await self.patiently(lambda: self.store.parent_results(job.id))
                if job.workflow_id is not None
                else None
            )
            context = job_context(
                job,
                self.results_dir,
                parent_results=parents,
                progress_sink=self.progress.sink_for(claim),
                durable=durable_run(claim, self.durable, self.lease.lease_seconds),
            )
            handler = asyncio.create_task(call_handler(job_type, context, payload))
        try:
            held = await self.lease.watch(
                handler, lambda: self.lease.heartbeat(claim, lease_deadline), lease_deadline
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

    def _lease_lost(self, job: Job, run: LeaseLost, extra: dict[str, Any]) -> Verdict:
        """No outcome is ours to store: the message is requeued (the job is another
        attempt's now, or its lease expires and it comes back)."""
        self.metrics.lease_losses.inc()
        self.metrics.ran(job.type, DeliveryOutcome.LEASE_LOST, run.seconds)
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

    async def _conclude(
        self, claim: Claimed, outcome: Outcome, seconds: float, error: BaseException | None = None
    ) -> Verdict:
        """The one store call for a decided outcome — result and state in one guarded
        transaction, fenced by the lease token — shielded from cancellation."""
        job = claim.job
        try:
            finish = await _shielded(
                self.patiently(
                    lambda: self.store.finish(
                        job.id,
                        lease_token=claim.lease_token,
                        attempt=job.attempts,
                        outcome=outcome,
                        related=job.workflow_id is not None or job.parent_job_id is not None,
                        sequenced=job.sequence_key is not None,
                    )
                )
            )
        except StoreUnavailable:
            log.warning(
                "outcome not stored: database unreachable; requeued",
                extra={**_fields(job), "event": "store_unavailable"},
            )
            return STORE_UNAVAILABLE
        verdict = verdict_of(outcome, finish)
        self.metrics.ran(job.type, verdict.outcome, seconds)
        if finish is Finish.STALE:
            log.warning(
                "outcome rejected: the lease is no longer ours",
                extra={**_fields(job), "event": "stale_completion_rejected"},
            )
        elif isinstance(outcome, Succeeded | Cancelled):
            if log.isEnabledFor(logging.INFO):
                log.info("attempt finished", extra={**_fields(job), "event": verdict.outcome})
        else:
            summary = outcome.failure.summary() if outcome.failure else outcome.error
            context = _outcome_context(outcome, finish)
            telemetry.execution_failed(context.get("reason", verdict.outcome), summary)
            # The traceback goes with the line (the formatter masks it and cuts it to size).
            log.warning(
                "attempt failed: %s",
                summary,
                exc_info=error,
                extra={**_fields(job), "event": verdict.outcome, **context},
            )
        return verdict


def _fields(job: Job) -> dict[str, Any]:
    """A job's fields on each of its log lines; built only for a line that is written."""
    return {"job_id": str(job.id), "attempt": job.attempts, "type": job.type}


def _in_batch(job: Job) -> BatchJob:
    """A claimed job as its batch handler sees it; its trace context its execution's (this
    delivery's span, when tracing is on), else the one it stored."""
    return BatchJob(
        job.id, job.attempts, job.max_attempts, telemetry.current_traceparent() or job.traceparent
    )


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
