"""The sweep gives a quarantined job its missing message back (docs/invariants.md, invariant 8):
against real PostgreSQL and RabbitMQ, a job quarantined by a consumer loses its dead-letter (as a
broker-node fault can make it), and the dispatcher's sweep publishes it again from the database
once the grace has passed; replaying it then works as for any dead-lettered message."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta

import pytest
from sqlalchemy import func

from jobrelay.broker import quarantine
from jobrelay.broker.connection import connect_broker
from jobrelay.broker.quarantine import RESTORE_GRACE_SECONDS, RESTORED_HEADER
from jobrelay.core.settings import Settings
from jobrelay.core.topology import DEFAULT_QUEUE, QUARANTINE_QUEUE
from jobrelay.db.store import Store
from jobrelay.operations import Operations, SweepResult, sweep_quarantine
from tests.conftest import MakeSettings
from tests.support.consumer_kit import (
    broker,
    eventually,
    new_client,
    quarantined_messages,
    registry,
    running_consumer,
    submit,
    wait_state,
)
from tests.support.factories import job_row, set_job
from tests.support.relay import running_relay

PERMANENT = {"mode": "permanent", "times": 1}


@pytest.fixture
def cfg(make_settings: MakeSettings) -> Settings:
    return make_settings()


async def quarantine_one(cfg: Settings, store: Store) -> uuid.UUID:
    """A job quarantined by a real consumer, its dead-letter in the quarantine queue."""
    job_id = await submit(store, await new_client(store), "demo.fail", PERMANENT, max_attempts=1)
    async with running_relay(cfg, store), running_consumer(cfg):
        await wait_state(store, job_id, "quarantined")
        await eventually(lambda: quarantined_messages(cfg), what="dead letter")
    return job_id


async def lose_its_dead_letter(cfg: Settings) -> None:
    async with broker(cfg) as channel:
        queue = await channel.declare_queue(QUARANTINE_QUEUE, passive=True)
        await queue.purge()


async def sweep(
    cfg: Settings, store: Store, missing_since: dict[uuid.UUID, datetime] | None = None
) -> SweepResult:
    connection = await connect_broker(cfg.amqp_url, seconds=10)
    try:
        result = await sweep_quarantine(
            store, connection, wait_seconds=10, missing_since=missing_since
        )
    finally:
        await connection.close()
    assert result is not None
    return result


async def test_a_lost_dead_letter_is_restored_by_the_sweep_and_replays_like_any(
    cfg: Settings, store: Store
) -> None:
    job_id = await quarantine_one(cfg, store)
    await lose_its_dead_letter(cfg)
    # A first look waits: the consumer's dead-letter may be on its way, or the look missed it.
    waiting = await sweep(cfg, store)
    assert (waiting.restored, waiting.waiting) == (0, 1) and waiting.due_in is not None
    assert await quarantined_messages(cfg) == []

    # A grace later (moved back in time here: the quarantine and the first sighting), the
    # next sweep still finds it missing and restores it.
    grace = timedelta(seconds=RESTORE_GRACE_SECONDS + 1)
    await set_job(store, job_id, finished_at=func.now() - grace)
    seen = {job: at - grace for job, at in waiting.missing_since.items()}
    restored = await sweep(cfg, store, seen)
    assert (restored.restored, restored.waiting, restored.changed) == (1, 0, True)
    [message] = await quarantined_messages(cfg)
    assert json.loads(message.body) == {"job_id": str(job_id), "type": "demo.fail", "version": 1}
    assert RESTORED_HEADER in message.headers and message.correlation_id == str(job_id)
    connection = await connect_broker(cfg.amqp_url, seconds=10)
    try:
        [seen] = await quarantine.peek(connection)
    finally:
        await connection.close()
    assert (seen.job_id, seen.reason, seen.queue) == (job_id, "rejected", DEFAULT_QUEUE)
    assert seen.outbox_id is not None  # the job's latest outbox row, as its dead-letter had

    again = await sweep(cfg, store)  # consistent now: nothing more to do
    assert (again.restored, again.surplus, again.stale, again.messages) == (0, 0, 0, 1)

    [outcome] = await Operations(store, cfg, registry).replay([job_id])
    assert outcome.status == "replayed"
    assert await quarantined_messages(cfg) == []
    assert (await job_row(store, job_id)).state == "queued"
