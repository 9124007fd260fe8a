"""Issue 24 against real PostgreSQL: a retry is due by the database's clock, not the consumer's
(item 5); a success clears an earlier attempt's error (item 12); a job of a type the consumer
does not know is deferred unclaimed whatever type its message names (item 4)."""

from __future__ import annotations

import sys
import uuid
from datetime import datetime, timedelta, tzinfo

import pytest
from sqlalchemy import func

from jobrelay.core.settings import Settings
from jobrelay.db.store import Store
from jobrelay.handlers import builtin
from tests.conftest import MakeSettings
from tests.support.consumer_kit import (
    StandInDelivery,
    events,
    new_client,
    rows,
    scalar,
    submit,
    worker,
)
from tests.support.factories import job_row, set_job

SKEW = timedelta(hours=5)


class _HoursBehind(datetime):
    """The consumer's clock, five hours behind the database's."""

    @classmethod
    def now(cls, tz: tzinfo | None = None) -> datetime:  # type: ignore[override]
        return datetime.now(tz) - SKEW


@pytest.fixture
def consumer_clock_hours_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every clock the consumer's code reads (``datetime`` in its modules and the core's job
    module) runs five hours behind; the database's stays right."""
    for name, module in list(sys.modules.items()):
        consumers = name.startswith(("jobrelay.consumer", "jobrelay.core.jobs"))
        if consumers and getattr(module, "datetime", None) is datetime:
            monkeypatch.setattr(module, "datetime", _HoursBehind)


@pytest.fixture
def cfg(make_settings: MakeSettings) -> Settings:
    return make_settings()


@pytest.fixture
async def client_id(store: Store) -> uuid.UUID:
    return await new_client(store)


async def deliver(
    store: Store, cfg: Settings, job_id: uuid.UUID, message_type: str, **options: object
) -> tuple[str, list[str]]:
    delivery = StandInDelivery(job_id, message_type)
    verdict = await worker(store, cfg, **options).handle(delivery)  # type: ignore[arg-type]
    return verdict.outcome, delivery.settled


@pytest.mark.usefixtures("consumer_clock_hours_behind")
async def test_a_retry_is_due_by_the_database_clock_when_the_consumers_clock_is_hours_off(
    make_settings: MakeSettings, store: Store, client_id: uuid.UUID
) -> None:
    """Item 5: the due time was the consumer's clock plus the delay (5 h in the past here)."""
    cfg = make_settings(retry_base_seconds=2.0, retry_max_seconds=2.0)
    job_id = await submit(store, client_id, "demo.fail", {"mode": "transient", "times": 1})
    assert await deliver(store, cfg, job_id, "demo.fail") == ("retried", ["ack"])
    row = await job_row(store, job_id)
    assert row.state == "retrying"
    # Written at the database's now() (updated_at), due 1–2 s after it (equal jitter of 2 s).
    delay = (row.available_at - row.updated_at).total_seconds()
    assert 0.9 <= delay <= 2.1, delay
    outbox = await rows(
        store, "SELECT available_at FROM jobrelay.outbox WHERE job_id = :id ORDER BY id", id=job_id
    )
    assert outbox[-1].available_at == row.available_at


async def test_a_job_that_failed_once_then_succeeded_shows_no_last_error(
    cfg: Settings, store: Store, client_id: uuid.UUID
) -> None:
    """Item 12: the success kept the first attempt's transient_error in the job's view."""
    job_id = await submit(store, client_id, "demo.fail", {"mode": "transient", "times": 1})
    assert await deliver(store, cfg, job_id, "demo.fail") == ("retried", ["ack"])
    assert (await job_row(store, job_id)).last_error_code == "transient_error"
    await set_job(store, job_id, available_at=func.now())  # due now, not after the backoff
    assert await deliver(store, cfg, job_id, "demo.fail") == ("succeeded", ["ack"])
    row = await job_row(store, job_id)
    assert (row.state, row.last_error_code, row.last_error) == ("succeeded", None, None)
    # The journal keeps the failed attempt.
    assert ("retry_scheduled", 1) in await events(store, job_id)


async def test_a_message_naming_another_unknown_type_defers_a_job_of_an_unknown_type_unclaimed(
    cfg: Settings, store: Store, client_id: uuid.UUID
) -> None:
    """Item 4: the job was claimed and quarantined as unknown_job_type with an attempt used."""
    job_id = await submit(store, client_id, "test.count", {})  # unknown to the built-in types
    outcome = await deliver(store, cfg, job_id, "test.elsewhere", job_registry=builtin.registry)
    assert outcome == ("deferred", ["ack"])
    row = await job_row(store, job_id)
    assert (row.state, row.attempts, row.last_error_code) == ("queued", 0, "unknown_job_type")
    assert [event for event, _ in await events(store, job_id)] == ["received", "deferred"]
    assert (
        await scalar(store, "SELECT count(*) FROM jobrelay.outbox WHERE job_id = :id", id=job_id)
        == 2
    )


async def test_a_message_naming_a_known_type_defers_a_job_of_an_unknown_type_unclaimed(
    cfg: Settings, store: Store, client_id: uuid.UUID
) -> None:
    """Item 4, the other half: the message names a type this consumer runs (``demo.sleep``)
    while the job's own is unknown here; the claim took an attempt and quarantined it."""
    job_id = await submit(store, client_id, "test.count", {})  # unknown to the built-in types
    outcome = await deliver(store, cfg, job_id, "demo.sleep", job_registry=builtin.registry)
    assert outcome == ("deferred", ["ack"])
    row = await job_row(store, job_id)
    assert (row.state, row.attempts, row.last_error_code) == ("queued", 0, "unknown_job_type")
    assert [event for event, _ in await events(store, job_id)] == ["received", "deferred"]


async def test_a_message_naming_another_known_type_runs_the_job_as_its_own_type(
    cfg: Settings, store: Store, client_id: uuid.UUID
) -> None:
    job_id = await submit(store, client_id, "demo.fail", {"mode": "permanent", "times": 0})
    outcome = await deliver(store, cfg, job_id, "demo.sleep", job_registry=builtin.registry)
    assert outcome == ("succeeded", ["ack"])
    row = await job_row(store, job_id)
    assert (row.state, row.attempts) == ("succeeded", 1)
