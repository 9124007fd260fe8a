"""An in-memory ``ExecutionStore`` (``core/execution.py``) for the worker's unit tests.

It follows the transitions of ``core/states.py`` as the SQL of ``db/queries.py`` does: every
move is checked against its transition's source states and lease, a fenced one against the
lease token, and journaled with the transition's events. Its clock is injected; setting
``reachable`` to False makes every call raise ``StoreUnavailable``, like a database that is away.
``request_cancel`` asks to cancel a running job, as the API does.

Flow control follows the rules of ``db/execution_store.py``: no job of a queue in
``paused_queues`` is claimed, a type's limit in force (``runtime_limits``, else the claim's
``ClaimRules.code_limit``) is kept exactly (per ``Job.concurrency_key`` when per key), and a
job that may not start is held.

Durable execution (docs/durable-execution.md): a claim brings the job's ``steps`` (which
``SharedDurableStore``, the testing kit's in-memory store beside this one, records) and takes a
sleeper whose wake time has come, as ``CLAIM_JOBS`` does; a sleeper due in a paused queue wakes
into the pause (queued, then held).

It is held to ``PgExecutionStore`` by ``tests/integration/test_execution_store_contract.py``:
the same scenarios on both, PostgreSQL the truth. Workflows are not modelled (a job's parents'
results are whatever a test puts in ``parents``; no claim looks at a cancelled workflow).
"""

from __future__ import annotations

import dataclasses
import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from jobrelay.core.durable import (
    Asleep,
    ChildEnded,
    ChildRequest,
    ChildStarted,
    DurableStore,
    Fence,
    Gone,
    SignalTaken,
    StepRecord,
    TimedOut,
)
from jobrelay.core.errors import StoreUnavailable
from jobrelay.core.execution import (
    AttemptTrace,
    Claimed,
    ClaimResult,
    ClaimRules,
    Deferred,
    DeferResult,
    ExecutionStore,
    Finish,
    Held,
    HoldReason,
    LeaseTerms,
    ProgressReport,
    PutBack,
    Refusal,
    Refused,
    Renewal,
    already_done,
    outcome_name,
)
from jobrelay.core.flow import Limit, limit_key
from jobrelay.core.jobs import (
    Cancelled,
    Job,
    JobRequest,
    JournalEntry,
    Outcome,
    Quarantine,
    RetryLater,
    Succeeded,
)
from jobrelay.core.journal import QuarantineMarker
from jobrelay.core.states import (
    CANCEL_RUNNING,
    CLAIM,
    COMPLETE,
    DEFER,
    EXHAUST,
    HOLD,
    HOLD_ABANDONED,
    QUARANTINE,
    RECLAIM,
    RELEASE,
    RESCUE,
    RETRY,
    SLEEP,
    UNKNOWN_TYPE,
    WAKE,
    JobEvent,
    JobState,
    Transition,
)
from jobrelay.core.trace import StoredResult
from jobrelay.testing.durable import FakeClock, InMemoryDurableStore

# The error of a job quarantined for want of attempts, as PgExecutionStore writes it.
_EXHAUSTED_TEXT = "no attempts left: earlier attempts crashed or lost their lease"

# Where a sleeper with no deadline is due: never, in practice (it is woken first).
FAR_AWAY = timedelta(days=3650)


def _utc_now() -> datetime:
    return datetime.now(UTC)


