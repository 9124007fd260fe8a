"""The product's relay (``jobrelay.dispatcher.relay``) on the real ``RelayStore`` and
``Publisher``, in the test's event loop: for consumer tests that need due outbox rows published
and expired leases rescued. Unlike ``running_dispatcher`` (``tests.support.outbox``) it has no
listener and no housekeeping (lost messages, the quarantine sweep), and it polls often."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from jobrelay.broker.publisher import Publisher
from jobrelay.core.settings import Settings, parse_type_queues
from jobrelay.db.relay_store import RelayStore
from jobrelay.db.store import Store
from jobrelay.dispatcher.relay import Relay, RelayConfig
from jobrelay.dispatcher.service import relay_config


class _NoRescue(RelayStore):
    """Leaves expired leases alone: for tests where the consumer itself gives jobs back."""

    async def rescue_expired_leases(self, limit: int) -> list[uuid.UUID]:
        return []


@asynccontextmanager
async def running_relay(
    settings: Settings, store: Store, *, interval: float = 0.05, rescue: bool = True
) -> AsyncIterator[Relay]:
    """Relay (and, unless ``rescue`` is False, rescue expired leases) every ``interval``
    seconds until the block ends; the batches in flight finish then."""
    publisher = Publisher(
        settings.amqp_url,
        publish_timeout=settings.publish_timeout_seconds,
        delivery_limit=settings.delivery_limit,
        type_queues=parse_type_queues(settings.type_queues),
    )
    config = dataclasses.replace(
        relay_config(settings), poll_interval=interval, maintenance_interval=interval
    )
    relay_store = RelayStore(store) if rescue else _NoRescue(store)
    relay = Relay(relay_store, publisher, config)
    task = asyncio.create_task(relay.run(), name="test-relay")
    try:
        yield relay
    finally:
        relay.stop()
        try:
            await asyncio.wait_for(task, 30)
        finally:
            await publisher.close()


class _NoPublisher:
    """For a relay that must only do maintenance: any publish fails the test."""

    ready = False

    async def connect(self) -> None:
        raise AssertionError("retention must not publish")

    async def publish_batch(self, rows: object) -> list[object]:
        raise AssertionError("retention must not publish")

    async def close(self) -> None:
        pass


def maintenance_relay(store: Store, **config: Any) -> Relay:
    """A relay on the real store that never publishes (``config``: fields of ``RelayConfig``):
    for retention and rescue alone."""
    return Relay(RelayStore(store), _NoPublisher(), RelayConfig(**config))
