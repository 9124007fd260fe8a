"""Regressions found by the chaos runner (``chaos/``, ``python -m chaos``), each at the point
where it was found."""

from __future__ import annotations

import asyncio
import urllib.parse
import uuid
from typing import Any

import pytest
from aio_pika.abc import AbstractIncomingMessage
from aio_pika.exceptions import ChannelInvalidStateError

from chaos.proxy import Mode, Proxy
from jobrelay.consumer import service
from jobrelay.core.settings import Settings
from jobrelay.core.topology import DEFAULT_QUEUE, QUARANTINE_QUEUE, work_queue_name
from jobrelay.db.store import Store
from tests.conftest import MakeSettings
from tests.support.consumer_kit import (
    broker,
    eventually,
    mark_outbox_published,
    new_client,
    publish_jobs,
    quarantined_messages,
    registry,
    running_consumer,
    submit,
    wait_state,
    work_queue_count,
    worker,
)
from tests.support.factories import job_row
from tests.support.queues import depth_is

ALWAYS_PERMANENT = {"mode": "permanent", "times": 1000}


class SettleLost:
    """A real delivery whose ack/nack never reach the broker: the channel closed in between
    (a connection reset right after the outcome's COMMIT)."""

    def __init__(self, message: AbstractIncomingMessage) -> None:
        self.body = message.body
        self.redelivered = message.redelivered

    async def ack(self, multiple: bool = False) -> None:
        raise ChannelInvalidStateError("connection reset before the ack")

    async def nack(self, multiple: bool = False, requeue: bool = True) -> None:
        raise ChannelInvalidStateError("connection reset before the nack")


async def quarantined_job_ids(cfg: Settings) -> list[str]:
    return [str(m.correlation_id) for m in await quarantined_messages(cfg)]


async def test_a_quarantine_whose_nack_was_lost_still_dead_letters_its_message(
    store: Store, make_settings: MakeSettings
) -> None:
    cfg = make_settings()
    # Found by `python -m chaos --profile short --seed 6`: a proxy reset closed the consumer's
    # channel between the quarantine's COMMIT and its nack(requeue=False); the broker delivered
    # the message again, the claim saw a quarantined job, and the redelivery was acked as a
    # duplicate, so the quarantine queue never held the job's message (docs/invariants.md, 8).
    job_id = await submit(store, await new_client(store), "demo.fail", ALWAYS_PERMANENT)
    await mark_outbox_published(store)
    await publish_jobs(cfg, [(job_id, "demo.fail")])
    runner = worker(store, cfg)
    async with broker(cfg) as channel:
        queue = await channel.declare_queue(DEFAULT_QUEUE, passive=True)
        message = await queue.get(no_ack=False)
        assert (await runner.handle(SettleLost(message))).outcome == "quarantined"
    # That channel is gone: the broker puts the message back, marked redelivered.
    assert await work_queue_count(cfg) == 1
    async with broker(cfg) as channel:
        queue = await channel.declare_queue(DEFAULT_QUEUE, passive=True)
        redelivery = await queue.get(no_ack=False)
        assert redelivery.redelivered
        verdict = await runner.handle(redelivery)
    assert verdict.disposition == "dead_letter"
    assert await work_queue_count(cfg) == 0
    assert await eventually(
        lambda: depth_is(cfg.amqp_url, 1, QUARANTINE_QUEUE),
        what="the job's message in the quarantine queue",
    )
    assert await quarantined_job_ids(cfg) == [str(job_id)]
    assert (await job_row(store, job_id)).state == "quarantined"


async def test_a_fresh_duplicate_of_a_quarantined_job_is_acked_not_quarantined_twice(
    store: Store, make_settings: MakeSettings
) -> None:
    cfg = make_settings()
    job_id: uuid.UUID = await submit(store, await new_client(store), "demo.fail", ALWAYS_PERMANENT)
    await mark_outbox_published(store)
    runner = worker(store, cfg)
    # The relay published it twice (it crashed before recording the first publish).
    await publish_jobs(cfg, [(job_id, "demo.fail"), (job_id, "demo.fail")])
    async with broker(cfg) as channel:
        queue = await channel.declare_queue(DEFAULT_QUEUE, passive=True)
        first = await queue.get(no_ack=False)
        assert (await runner.handle(first)).outcome == "quarantined"
        second = await queue.get(no_ack=False)
        assert not second.redelivered
        assert (await runner.handle(second)).outcome == "duplicate"
    assert await work_queue_count(cfg) == 0
    assert await eventually(
        lambda: depth_is(cfg.amqp_url, 1, QUARANTINE_QUEUE), what="one quarantined message"
    )
    assert await quarantined_job_ids(cfg) == [str(job_id)]


async def test_a_connection_reset_while_the_consumer_subscribes_is_retried_not_fatal(
    store: Store, make_settings: MakeSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Found by `python -m chaos --profile short --seed 20240601`: a consumer restarted after a
    # broker restart connected, then a proxy reset tore the connection down while it declared
    # its queue; it took that for a refused setup and exited 1, leaving its queue unserved.
    url = urllib.parse.urlsplit(make_settings().amqp_url)
    proxy = Proxy("broker", url.hostname or "127.0.0.1", url.port or 5672)
    port = proxy.start()
    cfg = make_settings(
        amqp_url=url._replace(netloc=f"{url.username}:{url.password}@127.0.0.1:{port}").geturl()
    )
    declare = service.declare_work_queue
    resets = 0

    async def reset_once_then_declare(*args: Any, **kwargs: Any) -> Any:
        nonlocal resets
        if resets == 0:
            resets += 1
            proxy.set_mode(Mode.RESET)  # every connection through the proxy gets a RST
            proxy.set_mode(Mode.PASS)
        return await declare(*args, **kwargs)

    monkeypatch.setattr(service, "declare_work_queue", reset_once_then_declare)
    try:
        job_id = await submit(store, await new_client(store), "test.count", {"tag": "after"})
        await mark_outbox_published(store)
        async with running_consumer(cfg):
            await publish_jobs(make_settings(), [(job_id, "test.count")])
            await wait_state(store, job_id, "succeeded")
        assert resets == 1
        assert proxy.resets_total >= 1
    finally:
        proxy.close()


async def test_a_work_queue_declared_elsewhere_with_other_arguments_stops_the_consumer_with_1(
    make_settings: MakeSettings,
) -> None:
    # The other side of the test above: a refusal is a fault in the setup, and retrying it
    # forever would hide it. A classic queue under the work queue's name refuses the quorum
    # declaration (PRECONDITION_FAILED); the consumer says so and exits 1 at once.
    cfg = make_settings()
    async with broker(cfg) as channel:
        await channel.declare_queue(work_queue_name("imports"), durable=True)
    consumer = service.Consumer(cfg, registry, queue="imports", concurrency=1)
    assert await asyncio.wait_for(consumer.run(asyncio.Event()), timeout=30) == 1
    assert not consumer.consuming
