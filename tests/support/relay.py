"""The product's relay (``jobrelay.dispatcher.relay``) and maintenance
(``jobrelay.dispatcher.maintenance``) on the real ``RelayStore`` and ``Publisher``, in the test's
event loop: for consumer tests that need due outbox rows published and expired leases rescued.
Unlike ``running_dispatcher`` (``tests.support.outbox``) it has no listener and no healing
(lost messages, the quarantine sweep), and it polls often. ``one_batch``: what the relay loop
does for each batch, once."""

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
from jobrelay.dispatcher.maintenance import Maintenance, MaintenanceConfig
from jobrelay.dispatcher.relay import BatchResult, Relay
from jobrelay.dispatcher.service import maintenance_config, relay_config


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
    maintenance = Maintenance(
        relay_store,
        dataclasses.replace(maintenance_config(settings), interval=interval),
        relay.metrics,
        wake=relay.wake,
        stopping=relay.stopping,
    )
    tasks = [
        asyncio.create_task(relay.run(), name="test-relay"),
        asyncio.create_task(maintenance.run(), name="test-relay-maintenance"),
    ]
    try:
        yield relay
    finally:
        relay.stop()
        try:
            await asyncio.wait_for(asyncio.gather(*tasks), 30)
        finally:
            await publisher.close()


async def one_batch(relay: Relay) -> BatchResult:
    """Lease, publish and record one batch; raises StoreUnavailable / BrokerUnavailable."""
    batch = await relay.start_batch()
    return BatchResult() if batch is None else await relay.finish_batch(batch)


def store_maintenance(store: Store, **config: Any) -> Maintenance:
    """The dispatcher's maintenance on the real store (``config``: fields of
    ``MaintenanceConfig``): for retention and rescue alone."""
    return Maintenance(RelayStore(store), MaintenanceConfig(**config))
