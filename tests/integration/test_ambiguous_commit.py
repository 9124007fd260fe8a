"""The ambiguous commit (docs/failure-points.md): the database committed, but the answer never
reached the caller, who sees a connection error and cannot tell "it landed" from "it did not".

At the API, the client retries with its Idempotency-Key and gets the one job. At the consumer,
the completion is retried (or the message redelivered) and nothing runs or is stored twice: the
attempt number tells "my own earlier COMMIT landed" (the stored result's attempt is mine) from
"someone else owns the job now" (a later attempt completed it) — the first is acked as done, the
second is rejected as stale.

The faults are real driver errors on the real statements: a ``psycopg.OperationalError`` raised
right after PostgreSQL executed (and, in autocommit, committed) the accept statement, and a
``StoreUnavailable`` raised after the completion's transaction committed.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
import psycopg
import pytest

from jobrelay.core.errors import StoreUnavailable
from jobrelay.core.settings import Settings
from jobrelay.db import queries as q, tables
from jobrelay.db.execution_store import Finish, PgExecutionStore
from jobrelay.db.store import Store
from tests.conftest import MakeSettings, auth
from tests.support.consumer_kit import (
    StandInDelivery,
    events,
    eventually,
    handler_runs,
    mark_outbox_published,
    new_client,
    publish_jobs,
    rows,
    running_consumer,
    scalar,
    submit,
    work_queue_count,
    worker,
)
from tests.support.factories import count, job_row, results_of

SUBMIT = {"type": "demo.sleep", "payload": {"seconds": 0}}

# --- at the API ---------------------------------------------------------------------------------


class LostAnswers:
    """Fail chosen statements at the driver with a connection error, ``before`` PostgreSQL runs
    them or ``after`` it ran them — in autocommit, after their COMMIT: the answer is lost on
    the way back. Works under the store's fast path and SQLAlchemy's alike (both execute on
    psycopg's async cursor)."""

    def __init__(self, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
        self.dialect = store.engine.dialect
        self.statements: set[str] = set()
        self.when = "after"
        self.remaining = 0
        self.fired = 0
        real = psycopg.AsyncCursor.execute
        faults = self

        async def execute(cursor: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            hit = str(query) in faults.statements and faults.remaining > 0
            if hit:  # decided before the await: concurrent statements cannot overdraw it
                faults.remaining -= 1
            if hit and faults.when == "before":
                faults._fire()
            result = await real(cursor, query, *args, **kwargs)
            if hit and faults.when == "after":
                faults._fire()
            return result

        monkeypatch.setattr(psycopg.AsyncCursor, "execute", execute)

    def arm(self, statement: Any, *, when: str = "after", times: int = 1) -> None:
        self.statements.add(str(statement.compile(dialect=self.dialect)))
        self.when, self.remaining = when, times

    def _fire(self) -> None:
        self.fired += 1
        raise psycopg.OperationalError("server closed the connection unexpectedly")


@pytest.fixture
def lost_answers(store: Store, monkeypatch: pytest.MonkeyPatch) -> LostAnswers:
    return LostAnswers(store, monkeypatch)


async def accepted_rows(store: Store) -> tuple[int, int]:
    """Jobs and outbox rows (a job's "received" entry is its row: job_journal)."""
    return (await count(store, tables.jobs), await count(store, tables.outbox))


@pytest.mark.parametrize(
    ("when", "retry_status"),
    [("after", 200), ("before", 202)],
    ids=["commit_landed_answer_lost", "connection_lost_before_the_statement"],
)
async def test_a_submission_whose_answer_was_lost_is_retried_with_its_key_into_exactly_one_job(
    api: httpx.AsyncClient,
    store: Store,
    alice: str,
    lost_answers: LostAnswers,
    when: str,
    retry_status: int,
) -> None:
    lost_answers.arm(q.ACCEPT_JOBS, when=when)
    first = await api.post("/v1/jobs", json=SUBMIT, headers=auth(alice, "ambiguous-1"))
    assert lost_answers.fired == 1
    # The client cannot tell whether it landed: 503, "retry with the same key".
    assert first.status_code == 503, first.text
    assert first.json()["code"] == "database_unavailable"
    assert await accepted_rows(store) == ((1, 1) if when == "after" else (0, 0))

    retry = await api.post("/v1/jobs", json=SUBMIT, headers=auth(alice, "ambiguous-1"))
    again = await api.post("/v1/jobs", json=SUBMIT, headers=auth(alice, "ambiguous-1"))

    assert retry.status_code == retry_status, retry.text
    assert again.status_code == 200
    job_id = retry.json()["id"]
    assert again.json()["id"] == job_id
    assert retry.headers["location"] == f"/v1/jobs/{job_id}"
    assert await accepted_rows(store) == (1, 1)
    assert str(await scalar(store, "SELECT id FROM jobrelay.jobs")) == job_id


async def test_a_lost_answer_then_a_retry_with_another_payload_is_a_conflict_not_a_second_job(
    api: httpx.AsyncClient, store: Store, alice: str, lost_answers: LostAnswers
) -> None:
    lost_answers.arm(q.ACCEPT_JOBS)
    assert (await api.post("/v1/jobs", json=SUBMIT, headers=auth(alice, "k"))).status_code == 503
    other = {"type": "demo.sleep", "payload": {"seconds": 1}}
    conflict = await api.post("/v1/jobs", json=other, headers=auth(alice, "k"))
    assert conflict.status_code == 409
    assert conflict.json()["code"] == "idempotency_conflict"
    assert await accepted_rows(store) == (1, 1)


# --- at the consumer ----------------------------------------------------------------------------


@pytest.fixture
def finishes(monkeypatch: pytest.MonkeyPatch) -> list[Finish]:
    """What every ``ExecutionStore.finish`` call concluded (a spy: nothing changed)."""
    real = PgExecutionStore.finish
    seen: list[Finish] = []

    async def finish(self: PgExecutionStore, job_id: uuid.UUID, **kwargs: Any) -> Finish:
        seen.append(await real(self, job_id, **kwargs))
        return seen[-1]

    monkeypatch.setattr(PgExecutionStore, "finish", finish)
    return seen


async def job_state(store: Store, job_id: uuid.UUID) -> tuple[str, int]:
    row = await job_row(store, job_id)
    return row.state, row.attempts


async def assert_ran_once(store: Store, cfg: Settings, job_id: uuid.UUID) -> list[tuple[str, int]]:
    """The test.count job (tag "once") succeeded on attempt 1, its handler ran once, and one
    result and one "succeeded" entry were stored: its journal."""
    assert await job_state(store, job_id) == ("succeeded", 1)
    assert await results_of(store, job_id) == [({"attempt": 1, "tag": "once"}, 1)]
    assert handler_runs(cfg.results_dir, job_id) == 1
    journal = await events(store, job_id)
    assert journal.count(("succeeded", 1)) == 1
    return journal


async def test_a_completion_whose_commit_landed_but_whose_answer_was_lost_is_acked_as_done(
    make_settings: MakeSettings, store: Store, lost_answers: LostAnswers, finishes: list[Finish]
) -> None:
    cfg = make_settings()
    job_id = await submit(store, await new_client(store), "test.count", {"tag": "once"})
    delivery = StandInDelivery(job_id, "test.count")
    # A plain job (no workflow, no parent): its finish is FINISH_JOBS' lean twin.
    lost_answers.arm(q.FINISH_PLAIN_JOBS)

    verdict = await worker(store, cfg).handle(delivery)

    # The retried completion found its own attempt's result: done, not stale, not twice.
    assert lost_answers.fired == 1
    assert finishes == [Finish.ALREADY]
    assert (verdict.outcome, delivery.settled) == ("succeeded", ["ack"])
    journal = await assert_ran_once(store, cfg, job_id)
    assert not [e for e in journal if e[0] == "stale_completion_rejected"]


async def test_a_completion_lost_for_longer_than_the_patience_is_requeued_and_the_redelivery_only_acks(  # noqa: E501
    make_settings: MakeSettings, store: Store, lost_answers: LostAnswers
) -> None:
    cfg = make_settings()
    job_id = await submit(store, await new_client(store), "test.count", {"tag": "once"})
    first = StandInDelivery(job_id, "test.count")
    lost_answers.arm(q.FINISH_PLAIN_JOBS, times=10**6)  # every answer lost, for the whole patience
    verdict = await worker(store, cfg, store_patience=0.3).handle(first)

    # The worker gave up waiting for an answer: the message must survive.
    assert (verdict.outcome, first.settled) == ("store_unavailable", ["requeue"])
    assert lost_answers.fired >= 2
    assert await job_state(store, job_id) == ("succeeded", 1)

    # The broker delivers it again: the job is finished, so the handler does not run again.
    lost_answers.remaining = 0
    redelivered = StandInDelivery(job_id, "test.count", redelivered=True)
    again = await worker(store, cfg).handle(redelivered)
    assert (again.outcome, redelivered.settled) == ("duplicate", ["ack"])
    journal = await assert_ran_once(store, cfg, job_id)
    assert journal[-1] == ("duplicate_delivery", 1)


@pytest.mark.parametrize(
    ("payload", "statement", "outcome", "state", "event", "settled"),
    [
        (
            {"mode": "transient", "times": 1},
            q.FINISH_PLAIN_JOBS,
            "retried",
            "retrying",
            "retry_scheduled",
            "ack",
        ),
        (
            {"mode": "permanent", "times": 1},
            q.FINISH_PLAIN_JOBS,
            "quarantined",
            "quarantined",
            "quarantined",
            "dead_letter",
        ),
    ],
    ids=["retry", "quarantine"],
)
async def test_a_retry_or_quarantine_whose_answer_was_lost_is_recorded_once(
    make_settings: MakeSettings,
    store: Store,
    lost_answers: LostAnswers,
    finishes: list[Finish],
    payload: dict[str, Any],
    statement: Any,
    outcome: str,
    state: str,
    event: str,
    settled: str,
) -> None:
    cfg = make_settings()
    job_id = await submit(store, await new_client(store), "demo.fail", payload)
    delivery = StandInDelivery(job_id, "demo.fail")
    lost_answers.arm(statement)
    verdict = await worker(store, cfg).handle(delivery)

    assert lost_answers.fired == 1
    assert finishes == [Finish.ALREADY]
    assert (verdict.outcome, delivery.settled) == (outcome, [settled])
    assert await job_state(store, job_id) == (state, 1)
    assert [e for e in await events(store, job_id) if e[0] == event] == [(event, 1)]
    # One outbox row for the accept, plus one for the retry when there is one.
    expected_rows = 2 if outcome == "retried" else 1
    assert await count(store, tables.outbox, tables.outbox.c.job_id == job_id) == expected_rows


async def test_a_lost_completion_of_a_job_someone_else_reclaimed_and_finished_is_rejected_as_stale(
    make_settings: MakeSettings, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other side of the attempt check: this time the COMMIT did not land, the lease
    expired, attempt 2 completed the job — attempt 1's retried completion must not count."""
    cfg = make_settings()
    job_id = await submit(store, await new_client(store), "test.count", {"tag": "race"})
    short = cfg.model_copy(update={"lease_seconds": 0.5})
    real = PgExecutionStore.finish
    first_call = {"done": False}

    async def finish(self: PgExecutionStore, job_id_: uuid.UUID, **kwargs: Any) -> Finish:
        if kwargs["attempt"] == 1 and not first_call["done"]:
            first_call["done"] = True
            await asyncio.sleep(short.lease_seconds + 0.3)  # the lease runs out meanwhile
            taken = StandInDelivery(job_id, "test.count")
            assert (await worker(store, cfg).handle(taken)).outcome == "succeeded"
            raise StoreUnavailable("connection lost before the COMMIT")
        return await real(self, job_id_, **kwargs)

    monkeypatch.setattr(PgExecutionStore, "finish", finish)
    delivery = StandInDelivery(job_id, "test.count")
    verdict = await worker(store, short).handle(delivery)

    assert (verdict.outcome, delivery.settled) == ("stale", ["ack"])
    assert await job_state(store, job_id) == ("succeeded", 2)
    assert await results_of(store, job_id) == [({"attempt": 2, "tag": "race"}, 2)]
    journal = await events(store, job_id)
    assert journal.count(("succeeded", 2)) == 1
    assert ("stale_completion_rejected", 1) in journal
    assert not [e for e in journal if e[0] == "succeeded" and e[1] == 1]


async def test_through_the_broker_a_lost_completion_answer_leaves_one_result_and_an_empty_queue(
    make_settings: MakeSettings, store: Store, lost_answers: LostAnswers, finishes: list[Finish]
) -> None:
    cfg = make_settings()
    client_id = await new_client(store)
    jobs = [await submit(store, client_id, "test.count", {"tag": str(n)}) for n in range(5)]
    lost_answers.arm(q.FINISH_PLAIN_JOBS, times=len(jobs))
    await mark_outbox_published(store)
    async with running_consumer(cfg):
        await publish_jobs(cfg, [(job_id, "test.count") for job_id in jobs])

        async def all_succeeded() -> bool:
            states = await rows(store, "SELECT state FROM jobrelay.jobs")
            return {row.state for row in states} == {"succeeded"}

        await eventually(all_succeeded, what="every job to succeed")
        await eventually(lambda: _zero(work_queue_count(cfg)), what="the queue to drain")
    assert lost_answers.fired == len(jobs)
    # (A retried completion can lose its answer too, so some jobs may see two faults.)
    assert Finish.ALREADY in finishes and Finish.STALE not in finishes
    for n, job_id in enumerate(jobs):
        assert await results_of(store, job_id) == [({"attempt": 1, "tag": str(n)}, 1)]
        assert handler_runs(cfg.results_dir, job_id) == 1


async def _zero(count: Any) -> bool:
    return await count == 0
