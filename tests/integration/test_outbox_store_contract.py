"""The outbox store's contract: each scenario is written once against the ``OutboxStore`` port
(``core/relay.py``) and runs on both of its implementations, the tests' in-memory outbox
(``tests/support/dispatcher_fakes.py::InMemoryOutbox``, which the relay loop's unit tests run
on) and ``db/relay_store.py::RelayStore`` on a real migrated database.

PostgreSQL is the truth: when the two disagree, the fake is wrong. Each scenario checks what
the port answers and what it left behind in the outbox (``tests/support/outbox_sides.py`` reads
it on each side).

What the fake does not model, so no scenario here runs on it: the flow pick's order by priority
and by client turns, and its concurrency and rate limits (``lease_picks`` leases each queue's
rows in due order; tests/integration/test_flow_relay.py runs the order and the concurrency
limits on PostgreSQL); the ``published`` journal entries, traceparent and attempt a lease
returns; the jobs themselves, so ``rescue_expired_leases`` (one PostgreSQL-only scenario below),
``delete_finished_jobs`` and ``fold_job_counts`` answer nothing on it; ``flow_controls``
returns what a unit test set; the ``default`` queue migration 0007 registers (the fake starts
with no queue); and the fake's own ``unavailable`` switch.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from datetime import timedelta

import pytest
from sqlalchemy import func

from jobrelay.core.relay import FlowControls, FlowRules, OutboxRow, OutboxStore, QueuePick
from jobrelay.core.states import JobState
from jobrelay.db import tables
from jobrelay.db.relay_store import RelayStore
from jobrelay.db.store import Store
from tests.support import factories
from tests.support.dispatcher_fakes import InMemoryOutbox
from tests.support.outbox_sides import MemorySide, PostgresSide, Seen, Side
from tests.support.ports import port_mismatches

LEASE = 30.0
SLOW = FlowRules(routes={"demo.fail": "slow"})  # demo.fail goes to ``slow``, the rest ``default``


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


def ids(rows: Sequence[OutboxRow]) -> list[int]:
    return [row.id for row in rows]


async def seen(side: Side, outbox_id: int) -> Seen:
    found = await side.row(outbox_id)
    assert found is not None, f"no outbox row {outbox_id}"
    return found


def about(value: float | None, expected: float, read_within: float) -> bool:
    """Is ``value`` a time ``expected`` seconds off, read up to ``read_within`` seconds of real
    time later (times to come shrink as it passes, times past grow)? Exact on the fake."""
    slack = 0.001  # the database's clock is read in microseconds
    return value is not None and expected - read_within - slack <= value <= expected + slack


def aged(value: float, expected: float, read_within: float) -> bool:
    """Is ``value`` an age of ``expected`` seconds, read up to ``read_within`` seconds of real
    time later (ages grow as it passes)? Exact on the fake."""
    slack = 0.001  # the database's clock is read in microseconds
    return expected - slack <= value <= expected + read_within + slack


# --- the port itself ---------------------------------------------------------------------------


@pytest.mark.parametrize("implementation", [InMemoryOutbox, RelayStore])
def test_both_stores_have_every_method_of_the_port_with_its_parameters(
    implementation: type,
) -> None:
    """What mypy checks where the fake is passed as an OutboxStore, for every method."""
    assert port_mismatches(OutboxStore, implementation) == []


# --- lease_batch ---------------------------------------------------------------------------------


async def test_due_rows_are_leased_their_attempt_counted_and_rows_not_yet_due_left(
    side: Side,
) -> None:
    first, second = await side.add(), await side.add()
    later = await side.add(due_in=60)
    start = await side.mark()

    leased = await side.port.lease_batch(10, LEASE)

    rows = [await seen(side, outbox_id) for outbox_id in (first, second)]
    next_due_in = await side.port.next_due_in()
    read_within = await side.mark() - start
    assert ids(leased) == [first, second]
    assert [row.publish_attempts for row in leased] == [1, 1]
    for row in rows:
        assert (row.published, row.publish_attempts) == (False, 1)
        assert about(row.due_in, LEASE, read_within)  # due again when the lease runs out
    assert about(next_due_in, LEASE, read_within)
    untouched = await seen(side, later)
    assert (untouched.publish_attempts, untouched.published) == (0, False)


async def test_a_leased_row_is_not_leased_again_until_its_lease_runs_out(side: Side) -> None:
    outbox_id = await side.add()
    assert ids(await side.port.lease_batch(10, LEASE)) == [outbox_id]

    await side.pass_time(LEASE - 5)
    assert await side.port.lease_batch(10, LEASE) == []

    await side.pass_time(10)
    again = await side.port.lease_batch(10, LEASE)
    assert ids(again) == [outbox_id] and again[0].publish_attempts == 2


async def test_a_batch_takes_the_earliest_due_rows_up_to_its_limit_returned_by_id(
    side: Side,
) -> None:
    middle = await side.add(due_in=5)
    earliest = await side.add()
    latest = await side.add(due_in=8)
    await side.pass_time(10)  # all three due: earliest, then middle, then latest

    first = await side.port.lease_batch(2, LEASE)

    assert ids(first) == [middle, earliest]  # by id, not by due time
    assert ids(await side.port.lease_batch(2, LEASE)) == [latest]
    assert await side.port.lease_batch(2, LEASE) == []


# --- lease_picks (routing and limits per queue; the flow order is PostgreSQL's alone) ----------


async def test_each_pick_leases_the_due_rows_routed_to_its_queue_in_due_order(side: Side) -> None:
    default_late = await side.add(due_in=5)
    default_early = await side.add()
    slow = await side.add("demo.fail")
    not_due = await side.add(due_in=60)
    await side.pass_time(10)
    picks = [QueuePick("slow", 5), QueuePick("default", 5)]

    leased = await side.port.lease_picks(picks, SLOW, LEASE)

    assert ids(leased) == [slow, default_early, default_late]
    assert [row.publish_attempts for row in leased] == [1, 1, 1]
    assert (await seen(side, not_due)).publish_attempts == 0
    assert await side.port.lease_picks(picks, SLOW, LEASE) == []  # leased: not due


async def test_a_pick_takes_at_most_its_limit_and_a_pick_with_no_room_takes_nothing(
    side: Side,
) -> None:
    first, second, *rest = [await side.add() for _ in range(4)]

    assert ids(await side.port.lease_picks([QueuePick("default", 2)], SLOW, LEASE)) == [
        first,
        second,
    ]
    none = [QueuePick("default", 0), QueuePick("default", -1)]
    assert await side.port.lease_picks(none, SLOW, LEASE) == []
    assert [(await seen(side, outbox_id)).publish_attempts for outbox_id in rest] == [0, 0]
    # A queue no row is routed to has nothing to pick.
    assert await side.port.lease_picks([QueuePick("slow", 5)], SLOW, LEASE) == []


# --- queue_backlogs ------------------------------------------------------------------------------


async def test_the_backlog_of_each_queue_counts_its_due_rows_not_leased_nor_published(
    side: Side,
) -> None:
    await side.add()
    await side.port.mark_published(await side.port.lease_batch(1, LEASE))
    await side.add()
    await side.port.lease_batch(1, LEASE)  # leased: not in a backlog
    await side.add()
    await side.add()
    await side.add("demo.fail")
    await side.add(due_in=60)

    assert await side.port.queue_backlogs(SLOW.routes) == {"default": 2, "slow": 1}
    assert await side.port.queue_backlogs({}) == {"default": 3}


# --- mark_published ------------------------------------------------------------------------------


async def test_a_published_row_is_never_due_again_and_a_second_mark_counts_nothing(
    side: Side,
) -> None:
    first, second = await side.add(), await side.add()
    leased = await side.port.lease_batch(10, LEASE)

    assert await side.port.mark_published(leased) == 2

    for outbox_id in (first, second):
        row = await seen(side, outbox_id)
        assert (row.published, row.publish_attempts, row.last_error) == (True, 1, None)
    await side.pass_time(LEASE + 10)
    assert await side.port.lease_batch(10, LEASE) == []
    assert await side.port.next_due_in() is None
    assert await side.port.oldest_due_age() == 0.0
    assert await side.port.mark_published(leased) == 0


async def test_publishing_a_row_clears_the_error_of_its_earlier_failure(side: Side) -> None:
    outbox_id = await side.add()
    await side.port.mark_failed(ids(await side.port.lease_batch(1, LEASE)), "nacked: x", 0)
    assert (await seen(side, outbox_id)).last_error == "nacked: x"

    assert await side.port.mark_published(await side.port.lease_batch(1, LEASE)) == 1

    row = await seen(side, outbox_id)
    assert (row.published, row.publish_attempts, row.last_error) == (True, 2, None)


async def test_marking_no_rows_changes_nothing(side: Side) -> None:
    outbox_id = await side.add()

    assert await side.port.mark_published([]) == 0
    await side.port.mark_failed([], "nacked", 60)

    row = await seen(side, outbox_id)
    assert (row.published, row.publish_attempts, row.last_error) == (False, 0, None)
    assert ids(await side.port.lease_batch(1, LEASE)) == [outbox_id]  # still due


# --- mark_failed ---------------------------------------------------------------------------------


async def test_a_failed_row_keeps_its_error_and_is_due_again_after_its_backoff(
    side: Side,
) -> None:
    outbox_id = await side.add()
    leased = await side.port.lease_batch(10, LEASE)
    start = await side.mark()

    await side.port.mark_failed(ids(leased), "unroutable: NO_ROUTE", 60)

    row = await seen(side, outbox_id)
    read_within = await side.mark() - start
    assert (row.published, row.last_error) == (False, "unroutable: NO_ROUTE")
    assert about(row.due_in, 60, read_within)
    await side.pass_time(55)
    assert await side.port.lease_batch(10, LEASE) == []
    await side.pass_time(10)
    again = await side.port.lease_batch(10, LEASE)
    assert ids(again) == [outbox_id] and again[0].publish_attempts == 2
    assert (await seen(side, outbox_id)).last_error == "unroutable: NO_ROUTE"  # kept till then


async def test_a_failure_reported_for_a_published_row_changes_nothing(side: Side) -> None:
    outbox_id = await side.add()
    leased = await side.port.lease_batch(10, LEASE)
    await side.port.mark_published(leased)

    await side.port.mark_failed(ids(leased), "timeout", 60)

    row = await seen(side, outbox_id)
    assert (row.published, row.last_error) == (True, None)


# --- next_due_in and oldest_due_age --------------------------------------------------------------


async def test_next_due_in_is_none_without_unpublished_rows_else_the_earliest_due_time(
    side: Side,
) -> None:
    assert await side.port.next_due_in() is None
    start = await side.mark()
    await side.add(due_in=60)
    assert about(await side.port.next_due_in(), 60, await side.mark() - start)

    start = await side.mark()
    await side.add()
    await side.pass_time(20)
    # Overdue: negative (the other row is due in 40 s now).
    assert about(await side.port.next_due_in(), -20, await side.mark() - start)


async def test_the_oldest_due_age_counts_only_due_rows_not_leased(side: Side) -> None:
    assert await side.port.oldest_due_age() == 0.0
    await side.add(due_in=60)
    assert await side.port.oldest_due_age() == 0.0  # not yet due

    start = await side.mark()
    await side.add()
    await side.pass_time(20)
    age = await side.port.oldest_due_age()
    assert aged(age, 20, await side.mark() - start)  # the row due at once, 20 s ago

    await side.port.lease_batch(10, LEASE)
    assert await side.port.oldest_due_age() == 0.0  # leased: not due


# --- delete_published (retention) ----------------------------------------------------------------


async def test_retention_deletes_published_rows_older_than_it_a_batch_at_a_time(
    side: Side,
) -> None:
    old = [await side.add() for _ in range(3)]
    old_rows = await side.port.lease_batch(10, LEASE)
    await side.port.mark_published(old_rows)
    await side.pass_time(100)
    young = await side.add()
    await side.port.mark_published(await side.port.lease_batch(10, LEASE))
    unpublished = await side.add(due_in=-200)  # long overdue, never published

    assert await side.port.delete_published(50, 2) == 2
    assert await side.port.delete_published(50, 2) == 1
    assert await side.port.delete_published(50, 2) == 0

    assert [await side.row(outbox_id) for outbox_id in old] == [None, None, None]
    assert (await seen(side, young)).published
    assert not (await seen(side, unpublished)).published
    newer = await side.add()
    assert newer not in old  # an id is never handed out again
    assert await side.port.mark_published(old_rows) == 0  # deleted: nothing to mark
    assert not (await seen(side, newer)).published


# --- rescue_expired_leases (PostgreSQL only: the fake has no jobs and rescues none) ------------


async def test_jobs_whose_lease_expired_are_queued_again_with_a_new_outbox_row(
    postgres_side: PostgresSide,
) -> None:
    store = postgres_side.store
    expired = [
        await factories.job(
            store, state=JobState.RUNNING, lease_until=func.now() - timedelta(seconds=60 - i)
        )
        for i in range(2)
    ]
    live = await factories.job(store, state=JobState.RUNNING)
    port = postgres_side.port

    first = await port.rescue_expired_leases(1)
    second = await port.rescue_expired_leases(10)

    assert first == [expired[0].id] and second == [expired[1].id]  # the oldest expiry first
    assert await port.rescue_expired_leases(10) == []
    for made in expired:
        job = await factories.job_row(store, made.id)
        assert (job.state, job.lease_token, job.attempts) == ("queued", None, 1)
        assert await factories.count(store, tables.outbox, tables.outbox.c.job_id == made.id) == 1
    assert (await factories.job_row(store, live.id)).state == "running"
    leased = await port.lease_batch(10, LEASE)
    assert sorted(row.job_id for row in leased) == sorted(made.id for made in expired)


# --- the broker's blocks, the queues, the controls -----------------------------------------------


async def test_a_broker_block_is_reported_replaced_and_cleared_per_dispatcher(side: Side) -> None:
    await side.port.report_broker_block("d1", "low on memory")
    await side.port.report_broker_block("d2", "low on disk")
    await side.port.report_broker_block("d1", "low on disk")
    assert await side.broker_blocks() == {"d1": "low on disk", "d2": "low on disk"}

    await side.port.clear_broker_block("d1")
    await side.port.clear_broker_block("d1")  # cleared twice: nothing to clear

    assert await side.broker_blocks() == {"d2": "low on disk"}


async def test_registered_queues_are_added_and_one_registered_again_kept(side: Side) -> None:
    before = await side.queues()  # PostgreSQL has ``default`` from its migration; the fake none

    await side.port.register_queues(["slow", "slow", "default"])
    await side.port.register_queues(["slow"])

    assert await side.queues() == before | {"slow", "default"}


async def test_a_fresh_store_has_no_pause_no_runtime_limit_and_no_served_type(
    side: Side,
) -> None:
    assert await side.port.flow_controls() == FlowControls()