class InMemoryExecutionStore:
    def __init__(
        self, clock: Callable[[], datetime] | None = None, *, queue: str = "default"
    ) -> None:
        self.clock = clock or _utc_now
        self.queue = queue
        self.paused_queues: set[str] = set()
        self.runtime_limits: dict[str, Limit] = {}
        self.rate_buckets: dict[tuple[str, str], datetime] = {}
        self.jobs: dict[uuid.UUID, Job] = {}
        self.results: dict[uuid.UUID, StoredResult] = {}
        self.journal: defaultdict[uuid.UUID, list[JournalEntry]] = defaultdict(list)
        self.outbox: list[tuple[uuid.UUID, datetime]] = []  # (job id, due at)
        self.unknown_since: dict[uuid.UUID, datetime] = {}
        self.reachable = True
        # Workflows are the database's (the fragment dependents_of of db/sql/workflows.sql); a
        # test sets what a job's parents returned, and reads what its handler reported.
        self.parents: dict[uuid.UUID, dict[str, Any]] = {}
        self.progress: dict[uuid.UUID, list[ProgressReport]] = defaultdict(list)
        # What each job's handler recorded (job_steps), by name in the order recorded.
        self.steps: defaultdict[uuid.UUID, dict[str, StepRecord]] = defaultdict(dict)

    # --- for tests ----------------------------------------------------------------------------

    def add(
        self,
        job_type: str,
        payload: Any = None,
        *,
        state: JobState = JobState.QUEUED,
        attempts: int = 0,
        max_attempts: int = 3,
        concurrency_key: str | None = None,
        job_id: uuid.UUID | None = None,
    ) -> Job:
        payload = {} if payload is None else payload
        request = JobRequest(f"key-{len(self.jobs)}", job_type, payload, max_attempts)
        accepted = request.as_new_job(job_id or uuid.uuid4(), uuid.uuid4(), at=self.clock())
        job = dataclasses.replace(
            accepted, state=state, attempts=attempts, concurrency_key=concurrency_key
        )
        self.jobs[job.id] = job
        return job

    def take_over(self, job_id: uuid.UUID) -> uuid.UUID:
        """Another worker re-claims the job under a new token, as after an expired lease."""
        token = uuid.uuid4()
        job = self.jobs[job_id]
        self.jobs[job_id] = dataclasses.replace(
            job, attempts=job.attempts + 1, lease_token=token, lease_until=self._later(30)
        )
        return token

    def events(self, job_id: uuid.UUID) -> list[JobEvent]:
        return [JobEvent(entry.event) for entry in self.journal[job_id]]

    def request_cancel(self, job_id: uuid.UUID) -> bool:
        """The job's client asks to cancel it while it runs, as ``REQUEST_CANCEL`` does: the
        request and a `cancel_requested` event the first time. False: it is not running."""
        job = self.jobs[job_id]
        if job.state is not JobState.RUNNING:
            return False
        if job.cancel_requested_at is None:
            self.jobs[job_id] = dataclasses.replace(job, cancel_requested_at=self.clock())
            self._record(job, JobEvent.CANCEL_REQUESTED, job.attempts, "by its client")
        return True

    # --- the port -------------------------------------------------------------------------------

    async def claim(
        self,
        job_id: uuid.UUID,
        lease: LeaseTerms,
        *,
        detail: str | None = None,
        job_type: str | None = None,
        rules: ClaimRules | None = None,
    ) -> ClaimResult:
        lease_token, lease_seconds = lease.token, lease.seconds
        rules = rules or ClaimRules()
        self._reach()
        job = self.jobs.get(job_id)
        if job is None:
            return Refused(Refusal.UNKNOWN_JOB)
        if job_type is not None and job.type != job_type:
            if job.state is JobState.RUNNING and job.lease_token == lease_token:
                return Claimed(job, lease_token, reclaimed=False)
            return Refused(Refusal.OTHER_TYPE, job)
        if job.attempts < job.max_attempts:
            due = job.available_at <= self.clock()
            for transition in (CLAIM, RECLAIM):
                if (transition is RECLAIM or due) and self._allows(transition, job, None):
                    held = self._held(job, rules)
                    if held is not None:
                        return held
                    self.unknown_since.pop(job_id, None)
                    claimed = self._move(
                        job,
                        transition,
                        attempts=job.attempts + 1,
                        lease_token=lease_token,
                        lease_until=self._later(lease_seconds),
                        detail=detail,
                        wake_at=None,
                        waiting_for=None,
                        steps=tuple(self.steps[job_id].values()) or None,
                    )
                    return Claimed(claimed, lease_token, reclaimed=transition is RECLAIM)
        if job.state is JobState.RUNNING and job.lease_token == lease_token:
            return Claimed(job, lease_token, reclaimed=False)  # our own earlier claim
        if job.attempts >= job.max_attempts and self._allows(EXHAUST, job, None):
            self._quarantine(job, EXHAUST, QuarantineMarker.ATTEMPTS_EXHAUSTED, _EXHAUSTED_TEXT)
            return Refused(Refusal.EXHAUSTED, job)
        self._record(job, JobEvent.DUPLICATE_DELIVERY, job.attempts, f"job {job.state}")
        return Refused(Refusal.DUPLICATE, job)

    async def defer_unknown_type(self, job_id: uuid.UUID, put_back: PutBack) -> DeferResult:
        self._reach()
        job = self.jobs.get(job_id)
        if job is None:
            return Refused(Refusal.UNKNOWN_JOB)
        now = self.clock()
        if job.type != put_back.job_type:
            return Refused(Refusal.OTHER_TYPE, job)
        if job.available_at <= now and self._allows(DEFER, job, None):
            known_since = self.unknown_since.get(job_id)
            since = known_since or now
            self.unknown_since[job_id] = since
            patience = timedelta(seconds=put_back.patience_seconds)
            name = put_back.job_type[:100]
            if known_since is not None and known_since <= now - patience:
                over = f"{put_back.patience_seconds:g}s"
                error = f"job type {name!r} stayed unknown to the consumers for over {over}"
                self._quarantine(job, UNKNOWN_TYPE, QuarantineMarker.UNKNOWN_JOB_TYPE, error)
                return Deferred(True, job.available_at, since)
            due = self._later(put_back.delay_seconds)
            self._move(
                job,
                DEFER,
                available_at=due,
                last_error_code=QuarantineMarker.UNKNOWN_JOB_TYPE,
                last_error=f"no consumer that knows job type {name!r} has received it yet",
            )
            self.outbox.append((job_id, due))
            return Deferred(False, due, since)
        self._record(job, JobEvent.DUPLICATE_DELIVERY, job.attempts, f"job {job.state}")
        return Refused(Refusal.DUPLICATE, job)

    async def renew(self, job_id: uuid.UUID, lease: LeaseTerms) -> Renewal:
        self._reach()
        job = self.jobs.get(job_id)
        if job is None or not self._allows(COMPLETE, job, lease.token):  # held and alive
            return Renewal.LOST
        self.jobs[job_id] = dataclasses.replace(job, lease_until=self._later(lease.seconds))
        return Renewal.HELD if job.cancel_requested_at is None else Renewal.CANCEL_REQUESTED

    async def cancel_requested(self, job_id: uuid.UUID, lease: LeaseTerms) -> bool:
        self._reach()
        job = self.jobs.get(job_id)
        return job is not None and job.lease_token == lease.token and bool(job.cancel_requested_at)

    async def finish(
        self,
        job_id: uuid.UUID,
        *,
        lease_token: uuid.UUID,
        attempt: int,
        outcome: Outcome,
        related: bool = True,
        sequenced: bool = False,
    ) -> Finish:
        self._reach()
        job = self.jobs.get(job_id)
        if job is None:
            return Finish.STALE  # as FINISH_JOBS: no row moved, and no journal to write to
        written = self._written(job, lease_token, outcome)
        if written is not None:
            return written
        if self._already_done(job, attempt, outcome):
            return Finish.ALREADY
        detail = f"{outcome_name(outcome)} by attempt {attempt} rejected: lease no longer held"
        self._record(job, JobEvent.STALE_COMPLETION_REJECTED, attempt, detail)
        return Finish.STALE

    async def release(self, job_id: uuid.UUID, *, lease_token: uuid.UUID, detail: str) -> bool:
        self._reach()
        job = self.jobs.get(job_id)
        if job is None or not self._allows(RELEASE, job, lease_token):
            return False
        # No outbox row, as RELEASE_LEASE: the consumer requeues the message it holds.
        self._move(job, RELEASE, available_at=self.clock(), detail=detail)
        return True

    async def parent_results(self, job_id: uuid.UUID) -> dict[str, Any]:
        self._reach()
        return dict(self.parents.get(job_id, {}))

    async def report_progress(self, reports: Sequence[ProgressReport]) -> None:
        self._reach()
        for report in reports:
            job = self.jobs.get(report.job_id)
            if job is not None and (job.state, job.lease_token) == (
                JobState.RUNNING,
                report.lease_token,
            ):
                self.jobs[job.id] = dataclasses.replace(job, progress=report.as_json())
                self.progress[report.job_id].append(report)

    # --- flow control: the checks of a claim --------------------------------------------------

    def _held(self, job: Job, rules: ClaimRules) -> Held | None:
        """Hold a claimable job whose queue is paused, or whose type (or key) has no slot or
        rate token free under the limit in force; None: it may start (its token taken)."""
        if self.queue in self.paused_queues:
            return self._hold(job, HoldReason.PAUSED, 0.0, f"queue {self.queue!r} is paused")
        limit = self.runtime_limits.get(job.type)
        if limit is None and rules.limited:
            limit = rules.code_limit
        if limit is None:
            return None
        key = limit_key(limit, job.concurrency_key)
        of_key = f" for key {key[:100]!r}" if limit.per_key else ""
        if limit.concurrency is not None:
            self._rescue_slot(job, limit, key)
            if self._running(job.type, limit, key) >= limit.concurrency:
                detail = f"concurrency limit {limit.concurrency} reached{of_key}"
                return self._hold(job, HoldReason.CONCURRENCY, rules.hold_seconds, detail)
        if limit.rate is not None:
            now = self.clock()
            allowed_from = self.rate_buckets.get((job.type, key), now)
            if allowed_from > now:
                wait = (allowed_from - now).total_seconds()
                return self._hold(job, HoldReason.RATE, wait, f"rate {limit.rate} reached{of_key}")
            self.rate_buckets[(job.type, key)] = now + timedelta(seconds=limit.rate.interval)
        return None

    def _rescue_slot(self, job: Job, limit: Limit, key: str) -> None:
        """Queue again the other jobs of the slot whose lease expired, before the count, as the
        exact claim's RESCUE_EXPIRED_LEASES does (a new outbox row each)."""
        in_slot = [
            other
            for other in self.jobs.values()
            if other.id != job.id
            and other.type == job.type
            and limit_key(limit, other.concurrency_key) == key
        ]
        for other in in_slot:
            if self._allows(RESCUE, other, None):
                detail = "lease expired; its concurrency slot freed for a claim"
                self._move(other, RESCUE, available_at=self.clock(), detail=detail)
                self.outbox.append((other.id, self.clock()))

    def _running(self, job_type: str, limit: Limit, key: str) -> int:
        """The slots in use: running jobs of the type (and key) under a live lease."""
        now = self.clock()
        return sum(
            1
            for other in self.jobs.values()
            if other.type == job_type
            and other.state is JobState.RUNNING
            and other.lease_until is not None
            and other.lease_until > now
            and limit_key(limit, other.concurrency_key) == key
        )

    def _hold(self, job: Job, reason: HoldReason, delay: float, detail: str) -> Held:
        due = self._later(delay)
        if job.state is JobState.SLEEPING:  # a sleeper wakes into the pause, then is held
            detail_of_wake = f"due in a held queue: {reason}"
            job = self._move(job, WAKE, wake_at=None, waiting_for=None, detail=detail_of_wake)
        hold = HOLD_ABANDONED if job.state is JobState.RUNNING else HOLD
        self._move(job, hold, available_at=due, detail=f"{reason}: {detail}")
        self.outbox.append((job.id, due))
        return Held(reason, due, detail, self.jobs[job.id])

    # --- the rules --------------------------------------------------------------------------

    def _reach(self) -> None:
        if not self.reachable:
            raise StoreUnavailable("the database is away (in-memory store)")

    def _later(self, seconds: float) -> datetime:
        return self.clock() + timedelta(seconds=seconds)

    def _allows(self, transition: Transition, job: Job, lease_token: uuid.UUID | None) -> bool:
        if transition.fenced and (lease_token is None or job.lease_token != lease_token):
            return False
        expired = job.lease_until is not None and job.lease_until < self.clock()
        return transition.allows(job.state, lease_expired=expired)

    def _move(
        self, job: Job, transition: Transition, *, detail: str | None = None, **changes: Any
    ) -> Job:
        """Make an allowed move: the new state, the changes, the transition's journal."""
        target = transition.target if transition.target is not None else job.state
        if target is not JobState.RUNNING:
            changes = {"lease_token": None, "lease_until": None, **changes}
        moved = dataclasses.replace(job, state=target, updated_at=self.clock(), **changes)
        self.jobs[job.id] = moved
        for event in transition.journal:
            attempt = job.attempts if event is JobEvent.LEASE_EXPIRED else moved.attempts
            self._record(moved, event, attempt, detail)
        return moved

    def _quarantine(self, job: Job, transition: Transition, code: str, error: str) -> None:
        self._move(
            job,
            transition,
            detail=code,
            last_error_code=code,
            last_error=error,
            finished_at=self.clock(),
        )

    def _written(self, job: Job, lease_token: uuid.UUID, outcome: Outcome) -> Finish | None:
        """Make the outcome's move as ``FINISH_JOBS`` does (None: the lease is not ours)."""
        match outcome:
            case Succeeded(result=result):
                if not self._allows(COMPLETE, job, lease_token):
                    return None
                # An earlier attempt's error is cleared, as FINISH_JOBS does (the journal keeps it).
                self._move(
                    job,
                    COMPLETE,
                    finished_at=self.clock(),
                    last_error_code=None,
                    last_error=None,
                )
                self.results[job.id] = StoredResult(result, job.attempts, self.clock())
            case RetryLater(error_code=code, error=error) if job.cancel_requested_at:
                # Its cancel was requested meanwhile: cancelled instead of retried.
                if not self._allows(CANCEL_RUNNING, job, lease_token):
                    return None
                self._move(
                    job,
                    CANCEL_RUNNING,
                    last_error_code=code,
                    last_error=error,
                    finished_at=self.clock(),
                    detail=f"{code}: not retried, its cancel was requested",
                )
                return Finish.CANCELLED
            case RetryLater(delay_seconds=delay, error_code=code, error=error):
                if not self._allows(RETRY, job, lease_token):
                    return None
                available_at = self._later(delay)  # the store's clock, as now() in FINISH_JOBS
                self._move(
                    job,
                    RETRY,
                    available_at=available_at,
                    last_error_code=code,
                    last_error=error,
                    detail=code,
                )
                self.outbox.append((job.id, available_at))
            case Quarantine(reason_code=code, error=error):
                if not self._allows(QUARANTINE, job, lease_token):
                    return None
                self._quarantine(job, QUARANTINE, code, error)
            case Cancelled():
                if not self._allows(CANCEL_RUNNING, job, lease_token):
                    return None
                self._move(
                    job, CANCEL_RUNNING, finished_at=self.clock(), detail="its cancel was requested"
                )
        return Finish.WRITTEN

    def _already_done(self, job: Job, attempt: int, outcome: Outcome) -> bool:
        stored = self.results.get(job.id)
        trace = AttemptTrace(job.state, job.attempts, stored.attempt if stored else None)
        return already_done(trace, attempt, outcome)

    def _record(self, job: Job, event: JobEvent, attempt: int, detail: str | None) -> None:
        self.journal[job.id].append(JournalEntry(self.clock(), event, attempt, detail))


