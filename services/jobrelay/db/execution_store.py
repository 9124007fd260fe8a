"""The consumer's side of the database (docs/life-of-a-job.md): claim, renew, finish — each one
statement. It implements the ``ExecutionStore`` port of ``core/execution.py`` (whose values it
answers with, and re-exports).

Claims and final writes are group commits (``db/group_commit.py``): the deliveries a consumer
has in flight together share one statement, one round trip and one commit, each row fenced by
its own lease token. A row the statement did not move takes the rare path alone. Every exit of
a worker from `running` (success, retry, quarantine, cancel) is the one guarded ``FINISH_JOBS``,
or its lean twin ``FINISH_PLAIN_JOBS`` for a group with no job of a workflow and no child.
The heartbeats' cancel polls are grouped the same way (one read for the jobs in flight).

Every write that reports on a job is fenced by the lease token of the claim that made it, so a
worker whose lease expired and was taken over can never complete, retry or quarantine the job.

Flow control (docs/flow-control.md): no job of the consumer's paused queue is claimed, and the
jobs whose types have a limit in force are claimed in a group of their own, in one transaction
that takes each slot's lock once, counts it once and claims what fits in one ``CLAIM_JOBS``
(exactly: the slots and rate tokens are taken under their locks); either way a job that may not
start is held (put back, due later, attempts untouched). A claim refused for a pause or a
runtime limit the consumer had not read yet, and the rare request the group leaves unanswered,
takes a transaction of its own.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import TextClause
from sqlalchemy.ext.asyncio import AsyncConnection

from jobrelay.core.execution import (
    AttemptTrace,
    Claimed,
    ClaimResult,
    ClaimRules,
    Deferred,
    DeferResult,
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
from jobrelay.core.failures import Failure
from jobrelay.core.flow import Limit, limit_key
from jobrelay.core.jobs import Cancelled, Job, Outcome, Quarantine, RetryLater, Succeeded
from jobrelay.core.states import JobEvent, JobState
from jobrelay.db import queries as q
from jobrelay.db.group_commit import GroupCommit
from jobrelay.db.rows import limit_from_row, steps_from_json
from jobrelay.db.store import Store, job_from_row

_EXHAUSTED_TEXT = "no attempts left: earlier attempts crashed or lost their lease"


@dataclass(frozen=True)
class _CancelPoll:
    job_id: uuid.UUID
    lease_token: uuid.UUID


@dataclass(frozen=True)
class _ClaimRequest:
    job_id: uuid.UUID
    lease_token: uuid.UUID
    lease_seconds: float
    detail: str | None
    job_type: str | None


def finish_statement(requests: Sequence[_FinishRequest]) -> TextClause:
    """``FINISH_PLAIN_JOBS`` for a group in which no job is a workflow's or a child: the
    workflow release (the fragment dependents_of) would find no edge to follow. One related job
    and the whole group takes ``FINISH_JOBS``, which finishes plain jobs just as well."""
    return q.FINISH_JOBS if any(r.related for r in requests) else q.FINISH_PLAIN_JOBS


@dataclass(frozen=True)
class _LimitedClaim:
    request: _ClaimRequest
    rules: ClaimRules


@dataclass
class _Slot:
    """One concurrency slot (a type, and a key when per key) asked for by a group's claims."""

    job_type: str
    key: str
    limit: Limit
    claims: list[tuple[int, Job]] = dataclasses.field(default_factory=list)  # (position, job)


@dataclass(frozen=True)
class _FinishRequest:
    """One row of ``FINISH_JOBS``: a decided outcome, the fields it does not use left None."""

    job_id: uuid.UUID
    lease_token: uuid.UUID
    target: JobState
    result: str | None = None  # JSON
    retry_delay: float | None = None  # seconds after the database's now()
    error_code: str | None = None
    error: str | None = None
    failure: str | None = None  # JSON
    related: bool = True  # a workflow's job or a child, as far as the caller knows
    sequenced: bool = False  # a job of a sequence: its end may release the next

    @classmethod
    def of(cls, job_id: uuid.UUID, lease_token: uuid.UUID, outcome: Outcome) -> _FinishRequest:
        match outcome:
            case Succeeded(result=result):
                return cls(job_id, lease_token, JobState.SUCCEEDED, result=json.dumps(result))
            case RetryLater(delay_seconds=delay, error_code=code, error=error, failure=failure):
                return cls(
                    job_id,
                    lease_token,
                    JobState.RETRYING,
                    retry_delay=delay,
                    error_code=code,
                    error=error,
                    failure=_failure_json(failure),
                )
            case Quarantine(reason_code=code, error=error, failure=failure):
                return cls(
                    job_id,
                    lease_token,
                    JobState.QUARANTINED,
                    error_code=code,
                    error=error,
                    failure=_failure_json(failure),
                )
            case Cancelled():
                return cls(job_id, lease_token, JobState.CANCELLED)
        raise AssertionError(f"unknown outcome {outcome!r}")  # pragma: no cover


