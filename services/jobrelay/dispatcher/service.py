"""``jobrelay dispatcher``: wire settings, the database, the broker and the listener, then relay
until SIGTERM/SIGINT (which finish the current batch and exit 0)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket

from jobrelay.broker.depth import BrokerDepths
from jobrelay.broker.publisher import Publisher
from jobrelay.core.errors import ConfigurationError
from jobrelay.core.registry import Registry
from jobrelay.core.settings import Settings, mask_url, parse_type_queues
from jobrelay.db.listener import Listener, listen_url_for
from jobrelay.db.relay_store import RelayStore
from jobrelay.db.schedule_store import ScheduleStore
from jobrelay.db.store import Store
from jobrelay.dispatcher.healing import Healer
from jobrelay.dispatcher.maintenance import Maintenance, MaintenanceConfig
from jobrelay.dispatcher.metrics import DispatcherMetrics
from jobrelay.dispatcher.relay import Relay, RelayConfig
from jobrelay.dispatcher.scheduler import Scheduler, scheduler_config
from jobrelay.dispatcher.window import RelayWindow, short_routes
from jobrelay.handlers.loading import registry_for

log = logging.getLogger(__name__)


def maintenance_interval(settings: Settings) -> float:
    """Expired job leases are rescued within a quarter of a lease (5 s at most)."""
    return min(5.0, max(0.2, settings.lease_seconds / 4))


def relay_config(settings: Settings) -> RelayConfig:
    return RelayConfig(
        batch_size=settings.dispatch_batch_size,
        poll_interval=settings.poll_interval_seconds,
        # Leased rows must outlive a whole pipelined batch (bounded by the publish timeout)
        # plus the statement that records its outcome.
        lease_seconds=2 * settings.publish_timeout_seconds + 2,
        maintenance_interval=maintenance_interval(settings),
    )


def maintenance_config(settings: Settings) -> MaintenanceConfig:
    return MaintenanceConfig(
        interval=maintenance_interval(settings),
        retention_seconds=settings.retention_hours * 3600,
        quarantine_retention_seconds=(
            None
            if settings.quarantine_retention_hours is None
            else settings.quarantine_retention_hours * 3600
        ),
    )


class Dispatcher:
    """One dispatcher: the relay loop with its relay window (priorities, pauses and the
    registry's limits), its listener, its maintenance and the scheduler of the registry's
    periodic schedules (``registry``: JOBRELAY_HANDLERS when None). ``run()`` returns after
    ``stop()``."""

    def __init__(
        self,
        settings: Settings,
        metrics: DispatcherMetrics | None = None,
        registry: Registry | None = None,
    ) -> None:
        self.settings = settings
        self.metrics = metrics or DispatcherMetrics()
        self.store = Store.connect(
            settings.database_url,
            pool_size=3,
            application_name="jobrelay-dispatcher",
            generic_plans=True,
            pool_mode=settings.pool_mode,
            schema=settings.database_schema,
        )
        type_queues = parse_type_queues(settings.type_queues)
        self.publisher = Publisher(
            settings.amqp_url,
            publish_timeout=settings.publish_timeout_seconds,
            delivery_limit=settings.delivery_limit,
            type_queues=type_queues,
            group_size=settings.quorum_group_size,
        )
        self.healer = Healer(self.store, settings, self.metrics, type_queues=type_queues)
        self.registry = registry if registry is not None else registry_for(settings)
        self.depths = BrokerDepths(settings.amqp_url)
        self.window = RelayWindow(
            RelayStore(self.store),
            self.depths,
            settings.relay_window,
            routes=short_routes(type_queues),
            code_limits=self.registry.limits() if self.registry is not None else {},
            metrics=self.metrics,
        )
        self.relay = Relay(
            RelayStore(self.store),
            self.publisher,
            relay_config(settings),
            self.metrics,
            name=f"{socket.gethostname()}:{os.getpid()}",
            window=self.window,
        )
        self.maintenance = Maintenance(
            RelayStore(self.store),
            maintenance_config(settings),
            self.metrics,
            healing=self.healer.run_once,
            wake=self.relay.wake,
            stopping=self.relay.stopping,
        )
        # None behind a transaction pooler with no direct URL: the relay polls alone.
        listen_url = listen_url_for(settings, "dispatcher")
        self.listener = (
            None
            if listen_url is None
            else Listener(listen_url, self.relay.wake, on_state=self.metrics.listener_connected.set)
        )
        self.scheduler = Scheduler(
            ScheduleStore(self.store),
            self.registry,
            scheduler_config(settings),
            self.metrics,
        )

    def stop(self) -> None:
        self.relay.stop()

    async def run(self) -> None:
        beside = [
            asyncio.create_task(self.maintenance.run(), name="dispatcher-maintenance"),
            asyncio.create_task(
                self.scheduler.run(self.relay.stopping), name="dispatcher-scheduler"
            ),
        ]
        if self.listener is not None:
            beside.append(asyncio.create_task(self.listener.run(), name="dispatcher-listener"))
        try:
            await self.relay.run()
        finally:
            for task in beside:
                task.cancel()
            await asyncio.gather(*beside, return_exceptions=True)
            await self.healer.close()
            await self.depths.close()
            await self.publisher.close()
            await self.store.close()


async def run_dispatcher(settings: Settings, handlers: str | None = None) -> int:
    """The ``jobrelay dispatcher`` command; ``handlers`` (``--handlers``) overrides
    JOBRELAY_HANDLERS, whose schedules this dispatcher makes."""
    try:
        registry = registry_for(settings, handlers)
    except (ConfigurationError, ValueError) as error:
        log.error("cannot start: %s", error, extra={"event": "configuration_error"})
        return 2
    log.info(
        "schedules: %s",
        ", ".join(f"{s.name} ({s.type}, {s.timing})" for s in registry.schedules.values())
        or "none",
        extra={"event": "schedules", "schedules": ",".join(sorted(registry.schedules))},
    )
    dispatcher = Dispatcher(settings, registry=registry)
    if settings.metrics_port:
        dispatcher.metrics.serve(settings.metrics_port)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(signum, dispatcher.stop)
    log.info(
        "dispatcher starting (database %s, broker %s, batch %d, window %s)",
        mask_url(settings.database_url),
        mask_url(settings.amqp_url),
        settings.dispatch_batch_size,
        settings.relay_window or "off",
        extra={"event": "started"},
    )
    await dispatcher.run()
    log.info("dispatcher stopped", extra={"event": "stopped"})
    return 0