class SharedDurableStore:
    """The testing kit's ``InMemoryDurableStore`` (``jobrelay/testing/durable.py``) beside this
    execution store, sharing each job with it: the one in-memory ``DurableStore`` the worker's
    unit tests and ``tests/integration/test_durable_fake_contract.py`` run on.

    Before each call the kit is told the job as this store holds it (state, attempts, lease
    token: none once the lease is past its time, as ``SLEEP``'s guard has it) and its clock is
    moved to this store's; the kit keeps the steps in this store's ``steps``, which its claim
    brings. After, the kit's moves are made here by ``core/states.py``'s transitions: ``SLEEP``
    (due at the wake time, with an outbox row, or far away), ``WAKE`` by a signal (due now). A
    child is a job of this store too; its end wakes no parent here (the database does that, in
    the statement that ends the child), nor does a cancel requested stop a sleep.
    """

    def __init__(self, execution: InMemoryExecutionStore) -> None:
        self.execution = execution
        self.kit = InMemoryDurableStore(clock=FakeClock(execution.clock()))
        self.calls = 0  # every call of the port, answered or not

    # --- for tests ----------------------------------------------------------------------------

    def send_signal(self, job_id: uuid.UUID, name: str, value: Any) -> str:
        """``jobrelay_signal``: kept by the kit, which wakes the job if it sleeps waiting for it."""
        if job_id not in self.execution.jobs:
            return "unknown"
        self._share(job_id)
        answer = self.kit.send_signal(job_id, name, value)
        if answer == "sent":
            job = self.execution.jobs[job_id]
            self.execution._record(job, JobEvent.SIGNALLED, job.attempts, f"signal {name}")
            self._follow(job_id, f"signal {name!r}")
        return answer

    def job_steps(self, job_id: uuid.UUID) -> dict[str, StepRecord]:
        """What the job recorded, by name (a copy)."""
        return dict(self.execution.steps.get(job_id, {}))

    # --- the port -------------------------------------------------------------------------------

    async def record_step(self, fence: Fence, name: str, value: Any) -> StepRecord | Gone:
        self._share(fence.job_id)
        return await self.kit.record_step(fence, name, value)

    async def sleep(
        self, fence: Fence, name: str, *, seconds: float | None, until: datetime | None
    ) -> Asleep | Gone:
        self._share(fence.job_id)
        answer = await self.kit.sleep(fence, name, seconds=seconds, until=until)
        self._follow(fence.job_id, name)
        return answer

    async def wait_for_signal(
        self, fence: Fence, name: str, signal: str, timeout_seconds: float | None
    ) -> SignalTaken | TimedOut | Asleep | Gone:
        self._share(fence.job_id)
        answer = await self.kit.wait_for_signal(fence, name, signal, timeout_seconds)
        self._follow(fence.job_id, name)
        return answer

    async def child(
        self, fence: Fence, name: str, request: ChildRequest, *, wait: bool
    ) -> ChildEnded | ChildStarted | Asleep | Gone:
        self._share(fence.job_id)
        answer = await self.kit.child(fence, name, request, wait=wait)
        for child in self.kit.children_of(fence.job_id):
            if child.id not in self.execution.jobs:
                self.execution.add(
                    child.type, child.payload, max_attempts=child.max_attempts, job_id=child.id
                )
        self._follow(fence.job_id, name)
        return answer

    # --- the sharing ----------------------------------------------------------------------------

    def _share(self, job_id: uuid.UUID) -> None:
        """Tell the kit the job as this store holds it, at this store's time."""
        self.calls += 1
        self.execution._reach()
        self.kit.clock.move_to(self.execution.clock())
        job = self.execution.jobs.get(job_id)
        if job is None:
            return
        stored = self.kit.add_job(job.type, job.payload, job_id=job.id)
        live = self.execution._allows(SLEEP, job, job.lease_token)
        stored.state, stored.lease_token = job.state, job.lease_token if live else None
        stored.attempts, stored.max_attempts = job.attempts, job.max_attempts
        stored.wake_at, stored.waiting_for = job.wake_at, job.waiting_for
        stored.steps = self.execution.steps[job.id]  # one dict: the kit writes, the claim reads

    def _follow(self, job_id: uuid.UUID, detail: str) -> None:
        """Make here the move the kit made of the job: to sleep, or woken."""
        job, stored = self.execution.jobs.get(job_id), self.kit.jobs.get(job_id)
        if job is None or stored is None:
            return
        now = self.execution.clock()
        if stored.state is JobState.SLEEPING and job.state is JobState.RUNNING:
            due = stored.wake_at or now + FAR_AWAY
            self.execution._move(
                job,
                SLEEP,
                max_attempts=stored.max_attempts,
                wake_at=stored.wake_at,
                waiting_for=stored.waiting_for,
                available_at=due,
                detail=detail,
            )
            if stored.wake_at is not None:
                self.execution.outbox.append((job_id, stored.wake_at))
        elif stored.state is JobState.QUEUED and job.state is JobState.SLEEPING:
            self.execution._move(
                job, WAKE, wake_at=None, waiting_for=None, available_at=now, detail=detail
            )
            self.execution.outbox.append((job_id, now))


if TYPE_CHECKING:  # it is a whole ExecutionStore, and the kit's store beside it a DurableStore
    _port: ExecutionStore = InMemoryExecutionStore()
    _durable: DurableStore = SharedDurableStore(InMemoryExecutionStore())
