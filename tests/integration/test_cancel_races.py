"""A cancel that races the job's claims and releases still reaches its answer (issue 24,
item 3): it used to give up after three races, and the API answered ``409 the job is running``
for a job that could be cancelled."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from sqlalchemy import TextClause

from jobrelay.core.execution import Claimed, LeaseTerms
from jobrelay.core.jobs import CancelAnswer
from jobrelay.core.states import JobState
from jobrelay.db import queries as q
from jobrelay.db.execution_store import PgExecutionStore
from jobrelay.db.store import Store
from tests.support.consumer_kit import new_client, submit

RACES = 6  # more than the three tries the old loop allowed


class Racer:
    """Between the cancel's statements, moves the job out of the state the next one expects:
    after CANCEL_JOB (which needs it waiting) a consumer releases it, after REQUEST_CANCEL (which
    needs it running) a consumer claims it: the real statements of a busy job."""

    def __init__(self, store: Store, job_id: uuid.UUID, races: int) -> None:
        self.executions = PgExecutionStore(store)
        self.job_id = job_id
        self.races_left = races
        self.lease: uuid.UUID | None = None
        self.real = store.fetch_one
        self.real_cancel = store._cancel_at_once

    async def claim(self) -> None:
        claim = await self.executions.claim(self.job_id, LeaseTerms.fresh(30))
        assert isinstance(claim, Claimed)
        self.lease = claim.lease_token

    async def cancel_at_once(self, arguments: dict[str, Any]) -> bool:
        """CANCEL_JOB (``Store._cancel_at_once``: its transaction with the sequence's release)."""
        cancelled = await self.real_cancel(arguments)
        if self.races_left and not cancelled:
            assert self.lease is not None
            await self.executions.release(self.job_id, lease_token=self.lease, detail="race")
        return cancelled

    async def fetch_one(self, statement: TextClause, **params: Any) -> Any:
        row = await self.real(statement, **params)
        if self.races_left and row is None and statement is q.REQUEST_CANCEL:
            await self.claim()
            self.races_left -= 1
        return row

    def interpose(self, monkeypatch: pytest.MonkeyPatch, store: Store) -> None:
        monkeypatch.setattr(store, "fetch_one", self.fetch_one)
        monkeypatch.setattr(store, "_cancel_at_once", self.cancel_at_once)


@pytest.fixture
async def client_id(store: Store) -> uuid.UUID:
    return await new_client(store)


async def test_a_cancel_racing_claims_and_releases_asks_the_running_job_to_stop(
    store: Store, client_id: uuid.UUID, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id = await submit(store, client_id, "demo.sleep", {"seconds": 30}, max_attempts=20)
    racer = Racer(store, job_id, RACES)
    await racer.claim()
    racer.interpose(monkeypatch, store)

    answer = await store.cancel_job(job_id, client_id=client_id, detail="t")

    assert racer.races_left == 0  # it lost every race, and kept going
    assert answer is CancelAnswer.REQUESTED
    job = await store.get_job(job_id)
    assert job is not None and job.state is JobState.RUNNING
    assert job.cancel_requested_at is not None


async def test_a_cancel_racing_a_claim_of_a_queued_job_cancels_it_once_it_is_back(
    store: Store, client_id: uuid.UUID, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id = await submit(store, client_id, "demo.sleep", {"seconds": 30}, max_attempts=20)
    racer = Racer(store, job_id, RACES)
    await racer.claim()
    racer.interpose(monkeypatch, store)
    racer.races_left = RACES

    # The last race leaves the job released (queued): the next try cancels it at once.
    original = racer.cancel_at_once

    async def release_last(arguments: dict[str, Any]) -> bool:
        if racer.races_left == 0 and racer.lease is not None:
            await racer.executions.release(job_id, lease_token=racer.lease, detail="race")
            racer.lease = None
        return await original(arguments)

    monkeypatch.setattr(store, "_cancel_at_once", release_last)
    answer = await store.cancel_job(job_id, client_id=client_id, detail="t")

    assert answer is CancelAnswer.CANCELLED
    job = await store.get_job(job_id)
    assert job is not None and job.state is JobState.CANCELLED


async def test_a_finished_job_is_not_cancellable_at_once(
    store: Store, client_id: uuid.UUID
) -> None:
    job_id = await submit(store, client_id, "demo.sleep", {"seconds": 30})
    assert await store.cancel_job(job_id, client_id=client_id, detail="t") is (
        CancelAnswer.CANCELLED
    )
    assert await store.cancel_job(job_id, client_id=client_id, detail="t") is None
    assert await store.cancel_job(uuid.uuid4(), client_id=client_id, detail="t") is None
