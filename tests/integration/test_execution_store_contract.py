"""The execution store's contract: each scenario is written once against the ``ExecutionStore``
port (``core/execution.py``) and runs on both of its implementations, the tests' in-memory
store (``tests/support/consumer_fakes.py::InMemoryExecutionStore``, which the worker's unit
tests run on) and ``db/execution_store.py::PgExecutionStore`` on a real migrated database —
as River runs one driver conformance suite on each of its drivers.

PostgreSQL is the truth: when the two disagree, the fake is wrong. Each scenario checks what
the port answers and what it left behind: the job, its journal, its outbox rows, its result
(``tests/support/execution_sides.py`` reads them on each side).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import datetime, timedelta

import pytest

from jobrelay.core.execution import (
    Claimed,
    ClaimRules,
    Deferred,
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
)
from jobrelay.core.flow import Limit, Rate
from jobrelay.core.jobs import Cancelled, Outcome, Quarantine, RetryLater, Succeeded
from jobrelay.core.journal import QuarantineMarker
from jobrelay.core.states import JobEvent, JobState
from jobrelay.db.execution_store import PgExecutionStore
from jobrelay.db.store import Store
from tests.support.consumer_fakes import InMemoryExecutionStore
from tests.support.execution_sides import MemorySide, PostgresSide, Side
from tests.support.ports import port_mismatches

LEASE = 30.0
E = JobEvent


@pytest.fixture
async def postgres_side(store: Store) -> AsyncIterator[PostgresSide]:
    side = PostgresSide(store)
    yield side
    await side.close()


@pytest.fixture(params=["memory", "postgresql"])
def side(request: pytest.FixtureRequest) -> Side:
    """Each scenario once per store; the PostgreSQL side on the test's fresh database (the
    memory side needs no server)."""
    if request.param == "memory":
        return MemorySide()
    found: PostgresSide = request.getfixturevalue("postgres_side")
    return found


def lease() -> LeaseTerms:
    return LeaseTerms.fresh(LEASE)


def between(value: datetime | None, before: datetime, after: datetime, seconds: float) -> bool:
    """Was ``value`` written as "now + seconds" by a clock read between ``before`` and
    ``after``? (The same instant on the fake's hand-driven clock.)"""
    slack = timedelta(milliseconds=1)  # the database's clock is read in microseconds
    delay = timedelta(seconds=seconds)
    return value is not None and before + delay - slack <= value <= after + delay + slack


async def claimed(side: Side, job_id: uuid.UUID, terms: LeaseTerms | None = None) -> LeaseTerms:
    """Claim the job, which must be claimed; the lease it is held under."""
    terms = terms or lease()
    answer = await side.port.claim(job_id, terms)
    assert isinstance(answer, Claimed), answer
    return terms


# --- the port itself ---------------------------------------------------------------------------


@pytest.mark.parametrize("implementation", [InMemoryExecutionStore, PgExecutionStore])
def test_both_stores_have_every_method_of_the_port_with_its_parameters(
    implementation: type,
) -> None:
    """What mypy checked while the fake lived in the package: it is a whole ExecutionStore."""
    assert port_mismatches(ExecutionStore, implementation) == []


# --- claim ---------------------------------------------------------------------------------------


async def test_a_due_queued_job_is_claimed_its_attempt_counted_under_the_callers_lease(
    side: Side,
) -> None:
    job_id = await side.add()
    terms = lease()
    before = await side.now()

    answer = await side.port.claim(job_id, terms, detail="consumer c-1")

    after = await side.now()
    assert isinstance(answer, Claimed)
    assert (answer.lease_token, answer.reclaimed) == (terms.token, False)
    job = await side.job(job_id)
    assert (job.state, job.attempts, job.lease_token) == (JobState.RUNNING, 1, terms.token)
    assert answer.job.attempts == 1
    assert between(job.lease_until, before, after, LEASE)
    assert await side.events(job_id) == [E.CLAIMED]


async def test_a_due_retrying_job_is_claimed_for_its_next_attempt(side: Side) -> None:
    job_id = await side.add(state=JobState.RETRYING, attempts=1)
    await claimed(side, job_id)
    job = await side.job(job_id)
    assert (job.state, job.attempts) == (JobState.RUNNING, 2)


async def test_a_claim_asked_again_with_the_same_token_is_the_same_claim(side: Side) -> None:
    """A lost answer, asked again: claimed, nothing counted twice."""
    job_id = await side.add()
    terms = await claimed(side, job_id)

    again = await side.port.claim(job_id, terms)

    assert isinstance(again, Claimed) and again.lease_token == terms.token
    assert (await side.job(job_id)).attempts == 1
    assert await side.events(job_id) == [E.CLAIMED]


async def test_a_job_not_yet_due_is_refused_as_a_duplicate_and_left_alone(side: Side) -> None:
    job_id = await side.add(due_in=600)
    before = await side.job(job_id)

    answer = await side.port.claim(job_id, lease())

    assert isinstance(answer, Refused) and answer.reason is Refusal.DUPLICATE
    after = await side.job(job_id)
    assert (after.state, after.attempts, after.available_at) == (
        JobState.QUEUED,
        0,
        before.available_at,
    )
    assert await side.events(job_id) == [E.DUPLICATE_DELIVERY]


async def test_a_job_running_under_another_live_lease_is_refused(side: Side) -> None:
    holder = uuid.uuid4()
    job_id = await side.add(state=JobState.RUNNING, lease_token=holder)

    answer = await side.port.claim(job_id, lease())

    assert isinstance(answer, Refused) and answer.reason is Refusal.DUPLICATE
    job = await side.job(job_id)
    assert (job.state, job.attempts, job.lease_token) == (JobState.RUNNING, 1, holder)
    assert await side.events(job_id) == [E.DUPLICATE_DELIVERY]


@pytest.mark.parametrize(
    "state",
    [JobState.SUCCEEDED, JobState.QUARANTINED, JobState.CANCELLED, JobState.WAITING],
)
async def test_a_finished_or_waiting_job_is_refused_as_a_duplicate(
    side: Side, state: JobState
) -> None:
    job_id = await side.add(state=state)

    answer = await side.port.claim(job_id, lease())

    assert isinstance(answer, Refused) and answer.reason is Refusal.DUPLICATE
    assert (await side.job(job_id)).state is state
    assert await side.events(job_id) == [E.DUPLICATE_DELIVERY]


async def test_an_unknown_job_is_refused_as_unknown(side: Side) -> None:
    answer = await side.port.claim(uuid.uuid4(), lease())
    assert answer == Refused(Refusal.UNKNOWN_JOB)


async def test_a_job_of_another_type_than_asked_is_refused_untouched(side: Side) -> None:
    job_id = await side.add("demo.sleep")

    answer = await side.port.claim(job_id, lease(), job_type="demo.fail")

    assert isinstance(answer, Refused) and answer.reason is Refusal.OTHER_TYPE
    assert answer.job is not None and answer.job.type == "demo.sleep"
    job = await side.job(job_id)
    assert (job.state, job.attempts) == (JobState.QUEUED, 0)
    assert await side.events(job_id) == []


async def test_a_job_of_the_type_asked_is_claimed(side: Side) -> None:
    job_id = await side.add("demo.sleep")
    answer = await side.port.claim(job_id, lease(), job_type="demo.sleep")
    assert isinstance(answer, Claimed)


async def test_a_due_job_with_no_attempts_left_is_quarantined_instead_of_claimed(
    side: Side,
) -> None:
    job_id = await side.add(attempts=3, max_attempts=3)

    answer = await side.port.claim(job_id, lease())

    assert isinstance(answer, Refused) and answer.reason is Refusal.EXHAUSTED
    job = await side.job(job_id)
    assert (job.state, job.attempts) == (JobState.QUARANTINED, 3)
    assert job.last_error_code == QuarantineMarker.ATTEMPTS_EXHAUSTED
    assert job.finished_at is not None and job.lease_token is None
    assert await side.events(job_id) == [E.QUARANTINED]


async def test_a_job_whose_lease_expired_is_reclaimed_under_the_new_lease(side: Side) -> None:
    job_id = await side.add(state=JobState.RUNNING, attempts=1, lease_expired=True)
    terms = lease()

    answer = await side.port.claim(job_id, terms)

    assert isinstance(answer, Claimed) and answer.reclaimed
    job = await side.job(job_id)
    assert (job.state, job.attempts, job.lease_token) == (JobState.RUNNING, 2, terms.token)
    assert await side.events(job_id) == [E.LEASE_EXPIRED, E.CLAIMED]


async def test_a_job_whose_last_lease_expired_is_quarantined_as_exhausted(side: Side) -> None:
    job_id = await side.add(state=JobState.RUNNING, attempts=3, lease_expired=True)

    answer = await side.port.claim(job_id, lease())

    assert isinstance(answer, Refused) and answer.reason is Refusal.EXHAUSTED
    job = await side.job(job_id)
    assert (job.state, job.lease_token) == (JobState.QUARANTINED, None)
    assert job.last_error_code == QuarantineMarker.ATTEMPTS_EXHAUSTED
    assert await side.events(job_id) == [E.QUARANTINED]


# --- holds: a paused queue, a concurrency limit, a rate --------------------------------------


@pytest.mark.parametrize("state", [JobState.QUEUED, JobState.RETRYING])
async def test_a_job_of_a_paused_queue_is_held_then_claimed_after_the_resume(
    side: Side, state: JobState
) -> None:
    job_id = await side.add(state=state, attempts=1)
    await side.pause()
    before = await side.now()

    answer = await side.port.claim(job_id, lease())

    after = await side.now()
    assert isinstance(answer, Held) and answer.reason is HoldReason.PAUSED
    assert between(answer.available_at, before, after, 0)
    job = await side.job(job_id)
    assert (job.state, job.attempts, job.available_at) == (state, 1, answer.available_at)
    assert await side.outbox(job_id) == [answer.available_at]  # its message again, due now
    assert await side.events(job_id) == [E.HELD]

    await side.resume()
    await claimed(side, job_id)


def limited(limit: Limit, hold_seconds: float = 1.5) -> ClaimRules:
    """The rules of a type whose code states ``limit``."""
    return ClaimRules(limited=True, code_limit=limit, hold_seconds=hold_seconds)


@pytest.mark.parametrize("source", ["code", "runtime"])
async def test_a_concurrency_limit_lets_n_run_holds_the_next_and_a_freed_slot_lets_it_in(
    side: Side, source: str
) -> None:
    limit = Limit(concurrency=2)
    rules = limited(limit)
    if source == "runtime":
        await side.set_limit("demo.sleep", limit)
        rules = ClaimRules(hold_seconds=1.5)  # the consumer has not read the runtime row yet
    first, second, third = [await side.add() for _ in range(3)]
    first_lease = lease()
    assert isinstance(await side.port.claim(first, first_lease, rules=rules), Claimed)
    assert isinstance(await side.port.claim(second, lease(), rules=rules), Claimed)
    before = await side.now()

    answer = await side.port.claim(third, lease(), rules=rules)

    after = await side.now()
    assert isinstance(answer, Held) and answer.reason is HoldReason.CONCURRENCY
    assert answer.detail == "concurrency limit 2 reached"
    assert between(answer.available_at, before, after, 1.5)
    job = await side.job(third)
    assert (job.state, job.attempts) == (JobState.QUEUED, 0)
    assert await side.outbox(third) == [answer.available_at]
    assert await side.events(third) == [E.HELD]

    finished = await side.port.finish(
        first, lease_token=first_lease.token, attempt=1, outcome=Succeeded({})
    )
    assert finished is Finish.WRITTEN
    # The held job is due later; the next job that comes takes the freed slot.
    assert isinstance(await side.port.claim(await side.add(), lease(), rules=rules), Claimed)


async def test_a_limit_per_key_counts_each_key_on_its_own(side: Side) -> None:
    rules = limited(Limit(concurrency=1, per_key=True))
    a1, a2, b1 = (
        await side.add(concurrency_key="a"),
        await side.add(concurrency_key="a"),
        await side.add(concurrency_key="b"),
    )
    assert isinstance(await side.port.claim(a1, lease(), rules=rules), Claimed)

    held = await side.port.claim(a2, lease(), rules=rules)

    assert isinstance(held, Held) and held.reason is HoldReason.CONCURRENCY
    assert held.detail == "concurrency limit 1 reached for key 'a'"
    assert isinstance(await side.port.claim(b1, lease(), rules=rules), Claimed)


async def test_a_slot_whose_holder_lease_expired_is_freed_and_the_holder_queued_again(
    side: Side,
) -> None:
    rules = limited(Limit(concurrency=1))
    crashed = await side.add(state=JobState.RUNNING, attempts=1, lease_expired=True)
    waiting = await side.add()
    before = await side.now()

    answer = await side.port.claim(waiting, lease(), rules=rules)

    after = await side.now()
    assert isinstance(answer, Claimed)
    holder = await side.job(crashed)
    assert (holder.state, holder.attempts, holder.lease_token) == (JobState.QUEUED, 1, None)
    assert between(holder.available_at, before, after, 0)
    assert len(await side.outbox(crashed)) == 1  # its message again
    assert await side.events(crashed) == [E.LEASE_EXPIRED]


async def test_a_job_whose_lease_expired_found_at_the_limit_is_held_queued_again(
    side: Side,
) -> None:
    rules = limited(Limit(concurrency=1))
    await claimed(side, await side.add())
    abandoned = await side.add(state=JobState.RUNNING, attempts=1, lease_expired=True)

    answer = await side.port.claim(abandoned, lease(), rules=rules)

    assert isinstance(answer, Held) and answer.reason is HoldReason.CONCURRENCY
    job = await side.job(abandoned)
    assert (job.state, job.attempts, job.lease_token) == (JobState.QUEUED, 1, None)
    assert await side.events(abandoned) == [E.LEASE_EXPIRED, E.HELD]


async def test_a_rate_lets_one_start_per_interval_and_holds_the_next_until_its_token(
    side: Side,
) -> None:
    rules = limited(Limit(rate=Rate(1, 60)))
    first, second = await side.add(), await side.add()
    before = await side.now()
    assert isinstance(await side.port.claim(first, lease(), rules=rules), Claimed)

    answer = await side.port.claim(second, lease(), rules=rules)

    after = await side.now()
    assert isinstance(answer, Held) and answer.reason is HoldReason.RATE
    assert answer.detail == "rate 1/m reached"
    # Due when the next start is free: a minute after the first start.
    assert between(answer.available_at, before, after, 60)
    job = await side.job(second)
    assert (job.state, job.attempts) == (JobState.QUEUED, 0)
    assert await side.events(second) == [E.HELD]


async def test_a_rate_per_key_gives_each_key_its_own_tokens(side: Side) -> None:
    rules = limited(Limit(rate=Rate(1, 60), per_key=True))
    a1, a2, b1 = (
        await side.add(concurrency_key="a"),
        await side.add(concurrency_key="a"),
        await side.add(concurrency_key="b"),
    )
    assert isinstance(await side.port.claim(a1, lease(), rules=rules), Claimed)
    held = await side.port.claim(a2, lease(), rules=rules)
    assert isinstance(held, Held) and held.reason is HoldReason.RATE
    assert isinstance(await side.port.claim(b1, lease(), rules=rules), Claimed)


async def test_a_runtime_limit_of_neither_bound_lifts_the_codes_limit(side: Side) -> None:
    await side.set_limit("demo.sleep", Limit())
    rules = limited(Limit(concurrency=1))
    await claimed(side, await side.add())
    assert isinstance(await side.port.claim(await side.add(), lease(), rules=rules), Claimed)


# --- a job of a type the consumer does not know ------------------------------------------------


def put_back(delay: float = 5.0, patience: float = 3600.0) -> PutBack:
    return PutBack("demo.sleep", delay, patience, "consumer c-1 does not know it")


async def test_a_job_of_an_unknown_type_is_put_back_due_later_its_attempts_untouched(
    side: Side,
) -> None:
    job_id = await side.add()
    before = await side.now()

    answer = await side.port.defer_unknown_type(job_id, put_back(delay=5.0))

    after = await side.now()
    assert isinstance(answer, Deferred) and not answer.quarantined
    assert between(answer.available_at, before, after, 5.0)
    assert between(answer.unknown_since, before, after, 0)
    job = await side.job(job_id)
    assert (job.state, job.attempts, job.available_at) == (JobState.QUEUED, 0, answer.available_at)
    assert job.last_error_code == QuarantineMarker.UNKNOWN_JOB_TYPE
    assert job.last_error is not None
    assert await side.outbox(job_id) == [answer.available_at]
    assert await side.events(job_id) == [E.DEFERRED]


async def test_a_type_unknown_past_the_patience_is_quarantined(side: Side) -> None:
    job_id = await side.add()
    first = await side.port.defer_unknown_type(job_id, put_back(delay=0, patience=0))
    assert isinstance(first, Deferred) and not first.quarantined

    answer = await side.port.defer_unknown_type(job_id, put_back(delay=0, patience=0))

    assert isinstance(answer, Deferred) and answer.quarantined
    assert answer.unknown_since == first.unknown_since
    job = await side.job(job_id)
    assert (job.state, job.attempts) == (JobState.QUARANTINED, 0)
    assert job.last_error_code == QuarantineMarker.UNKNOWN_JOB_TYPE
    assert job.finished_at is not None
    assert len(await side.outbox(job_id)) == 1  # none for the quarantine
    assert await side.events(job_id) == [E.DEFERRED, E.QUARANTINED]


async def test_a_deferral_is_refused_for_an_unknown_job_another_type_or_a_job_not_due(
    side: Side,
) -> None:
    assert await side.port.defer_unknown_type(uuid.uuid4(), put_back()) == Refused(
        Refusal.UNKNOWN_JOB
    )
    other = await side.add("demo.fail")
    answer = await side.port.defer_unknown_type(other, put_back())
    assert isinstance(answer, Refused) and answer.reason is Refusal.OTHER_TYPE
    assert await side.events(other) == []
    later = await side.add(due_in=600)
    answer = await side.port.defer_unknown_type(later, put_back())
    assert isinstance(answer, Refused) and answer.reason is Refusal.DUPLICATE
    assert await side.events(later) == [E.DUPLICATE_DELIVERY]


async def test_a_claim_by_a_consumer_that_knows_the_type_forgets_it_was_unknown(
    side: Side,
) -> None:
    """The patience counts from the first deferral since the type was last known."""
    job_id = await side.add()
    await side.port.defer_unknown_type(job_id, put_back(delay=0))
    terms = await claimed(side, job_id)
    await side.port.finish(
        job_id,
        lease_token=terms.token,
        attempt=1,
        outcome=RetryLater(0, "transient_error", "again"),
    )
    before = await side.now()

    answer = await side.port.defer_unknown_type(job_id, put_back(delay=0, patience=0))

    after = await side.now()
    assert isinstance(answer, Deferred) and not answer.quarantined
    assert between(answer.unknown_since, before, after, 0)


# --- renew and cancel ----------------------------------------------------------------------------


async def test_the_holder_renews_its_lease_and_no_one_else_can(side: Side) -> None:
    job_id = await side.add()
    terms = await claimed(side, job_id)
    before = await side.now()

    assert await side.port.renew(job_id, LeaseTerms(terms.token, 90)) is Renewal.HELD

    after = await side.now()
    assert between((await side.job(job_id)).lease_until, before, after, 90)
    assert await side.port.renew(job_id, lease()) is Renewal.LOST
    assert await side.port.renew(uuid.uuid4(), lease()) is Renewal.LOST
    await side.port.finish(job_id, lease_token=terms.token, attempt=1, outcome=Succeeded({}))
    assert await side.port.renew(job_id, terms) is Renewal.LOST


async def test_an_expired_lease_is_not_renewed(side: Side) -> None:
    token = uuid.uuid4()
    job_id = await side.add(state=JobState.RUNNING, lease_token=token, lease_expired=True)
    assert await side.port.renew(job_id, LeaseTerms(token, LEASE)) is Renewal.LOST


async def test_a_cancel_requested_while_running_reaches_the_holder_only(side: Side) -> None:
    job_id = await side.add()
    terms = await claimed(side, job_id)
    assert not await side.port.cancel_requested(job_id, terms)

    await side.request_cancel(job_id)

    assert await side.port.cancel_requested(job_id, terms)
    assert not await side.port.cancel_requested(job_id, lease())
    assert await side.port.renew(job_id, terms) is Renewal.CANCEL_REQUESTED
    assert await side.events(job_id) == [E.CLAIMED, E.CANCEL_REQUESTED]


async def test_a_retry_of_a_job_whose_cancel_was_requested_ends_it_cancelled(side: Side) -> None:
    job_id = await side.add()
    terms = await claimed(side, job_id)
    await side.request_cancel(job_id)

    answer = await side.port.finish(
        job_id,
        lease_token=terms.token,
        attempt=1,
        outcome=RetryLater(5.0, "transient_error", "boom"),
    )

    assert answer is Finish.CANCELLED
    job = await side.job(job_id)
    assert (job.state, job.lease_token) == (JobState.CANCELLED, None)
    assert job.last_error_code == "transient_error"
    assert job.finished_at is not None
    assert await side.outbox(job_id) == []  # no retry scheduled
    assert await side.events(job_id) == [E.CLAIMED, E.CANCEL_REQUESTED, E.CANCELLED]


async def test_a_completion_racing_the_cancel_is_written(side: Side) -> None:
    job_id = await side.add()
    terms = await claimed(side, job_id)
    await side.request_cancel(job_id)

    answer = await side.port.finish(
        job_id, lease_token=terms.token, attempt=1, outcome=Succeeded({"done": 1})
    )

    assert answer is Finish.WRITTEN
    assert (await side.job(job_id)).state is JobState.SUCCEEDED
    assert await side.result(job_id) == ({"done": 1}, 1)


async def test_a_handler_stopped_for_its_cancel_ends_the_job_cancelled(side: Side) -> None:
    job_id = await side.add()
    terms = await claimed(side, job_id)
    await side.request_cancel(job_id)

    answer = await side.port.finish(job_id, lease_token=terms.token, attempt=1, outcome=Cancelled())

    assert answer is Finish.WRITTEN
    job = await side.job(job_id)
    assert (job.state, job.lease_token) == (JobState.CANCELLED, None)
    assert await side.result(job_id) is None


# --- finish ----------------------------------------------------------------------------------


async def test_a_completion_stores_the_result_of_its_attempt_and_clears_the_error(
    side: Side,
) -> None:
    job_id = await side.add(state=JobState.RETRYING, attempts=1, last_error_code="earlier")
    terms = await claimed(side, job_id)

    answer = await side.port.finish(
        job_id, lease_token=terms.token, attempt=2, outcome=Succeeded({"ok": True})
    )

    assert answer is Finish.WRITTEN
    job = await side.job(job_id)
    assert (job.state, job.attempts, job.lease_token, job.lease_until) == (
        JobState.SUCCEEDED,
        2,
        None,
        None,
    )
    assert (job.last_error_code, job.last_error) == (None, None)
    assert job.finished_at is not None
    assert await side.result(job_id) == ({"ok": True}, 2)
    assert await side.events(job_id) == [E.CLAIMED, E.SUCCEEDED]


async def test_a_retry_is_due_after_its_delay_by_the_stores_clock_with_a_new_outbox_row(
    side: Side,
) -> None:
    job_id = await side.add()
    terms = await claimed(side, job_id)
    before = await side.now()

    answer = await side.port.finish(
        job_id,
        lease_token=terms.token,
        attempt=1,
        outcome=RetryLater(7.5, "transient_error", "the API answered 503"),
    )

    after = await side.now()
    assert answer is Finish.WRITTEN
    job = await side.job(job_id)
    assert (job.state, job.attempts, job.lease_token) == (JobState.RETRYING, 1, None)
    assert between(job.available_at, before, after, 7.5)
    assert (job.last_error_code, job.last_error) == ("transient_error", "the API answered 503")
    assert job.finished_at is None
    assert await side.outbox(job_id) == [job.available_at]
    assert await side.events(job_id) == [E.CLAIMED, E.RETRY_SCHEDULED]


async def test_a_quarantine_keeps_the_reason_and_finishes_the_job(side: Side) -> None:
    job_id = await side.add()
    terms = await claimed(side, job_id)

    answer = await side.port.finish(
        job_id,
        lease_token=terms.token,
        attempt=1,
        outcome=Quarantine("permanent_error", "no such customer"),
    )

    assert answer is Finish.WRITTEN
    job = await side.job(job_id)
    assert (job.state, job.lease_token) == (JobState.QUARANTINED, None)
    assert (job.last_error_code, job.last_error) == ("permanent_error", "no such customer")
    assert job.finished_at is not None
    assert await side.outbox(job_id) == []
    assert await side.events(job_id) == [E.CLAIMED, E.QUARANTINED]


OUTCOMES: list[Outcome] = [
    Succeeded({"ok": True}),
    RetryLater(1.0, "transient_error", "boom"),
    Quarantine("permanent_error", "bad"),
    Cancelled(),
]


@pytest.mark.parametrize("outcome", OUTCOMES, ids=lambda o: type(o).__name__)
async def test_a_finish_under_a_stale_token_changes_nothing_and_says_so(
    side: Side, outcome: Outcome
) -> None:
    job_id = await side.add()
    holder = await claimed(side, job_id)

    answer = await side.port.finish(job_id, lease_token=uuid.uuid4(), attempt=1, outcome=outcome)

    assert answer is Finish.STALE
    job = await side.job(job_id)
    assert (job.state, job.attempts, job.lease_token) == (JobState.RUNNING, 1, holder.token)
    assert await side.result(job_id) is None
    assert await side.outbox(job_id) == []
    assert await side.events(job_id) == [E.CLAIMED, E.STALE_COMPLETION_REJECTED]


@pytest.mark.parametrize("outcome", OUTCOMES, ids=lambda o: type(o).__name__)
async def test_a_finish_after_the_lease_expired_is_stale(side: Side, outcome: Outcome) -> None:
    token = uuid.uuid4()
    job_id = await side.add(state=JobState.RUNNING, lease_token=token, lease_expired=True)

    answer = await side.port.finish(job_id, lease_token=token, attempt=1, outcome=outcome)

    assert answer is Finish.STALE
    assert (await side.job(job_id)).state is JobState.RUNNING
    assert await side.events(job_id) == [E.STALE_COMPLETION_REJECTED]


@pytest.mark.parametrize("outcome", OUTCOMES, ids=lambda o: type(o).__name__)
async def test_a_finish_asked_again_after_a_lost_answer_is_already_done(
    side: Side, outcome: Outcome
) -> None:
    job_id = await side.add()
    terms = await claimed(side, job_id)
    first = await side.port.finish(job_id, lease_token=terms.token, attempt=1, outcome=outcome)
    assert first is Finish.WRITTEN
    journal = await side.events(job_id)

    again = await side.port.finish(job_id, lease_token=terms.token, attempt=1, outcome=outcome)

    assert again is Finish.ALREADY
    assert await side.events(job_id) == journal


async def test_a_finish_of_an_unknown_job_is_stale(side: Side) -> None:
    answer = await side.port.finish(
        uuid.uuid4(), lease_token=uuid.uuid4(), attempt=1, outcome=Succeeded({})
    )
    assert answer is Finish.STALE


async def test_a_finish_by_an_attempt_taken_over_is_stale_and_the_new_holder_finishes(
    side: Side,
) -> None:
    job_id = await side.add(state=JobState.RUNNING, attempts=1, lease_expired=True)
    old = (await side.job(job_id)).lease_token
    assert old is not None
    new = await claimed(side, job_id)

    stale = await side.port.finish(job_id, lease_token=old, attempt=1, outcome=Succeeded({}))
    written = await side.port.finish(
        job_id, lease_token=new.token, attempt=2, outcome=Succeeded({"by": 2})
    )

    assert (stale, written) == (Finish.STALE, Finish.WRITTEN)
    assert await side.result(job_id) == ({"by": 2}, 2)


# --- release, progress, parents ------------------------------------------------------------------


async def test_a_release_gives_the_job_back_queued_its_attempt_still_counted(side: Side) -> None:
    job_id = await side.add()
    terms = await claimed(side, job_id)
    before = await side.now()

    assert await side.port.release(job_id, lease_token=terms.token, detail="shutting down")

    after = await side.now()
    job = await side.job(job_id)
    assert (job.state, job.attempts, job.lease_token) == (JobState.QUEUED, 1, None)
    assert between(job.available_at, before, after, 0)
    # No new outbox row: the consumer requeues the message it holds.
    assert await side.outbox(job_id) == []
    assert await side.events(job_id) == [E.CLAIMED, E.LEASE_EXPIRED]


async def test_a_release_under_another_token_gives_nothing_back(side: Side) -> None:
    job_id = await side.add()
    terms = await claimed(side, job_id)
    assert not await side.port.release(job_id, lease_token=uuid.uuid4(), detail="not mine")
    job = await side.job(job_id)
    assert (job.state, job.lease_token) == (JobState.RUNNING, terms.token)


async def test_progress_is_kept_for_the_holder_and_dropped_for_a_stale_token(
    side: Side,
) -> None:
    job_id = await side.add()
    terms = await claimed(side, job_id)
    at = await side.now()
    stale = ProgressReport(job_id, uuid.uuid4(), 0.9, "not mine", at)
    await side.port.report_progress([stale])
    assert (await side.job(job_id)).progress is None

    report = ProgressReport(job_id, terms.token, 0.5, "half way", at)
    await side.port.report_progress([report])

    assert (await side.job(job_id)).progress == report.as_json()


async def test_a_job_of_no_workflow_has_no_parent_results(side: Side) -> None:
    job_id = await side.add()
    await claimed(side, job_id)
    assert await side.port.parent_results(job_id) == {}
