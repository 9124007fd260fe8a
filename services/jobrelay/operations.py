"""Operator actions over both sides of the quarantine: the jobs' recorded reasons in
PostgreSQL and the dead-lettered messages in RabbitMQ; and an operator's cancel of any client's
job (``cancel_any_job``). Used by the CLI, the admin API, the console and (the sweep) the
dispatcher's maintenance.

The invariant kept here (docs/invariants.md, invariant 8): a replay, a redispatch or a
reconciliation never removes the quarantine message of a later quarantine of the same job, and
every quarantined job has exactly one message once the system is quiet. How:

- Everything that takes messages out of the quarantine queue without acking them holds the
  quarantine lock (``jobrelay.db.quarantine_store``), so each holder sees the whole queue.
- A replay holds the queue BEFORE it changes the jobs, and then removes only held messages of
  the jobs it replayed. A held message was in the queue before the replay committed, so it
  belongs to the quarantine being replayed or an earlier one; the message of any later
  quarantine arrives after the replay (the consumer dead-letters only after its quarantine
  committed, and that quarantine needs the replay first), so it cannot be held, hence never
  removed. (A watermark on outbox ids would not do: a stale duplicate of an old row can cause
  the later quarantine, and its message then carries an old id.)
- The sweep (``sweep_quarantine``) reconciles delivery-limit deaths, removes surplus and
  stale messages and restores missing ones by ``jobrelay.broker.quarantine.plan_sweep``, which
  reads the jobs' states after taking the messages. It converges what races leave behind: a
  copy dead-lettered twice, a message whose nack arrived after its job was replayed, a
  dead-letter lost to a broker-node fault (the job is quarantined, its message is nowhere: it
  is published again from the database once the grace since the quarantine has passed).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import aiormq.exceptions
from aio_pika.abc import AbstractConnection

from jobrelay.broker import quarantine
from jobrelay.broker.connection import connect_broker
from jobrelay.broker.quarantine import QuarantinedMessage
from jobrelay.core.errors import BrokerUnavailable, JobNotFound, NotCancellable, UnknownJobType
from jobrelay.core.jobs import CancelAnswer, Job, QuarantinedJob
from jobrelay.core.registry import Registry
from jobrelay.core.schedules import Schedule
from jobrelay.core.settings import Settings, parse_type_queues
from jobrelay.core.states import JobState
from jobrelay.core.topology import queue_of
from jobrelay.core.trace import trace_document
from jobrelay.db.quarantine_store import LOCK_WAIT_SECONDS, QuarantineBusy, QuarantineStore
from jobrelay.db.schedule_store import ScheduleStore
from jobrelay.db.store import Store

log = logging.getLogger("jobrelay.operations")

Progress = Callable[[int, int], None]
REPLAY_CHUNK = 200
RESTORE_BATCH = 1000  # missing quarantine messages published again per sweep at most
# A listing waits this long for a replay or a sweep that holds the queue, then shows the
# database side alone (``broker: busy``).
READ_WAIT_SECONDS = 10.0


async def cancel_any_job(store: Store, job_id: uuid.UUID, *, how: str) -> tuple[CancelAnswer, Job]:
    """An operator's cancel of any client's job, as its owner's would (``Store.cancel_job``):
    at once when queued, retrying or waiting, by request when running. The journal's entry
    says it was an operator and ``how`` ("in the console (alice)", "with jobrelay jobs cancel"),
    where the owner's says "by its client". ``JobNotFound``, or ``NotCancellable`` for a job
    that has finished; the admin API, the CLI and the console all cancel through here."""
    answer = await store.cancel_job(job_id, client_id=None, detail=f"by an operator {how}")
    job = await store.get_job(job_id)
    if job is None:
        raise JobNotFound()
    if answer is None:
        raise NotCancellable(f"the job is {job.state.value}", state=job.state.value)
    return answer, job


@dataclass(frozen=True)
class ReplayOutcome:
    job_id: uuid.UUID
    status: str  # replayed | not_found | not_quarantined
    state: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"job_id": str(self.job_id), "status": self.status, "state": self.state}


@dataclass(frozen=True)
class SweepResult:
    """What one sweep of the quarantine queue found and did."""

    messages: int  # messages held (the queue's depth, up to the peek limit)
    reconciled: int  # jobs marked quarantined (delivery_limit) for a message the broker moved
    surplus: int  # second copies of a quarantined job's message, removed
    stale: int  # messages of jobs no longer quarantined, removed
    restored: int = 0  # quarantined jobs with no message, given theirs again
    # Quarantined jobs with no message, within the grace -> when first seen missing: what the
    # next sweep takes as ``missing_since``.
    missing_since: dict[uuid.UUID, datetime] = field(default_factory=dict)
    due_in: float | None = None  # seconds until the first of those passes the grace

    @property
    def waiting(self) -> int:
        return len(self.missing_since)

    @property
    def changed(self) -> bool:
        return bool(self.reconciled or self.surplus or self.stale or self.restored)

    def as_dict(self) -> dict[str, Any]:
        return {
            "messages_seen": self.messages,
            "reconciled_delivery_limit": self.reconciled,
            "removed_surplus": self.surplus,
            "removed_stale": self.stale,
            "restored_missing": self.restored,
            "messages_in_queue": self.messages - self.surplus - self.stale + self.restored,
        }


async def sweep_quarantine(
    store: Store,
    connection: AbstractConnection,
    *,
    wait_seconds: float | None,
    type_queues: dict[str, str] | None = None,
    missing_since: dict[uuid.UUID, datetime] | None = None,
) -> SweepResult | None:
    """Reconcile and tidy the quarantine queue once (see the module's docstring). None when
    ``wait_seconds`` is None and another process holds the queue right now. ``type_queues``
    (``JOBRELAY_TYPE_QUEUES``) names the work queue a restored message says it died in;
    ``missing_since``: the previous sweep's ``SweepResult.missing_since`` (a missing message
    is restored only after sweeps a grace apart all saw it missing: ``plan_sweep``)."""
    keeper = QuarantineStore(store)
    async with keeper.exclusive(wait_seconds=wait_seconds) as locked:
        if not locked:
            return None
        try:
            plan, seen, reconciled, restored = await _sweep_held(
                keeper, connection, type_queues or {}, missing_since
            )
        except (aiormq.exceptions.AMQPError, aiormq.exceptions.ChannelInvalidStateError) as error:
            # Inside the lock's transaction a broken broker connection (a ConnectionError)
            # would be told as a database outage: say what it is.
            raise BrokerUnavailable(
                f"broker connection lost while sweeping the quarantine ({type(error).__name__})"
            ) from None
    return SweepResult(
        seen,
        reconciled,
        plan.surplus,
        plan.stale,
        restored,
        plan.missing_since,
        plan.due_in,
    )


async def _sweep_held(
    keeper: QuarantineStore,
    connection: AbstractConnection,
    type_queues: dict[str, str],
    missing_since: dict[uuid.UUID, datetime] | None,
) -> tuple[quarantine.SweepPlan, int, int, int]:
    """``sweep_quarantine``'s work under the lock: (the plan, messages held, jobs reconciled,
    messages restored)."""
    async with quarantine.hold(connection) as held:
        reconciled = await _reconcile_delivery_limited(keeper, held.seen)
        # Read after the messages were taken: plan_sweep's reasoning depends on it.
        held_ids = {m.job_id for m in held.seen if m.job_id}
        states = await keeper.job_states(held_ids)
        unheld: list[QuarantinedJob] = []
        now: datetime | None = None
        if held.complete:  # else a job with no held message may have one past the limit
            unheld, now = await keeper.quarantined_without_message(held_ids, limit=RESTORE_BATCH)
        plan = quarantine.plan_sweep(
            held.seen, states, unheld, now=now, missing_since=missing_since
        )
        await held.ack(plan.remove)
        restored = await _restore(connection, plan.restore, now, type_queues)
    return plan, len(held.seen), reconciled, restored


async def _reconcile_delivery_limited(
    keeper: QuarantineStore, messages: list[QuarantinedMessage]
) -> int:
    """Quarantine (``delivery_limit``) the jobs whose messages the broker dead-lettered."""
    reconciled = 0
    for message in messages:
        if message.reason == "delivery_limit" and message.job_id is not None:
            error = f"the broker dead-lettered the message after {message.deaths} death(s)"
            if await keeper.quarantine_delivery_limited(message.job_id, error=error):
                reconciled += 1
    return reconciled


async def _restore(
    connection: AbstractConnection,
    jobs: list[QuarantinedJob],
    now: datetime | None,
    type_queues: dict[str, str],
) -> int:
    """Publish the missing messages of these quarantined jobs (the database is the truth)."""
    if not jobs or now is None:
        return 0
    messages = [
        (quarantine.restored_message(job, queue_of(job.job_type, type_queues), now), job.job_type)
        for job in jobs
    ]
    restored = await quarantine.restore(connection, messages)
    for job in jobs:
        log.warning(
            "quarantine message missing: restored from the database",
            extra={"event": "quarantine_restored", "job_id": str(job.job_id), "type": job.job_type},
        )
    return restored


class Operations:
    def __init__(self, store: Store, settings: Settings, registry: Registry) -> None:
        self.store = store
        self.settings = settings
        self.registry = registry
        self.keeper = QuarantineStore(store)

    @asynccontextmanager
    async def broker(self) -> AsyncIterator[AbstractConnection]:
        connection = await connect_broker(self.settings.amqp_url, seconds=10, name="jobrelay-ops")
        try:
            yield connection
        finally:
            await connection.close()

    # --- reading ------------------------------------------------------------------------------

    async def messages(
        self, *, wait_seconds: float = LOCK_WAIT_SECONDS
    ) -> list[QuarantinedMessage]:
        """Every message in the quarantine queue, left in place."""
        async with (
            self.broker() as connection,
            self.keeper.exclusive(wait_seconds=wait_seconds),
        ):
            return await quarantine.peek(connection)

    async def _messages_if_reachable(
        self,
    ) -> tuple[list[QuarantinedMessage] | None, dict[str, str | None]]:
        """The messages and ``{"broker": "ok"}``; or None and why not (``"unavailable"`` with
        the cause in words, ``"busy"``): the database side of the quarantine is worth showing
        without the broker's."""
        try:
            return await self.messages(wait_seconds=READ_WAIT_SECONDS), {"broker": "ok"}
        except QuarantineBusy:
            return None, {"broker": "busy"}
        except BrokerUnavailable as error:
            cause = getattr(error, "cause", None) or str(error)
            return None, {"broker": "unavailable", "broker_cause": cause}

    async def quarantine_report(
        self, *, code: str | None = None, limit: int = 100
    ) -> dict[str, Any]:
        """The quarantined jobs (``code``, ``limit``) with their reasons and messages, and the
        messages of no quarantined job. Read-only: reconciliation is the dispatcher's (or
        ``reconcile_quarantine``'s). Without the broker, the jobs alone, ``broker`` saying so."""
        messages, broker = await self._messages_if_reachable()
        held = messages or []
        jobs = await self.keeper.quarantined_jobs(code=code, limit=limit)
        # Messages are told apart by their job's state, not by the (filtered, limited) listing:
        # a quarantined job left out by --code or --limit is not "not quarantined".
        states = await self.keeper.job_states({m.job_id for m in held if m.job_id})
        by_job: dict[uuid.UUID | None, list[dict[str, Any]]] = {}
        for message in held:
            by_job.setdefault(message.job_id, []).append(message.as_dict())
        other = []
        for message in held:
            state = states.get(message.job_id) if message.job_id is not None else None
            if state != JobState.QUARANTINED:
                other.append({**message.as_dict(), "job_state": state.value if state else None})
        return {
            "jobs": [
                {
                    "job_id": str(job.id),
                    "type": job.type,
                    "reason": job.last_error_code,
                    "error": job.last_error,
                    "attempts": job.attempts,
                    "max_attempts": job.max_attempts,
                    "quarantined_at": job.finished_at.isoformat() if job.finished_at else None,
                    "messages": by_job.get(job.id, []),
                }
                for job in jobs
            ],
            "other_messages": other,
            "messages_in_queue": len(held),
            # broker: ok | unavailable (with broker_cause) | busy; without "ok" the messages
            # are unknown
            **broker,
        }

    async def show(self, job_id: uuid.UUID) -> dict[str, Any] | None:
        trace = await self.store.trace(job_id)
        if trace is None:
            return None
        messages, broker = await self._messages_if_reachable()
        shown = [m.as_dict() for m in messages or [] if m.job_id == job_id]
        return {"trace": trace_document(trace), "messages": shown, **broker}

    # --- acting -------------------------------------------------------------------------------

    async def reconcile_quarantine(self) -> SweepResult:
        """Run the dispatcher's sweep now (waiting for the queue if another holds it)."""
        async with self.broker() as connection:
            result = await sweep_quarantine(
                self.store,
                connection,
                wait_seconds=LOCK_WAIT_SECONDS,
                type_queues=parse_type_queues(self.settings.type_queues),
            )
        assert result is not None  # a waiting sweep always runs
        return result

    def replay_budget(self, job_type: str) -> int:
        try:
            return self.registry.max_attempts_for(job_type, self.settings.max_attempts)
        except UnknownJobType:
            return self.settings.max_attempts

    async def replay(
        self,
        job_ids: list[uuid.UUID],
        *,
        progress: Progress | None = None,
        reset_steps: bool = False,
    ) -> list[ReplayOutcome]:
        """Back to queued with a fresh budget and a new outbox row; then the job's messages
        leave the quarantine queue. Replaying a job that is not quarantined changes nothing.
        ``reset_steps``: its recorded steps go too (docs/durable-execution.md); without, the new
        run goes on from them.

        The queue is held before any job changes (see the module's docstring): without the
        broker nothing is replayed (``BrokerUnavailable``)."""
        outcomes: list[ReplayOutcome] = []
        async with (
            self.broker() as connection,
            self.keeper.exclusive(wait_seconds=LOCK_WAIT_SECONDS),
            quarantine.hold(connection) as held,
        ):
            try:
                for start in range(0, len(job_ids), REPLAY_CHUNK):
                    chunk = job_ids[start : start + REPLAY_CHUNK]
                    outcomes += [await self._replay_one(job_id, reset_steps) for job_id in chunk]
                    if progress:
                        progress(len(outcomes), len(job_ids))
            finally:
                # Also after a failure half-way: the jobs replayed so far lose their messages.
                replayed = {o.job_id for o in outcomes if o.status == "replayed"}
                try:
                    await held.ack([i for i, m in enumerate(held.seen) if m.job_id in replayed])
                except Exception as error:  # the sweep removes them later (stale)
                    log.warning(
                        "replayed jobs' messages not removed yet: %s",
                        type(error).__name__,
                        extra={"event": "quarantine_remove_failed"},
                    )
        return outcomes

    async def _replay_one(self, job_id: uuid.UUID, reset_steps: bool) -> ReplayOutcome:
        job = await self.store.get_job(job_id)
        if job is None:
            return ReplayOutcome(job_id, "not_found")
        if job.state != JobState.QUARANTINED:
            return ReplayOutcome(job_id, "not_quarantined", job.state.value)
        budget = self.replay_budget(job.type)
        detail = "replayed by an operator" + (", its steps reset," if reset_steps else "")
        if await self.keeper.replay_job(
            job_id, budget=budget, detail=detail, reset_steps=reset_steps
        ):
            return ReplayOutcome(job_id, "replayed", JobState.QUEUED.value)
        current = await self.store.get_job(job_id)
        return ReplayOutcome(job_id, "not_quarantined", current.state.value if current else None)

    async def replay_all(
        self,
        *,
        code: str | None = None,
        progress: Progress | None = None,
        reset_steps: bool = False,
    ) -> list[ReplayOutcome]:
        await self.reconcile_quarantine()  # delivery-limit deaths become replayable jobs first
        return await self.replay(
            await self.keeper.quarantined_ids(code=code), progress=progress, reset_steps=reset_steps
        )

    async def purge(self) -> int:
        """Delete every message in the quarantine queue. The jobs stay quarantined (and
        replayable): only the broker's copies go."""
        async with (
            self.broker() as connection,
            self.keeper.exclusive(wait_seconds=LOCK_WAIT_SECONDS),
        ):
            return await quarantine.purge(connection)

    async def redispatch(
        self, *, older_than_seconds: float, progress: Progress | None = None
    ) -> int:
        """New outbox rows (and `redispatched` events) for jobs published long ago and never
        claimed. A duplicate message is harmless (the claim is guarded); a lost one is not.
        The dispatcher does the same by itself for queues it sees empty
        (``jobrelay.dispatcher.healing``)."""
        total = 0
        while True:
            batch = await self.keeper.redispatch_stranded(
                older_than_seconds=older_than_seconds, limit=500
            )
            total += len(batch)
            if progress:
                progress(total, total)
            if len(batch) < 500:
                return total


async def schedule_document(
    schedule: Schedule, now: datetime, store: ScheduleStore, client_id: uuid.UUID
) -> dict[str, Any]:
    """A schedule as ``jobrelay schedules`` and the console show it: its latest tick, whether
    that tick's job exists, and its next tick."""
    latest = schedule.latest_tick(now)
    job = await store.job_by_key(client_id, schedule.key(latest))
    return {
        "name": schedule.name,
        "type": schedule.type,
        "every_seconds": schedule.every,
        "cron": schedule.cron,
        "max_attempts": schedule.max_attempts,
        "latest_tick": latest.isoformat(),
        "latest_key": schedule.key(latest),
        "latest_job": None if job is None else {"id": str(job.id), "state": job.state.value},
        "next_tick": schedule.next_tick(now).isoformat(),
    }