# Expired leases of one slot freed per exact claim: more than any limit sensibly set.
SLOT_RESCUE_LIMIT = 1000


class PgExecutionStore:
    """``core.execution.ExecutionStore`` on PostgreSQL; claims and final writes go in groups
    of at most ``GROUP_SIZE``, one group of each in flight (``db/group_commit.py``)."""

    GROUP_SIZE = 64

    def __init__(self, store: Store, *, queue: str | None = "default") -> None:
        """``queue``: the short name of the consumer's queue (``--queue``), whose pause its
        claims keep; None: claims keep no pause."""
        self.store = store
        self.queue = queue
        self._claims = GroupCommit(self._claim_group, max_size=self.GROUP_SIZE)
        self._limited_claims = GroupCommit(self._claim_limited_group, max_size=self.GROUP_SIZE)
        self._finishes = GroupCommit(self._finish_group, max_size=self.GROUP_SIZE)
        self._cancel_polls = GroupCommit(self._cancel_poll_group, max_size=4 * self.GROUP_SIZE)

    async def close(self) -> None:
        """Wait for the groups in flight."""
        await self._cancel_polls.close()
        await self._claims.close()
        await self._limited_claims.close()
        await self._finishes.close()

    async def claim(
        self,
        job_id: uuid.UUID,
        lease: LeaseTerms,
        *,
        detail: str | None = None,
        job_type: str | None = None,
        rules: ClaimRules | None = None,
    ) -> ClaimResult:
        """Claim the job for one attempt, or say why not (and journal/quarantine accordingly),
        or hold it (its queue paused, its type or key at a limit).

        Calling it again with the same token after a lost answer is safe: a job already running
        under this token is reported as claimed.
        """
        rules = rules or ClaimRules()
        request = _ClaimRequest(job_id, lease.token, lease.seconds, detail, job_type)
        if not rules.limited:
            row = await self._claims.submit(request)
            if row is not None:
                claimed = _claimed(row, lease.token)
                return await self._steps_read_again(claimed) if claimed.reclaimed else claimed
        else:
            answer = await self._limited_claims.submit(_LimitedClaim(request, rules))
            if answer is not None:
                return answer
        # The rare path: claim, hold or find out why not, in a transaction of its own.
        async with self.store.transaction() as connection:
            (answer,) = await self._claim_exactly(connection, [_LimitedClaim(request, rules)])
            if answer is None:  # not expected: a single claim is always answered
                raise AssertionError(f"claim of job {job_id} left unanswered")
            return answer

    async def _steps_read_again(self, claimed: Claimed) -> Claimed:
        """A job taken from an expired lease, with its steps read again, a statement after the
        claim: a step its old holder recorded at that instant held the job's row (FOR SHARE,
        ``RECORD_STEPS``) until it committed, so the claim waited for it, but the claim's own
        read of the steps is of the snapshot its statement began with. A step recorded is
        never run again."""
        row = await self.store.fetch_one(q.STEPS_OF_JOB, job_id=claimed.job.id, with_values=True)
        steps = None if row is None or row.steps is None else steps_from_json(row.steps)
        return dataclasses.replace(claimed, job=dataclasses.replace(claimed.job, steps=steps))

    async def runtime_limits(self) -> dict[str, Limit]:
        """The runtime limits (``type_limits``) by type, for ``consumer/limits.py``."""
        rows = await self.store.fetch_all(q.FLOW_CONTROLS)
        return {row.name: limit_from_row(row) for row in rows if row.kind == "limit"}

    async def _claim_group(self, requests: Sequence[_ClaimRequest]) -> list[Any | None]:
        """One statement claims every job of the group it can (autocommit: one round trip);
        each request gets its row, or None when its job was not claimed under its token."""
        rows = await self.store.fetch_all(q.CLAIM_JOBS, **self._claim_params(requests))
        claimed = {(row.id, row.lease_token): row for row in rows}
        return [claimed.get((r.job_id, r.lease_token)) for r in requests]

    async def _claim_limited_group(
        self, claims: Sequence[_LimitedClaim]
    ) -> list[ClaimResult | None]:
        """The claims of jobs under a limit that arrived together, in one transaction; None
        for a request the group leaves to a transaction of its own."""
        async with self.store.transaction() as connection:
            return await self._claim_exactly(connection, claims)

    def _claim_params(
        self, requests: Sequence[_ClaimRequest], *, checked: bool = False
    ) -> dict[str, Any]:
        """CLAIM_JOBS' arrays; ``checked``: their types' limits were checked by the caller's
        transaction."""
        return {
            "ids": [r.job_id for r in requests],
            "lease_tokens": [r.lease_token for r in requests],
            "lease_seconds": [r.lease_seconds for r in requests],
            "details": [r.detail for r in requests],
            "types": [r.job_type for r in requests],
            "checked": [checked for _ in requests],
            "queue": self.queue,
        }

    async def _finish_group(self, requests: Sequence[_FinishRequest]) -> list[JobState | None]:
        """One statement carries out every decided outcome of the group whose lease is still
        held; each request learns the state its row was moved to (None: not moved). A group
        with a job of a sequence releases the next job of each in the same transaction
        (``_finish_and_release``)."""
        params = {
            "ids": [r.job_id for r in requests],
            "lease_tokens": [r.lease_token for r in requests],
            "targets": [r.target.value for r in requests],
            "results": [r.result for r in requests],
            "retry_delays": [r.retry_delay for r in requests],
            "error_codes": [r.error_code for r in requests],
            "errors": [r.error for r in requests],
            "failures": [r.failure for r in requests],
        }
        if any(r.sequenced for r in requests):
            rows = await self._finish_and_release(requests, params)
        else:
            rows = await self.store.fetch_all(finish_statement(requests), **params)
        # Keyed by outcome too: of two reports under one token (a completion and a cancel in
        # one group), only the one the statement made is answered as moved.
        moved = {(row.id, row.asked_token, row.target): JobState(row.ends_as) for row in rows}
        return [moved.get((r.job_id, r.lease_token, r.target.value)) for r in requests]

    async def _finish_and_release(
        self, requests: Sequence[_FinishRequest], params: dict[str, Any]
    ) -> list[Any]:
        """The finish, then, under the locks of the sequences of the jobs it moved, the release
        of the job now first in each (docs/flow-control.md, "Sequences"): one transaction, so a
        finish is never committed without the release it makes."""
        async with self.store.fast_transaction() as run:
            rows = await run(finish_statement(requests), params)
            moved = {row.id for row in rows}
            ids = {"ids": [r.job_id for r in requests if r.sequenced and r.job_id in moved]}
            if ids["ids"]:
                await run(q.TAKE_SEQUENCE_LOCKS, ids)
                await run(q.RELEASE_SEQUENCES, ids)
        return rows

    async def _cancel_poll_group(self, requests: Sequence[_CancelPoll]) -> list[bool]:
        """One read for the group: which of its jobs, under the asking lease, have a cancel
        requested."""
        rows = await self.store.fetch_all(
            q.CANCELS_REQUESTED, ids=list({r.job_id for r in requests})
        )
        requested = {(row.id, row.lease_token) for row in rows}
        return [(r.job_id, r.lease_token) in requested for r in requests]

    async def _claim_exactly(
        self, connection: AsyncConnection, claims: Sequence[_LimitedClaim]
    ) -> list[ClaimResult | None]:
        """Claim the jobs in this transaction, after the checks that must hold exactly: the
        queue not paused, a slot and a rate token under each type's limit in force (a runtime
        row, else the request's ``code_limit``); or hold each that may not start; or say why it
        cannot be claimed. None: a request left to a transaction of its own (a second request
        for a job of the group, or a second expired lease of one slot)."""
        answers: list[ClaimResult | None] = [None] * len(claims)
        ids = list(dict.fromkeys(c.request.job_id for c in claims))
        rows = (
            await connection.execute(q.CLAIM_CANDIDATES, {"ids": ids, "queue": self.queue})
        ).all()
        candidates = {row.id: row for row in rows}
        seen: set[uuid.UUID] = set()
        slots: dict[tuple[str, str], _Slot] = {}
        free_to_start: list[tuple[int, Job, Limit | None]] = []  # no concurrency limit
        for position, claim in enumerate(claims):
            request = claim.request
            if request.job_id in seen:
                continue  # a duplicate delivery in the group: asked again alone, after it
            seen.add(request.job_id)
            candidate = candidates.get(request.job_id)
            if candidate is None:
                answers[position] = Refused(Refusal.UNKNOWN_JOB)
                continue
            job = job_from_row(candidate)
            if job.state == JobState.RUNNING and job.lease_token == request.lease_token:
                answers[position] = Claimed(job, request.lease_token, reclaimed=False)  # ours
            elif request.job_type is not None and job.type != request.job_type:
                answers[position] = Refused(Refusal.OTHER_TYPE, job)  # the caller decides
            elif not candidate.claimable:
                answers[position] = await self._unclaimable(connection, job)
            elif candidate.queue_paused:
                answers[position] = await self._hold(
                    connection, job, HoldReason.PAUSED, 0.0, f"queue {self.queue!r} is paused"
                )
            else:
                runtime = candidate.has_runtime_limit
                limit = limit_from_row(candidate) if runtime else claim.rules.code_limit
                if limit is None or limit.concurrency is None:
                    free_to_start.append((position, job, limit))
                    continue
                key = limit_key(limit, candidate.concurrency_key)
                slot = slots.setdefault((job.type, key), _Slot(job.type, key, limit))
                if job.state == JobState.RUNNING and any(
                    other.state == JobState.RUNNING for _, other in slot.claims
                ):
                    continue  # one expired lease per slot is spared its rescue: asked alone
                slot.claims.append((position, job))
        starting = free_to_start + await self._take_slots(connection, claims, slots, answers)
        await self._take_tokens_and_claim(connection, claims, starting, answers)
        return answers

    async def _take_slots(
        self,
        connection: AsyncConnection,
        claims: Sequence[_LimitedClaim],
        slots: dict[tuple[str, str], _Slot],
        answers: list[ClaimResult | None],
    ) -> list[tuple[int, Job, Limit | None]]:
        """Lock every slot once (in one statement), free its expired leases, count it once:
        the claims that fit its free slots, higher priority first then in arrival order; the
        others held (their ``answers``)."""
        if not slots:
            return []
        chosen = list(slots.values())
        types, keys = [s.job_type for s in chosen], [s.key for s in chosen]
        await connection.execute(q.TAKE_SLOT_LOCKS, {"types": types, "keys": keys})
        except_ids = [job.id for slot in chosen for _, job in slot.claims]
        counts = {
            (row.type, row.key): row
            for row in await connection.execute(
                q.RUNNING_IN_SLOTS,
                {
                    "types": types,
                    "keys": keys,
                    "per_keys": [s.limit.per_key for s in chosen],
                    "except_ids": except_ids,
                },
            )
        }
        starting: list[tuple[int, Job, Limit | None]] = []
        for slot in chosen:
            count = counts[(slot.job_type, slot.key)]
            if count.expired:
                await self._rescue_expired(connection, slot)
            free = max(slot.limit.concurrency or 0, 0) - count.running
            ordered = sorted(slot.claims, key=lambda claim: (-claim[1].priority, claim[0]))
            for position, job in ordered[: max(free, 0)]:
                starting.append((position, job, slot.limit))
            for position, job in ordered[max(free, 0) :]:
                detail = f"concurrency limit {slot.limit.concurrency} reached{_of_key(slot)}"
                answers[position] = await self._hold(
                    connection,
                    job,
                    HoldReason.CONCURRENCY,
                    claims[position].rules.hold_seconds,
                    detail,
                )
        return starting

    async def _rescue_expired(self, connection: AsyncConnection, slot: _Slot) -> None:
        """The slot's jobs whose lease expired (their consumer died) go back to queued, with
        their lease_expired event, before the claims: the slot they free is in the journal
        before the claim that takes it, and at most the limit is ever running. The group's own
        job of the slot that holds an expired lease is spared: it is being claimed (a second one,
        rarer still, is rescued, then asked alone after the group, ``_claim_exactly``)."""
        running = [job.id for _, job in slot.claims if job.state == JobState.RUNNING]
        await connection.execute(
            q.RESCUE_EXPIRED_LEASES,
            {
                "type": slot.job_type,
                "key": slot.key,
                "limit": SLOT_RESCUE_LIMIT,
                "except_id": running[0] if running else slot.claims[0][1].id,
                "per_key": slot.limit.per_key,
                "detail": "lease expired; its concurrency slot freed for a claim",
            },
        )

    async def _take_tokens_and_claim(
        self,
        connection: AsyncConnection,
        claims: Sequence[_LimitedClaim],
        starting: list[tuple[int, Job, Limit | None]],
        answers: list[ClaimResult | None],
    ) -> None:
        """A rate token for each job that may start under a rate (in the order of the slots,
        as every claim takes them), the ones without held; then one CLAIM_JOBS for the rest."""
        to_claim: list[tuple[int, Job]] = []
        for position, job, limit in sorted(starting, key=lambda s: (s[1].type, _key(s), s[0])):
            if limit is None or limit.rate is None:
                to_claim.append((position, job))
                continue
            slot = {"type": job.type, "key": limit_key(limit, job.concurrency_key)}
            token = {**slot, "interval": limit.rate.interval}
            if (await connection.execute(q.TAKE_TYPE_TOKEN, token)).first() is not None:
                to_claim.append((position, job))
                continue
            wait = (await connection.execute(q.TYPE_TOKEN_WAIT, slot)).scalar_one()
            of_key = f" for key {slot['key'][:100]!r}" if limit.per_key else ""
            answers[position] = await self._hold(
                connection, job, HoldReason.RATE, wait, f"rate {limit.rate} reached{of_key}"
            )
        if not to_claim:
            return
        requests = [claims[position].request for position, _ in to_claim]
        params = self._claim_params(requests, checked=True)
        rows = {row.id: row for row in await connection.execute(q.CLAIM_JOBS, params)}
        for position, job in to_claim:
            row = rows.get(job.id)
            answers[position] = (
                _claimed(row, claims[position].request.lease_token)
                if row is not None
                else await self._unclaimable(connection, job)  # not expected: its row is locked
            )

    async def _hold(
        self,
        connection: AsyncConnection,
        job: Job,
        reason: HoldReason,
        delay_seconds: float,
        detail: str,
    ) -> ClaimResult:
        """Put the due job back (HOLD_JOB): due after ``delay_seconds``, attempts untouched."""
        params = {"id": job.id, "delay_seconds": delay_seconds, "detail": f"{reason}: {detail}"}
        row = (await connection.execute(q.HOLD_JOB, params)).first()
        if row is None:  # not expected: its row is locked and was found due
            return await self._unclaimable(connection, job)
        return Held(reason, row.available_at, detail, job)

    async def _unclaimable(self, connection: AsyncConnection, job: Job) -> ClaimResult:
        """A job that cannot be claimed: quarantined when it has no attempts left, else a
        duplicate delivery (finished, running under a live lease, or not yet due)."""
        exhausted = (
            await connection.execute(
                q.QUARANTINE_EXHAUSTED, {"id": job.id, "error": _EXHAUSTED_TEXT}
            )
        ).first()
        if exhausted is not None:
            return Refused(Refusal.EXHAUSTED, job)
        await self._record(
            connection, job.id, JobEvent.DUPLICATE_DELIVERY, job.attempts, f"job {job.state}"
        )
        return Refused(Refusal.DUPLICATE, job)

    async def defer_unknown_type(self, job_id: uuid.UUID, put_back: PutBack) -> DeferResult:
        """Put a due job of an unknown type back (due after ``delay_seconds``, a new outbox row,
        attempts untouched), or quarantine it once the type stayed unknown past the patience.
        Neither: say why (and journal a duplicate delivery)."""
        name, patience = put_back.job_type[:100], put_back.patience_seconds
        row = await self.store.fetch_one(
            q.DEFER_UNKNOWN_TYPE,
            id=job_id,
            type=put_back.job_type,
            delay_seconds=put_back.delay_seconds,
            patience_seconds=patience,
            detail=put_back.detail,
            deferred_error=f"no consumer that knows job type {name!r} has received it yet",
            quarantined_error=(
                f"job type {name!r} stayed unknown to the consumers for over {patience:g}s"
            ),
        )
        if row is not None:
            return Deferred(row.patience_over, row.available_at, row.type_unknown_since)
        async with self.store.transaction() as connection:  # the rare path: why not?
            current = (
                await connection.execute(
                    q.JOB_BY_ID, {"id": job_id, "client_id": None, "steps": None}
                )
            ).first()
            if current is None:
                return Refused(Refusal.UNKNOWN_JOB)
            job = job_from_row(current)
            if job.type != put_back.job_type:
                return Refused(Refusal.OTHER_TYPE, job)
            await self._record(
                connection, job_id, JobEvent.DUPLICATE_DELIVERY, job.attempts, f"job {job.state}"
            )
            return Refused(Refusal.DUPLICATE, job)

    async def renew(self, job_id: uuid.UUID, lease: LeaseTerms) -> Renewal:
        """Extend the lease, and learn in the same statement whether a cancel was requested;
        ``LOST`` when it is no longer ours (expired or taken over)."""
        row = await self.store.fetch_one(
            q.RENEW_LEASE, id=job_id, lease_token=lease.token, lease_seconds=lease.seconds
        )
        if row is None:
            return Renewal.LOST
        return Renewal.CANCEL_REQUESTED if row.cancel_requested else Renewal.HELD

    async def cancel_requested(self, job_id: uuid.UUID, lease: LeaseTerms) -> bool:
        """Was a cancel of the job requested while this lease holds it? One read for every
        job of this consumer that asks in the same turn of the event loop."""
        return await self._cancel_polls.submit(_CancelPoll(job_id, lease.token))

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
        """Carry out a decided outcome in one transaction, fenced by the lease token. A retry
        of a job whose cancel was requested ends it cancelled instead (``Finish.CANCELLED``).
        ``related``: the job may be a workflow's or a child (``finish_statement``);
        ``sequenced``: a job of a sequence, whose end may release the next."""
        ends_as = await self._write(job_id, lease_token, outcome, related, sequenced)
        if ends_as is not None:
            if ends_as is JobState.CANCELLED and not isinstance(outcome, Cancelled):
                return Finish.CANCELLED
            return Finish.WRITTEN
        async with self.store.transaction() as connection:  # the rare path: why not?
            trace = (await connection.execute(q.ATTEMPT_TRACE, {"id": job_id})).first()
            if trace is not None and already_done(_attempt_trace(trace), attempt, outcome):
                return Finish.ALREADY
            await self._record(
                connection,
                job_id,
                JobEvent.STALE_COMPLETION_REJECTED,
                attempt,
                f"{outcome_name(outcome)} by attempt {attempt} rejected: lease no longer held",
            )
            return Finish.STALE

    async def _write(
        self,
        job_id: uuid.UUID,
        lease_token: uuid.UUID,
        outcome: Outcome,
        related: bool,
        sequenced: bool,
    ) -> JobState | None:
        """State, result or retry (a new outbox row), error and journal: one statement for the
        group, fenced by each row's token (``FINISH_JOBS``). The state it moved the job to, or
        None when the lease is no longer ours."""
        request = _FinishRequest.of(job_id, lease_token, outcome)
        return await self._finishes.submit(
            dataclasses.replace(request, related=related, sequenced=sequenced)
        )

    async def release(self, job_id: uuid.UUID, *, lease_token: uuid.UUID, detail: str) -> bool:
        """Give a running job back (shutdown): `queued` again, the attempt still counted."""
        row = await self.store.fetch_one(
            q.RELEASE_LEASE, id=job_id, lease_token=lease_token, detail=detail
        )
        return row is not None

    async def parent_results(self, job_id: uuid.UUID) -> dict[str, Any]:
        """The results of a workflow job's parents, by ref (one read, on claim)."""
        rows = await self.store.fetch_all(q.PARENT_RESULTS, job_id=job_id)
        return {row.ref: row.result for row in rows}

    async def report_progress(self, reports: Sequence[ProgressReport]) -> None:
        """One statement for every report of the group, each fenced by its lease token."""
        if not reports:
            return
        await self.store.fetch_all(
            q.REPORT_PROGRESS,
            ids=[r.job_id for r in reports],
            lease_tokens=[r.lease_token for r in reports],
            progress=[json.dumps(r.as_json()) for r in reports],
        )

    @staticmethod
    async def _record(
        connection: AsyncConnection, job_id: uuid.UUID, event: JobEvent, attempt: int, detail: str
    ) -> None:
        await connection.execute(
            q.RECORD_EVENT,
            {"job_id": job_id, "event": event.value, "attempt": attempt, "detail": detail},
        )


def _of_key(slot: _Slot) -> str:
    return f" for key {slot.key[:100]!r}" if slot.limit.per_key else ""


def _key(starting: tuple[int, Job, Limit | None]) -> str:
    _, job, limit = starting
    return "" if limit is None else limit_key(limit, job.concurrency_key)


def _claimed(row: Any, lease_token: uuid.UUID) -> Claimed:
    return Claimed(job_from_row(row), lease_token, reclaimed=row.previous_state == JobState.RUNNING)


def _failure_json(failure: Failure | None) -> str | None:
    return None if failure is None else json.dumps(failure.as_json())


def _attempt_trace(row: Any) -> AttemptTrace:
    return AttemptTrace(JobState(row.state), row.attempts, row.result_attempt)
