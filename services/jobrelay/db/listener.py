"""New outbox rows as a callback: PostgreSQL LISTEN/NOTIFY on a connection of its own.

The outbox has a statement trigger notifying ``queries.OUTBOX_CHANNEL``. Notifications sent
while this connection is down are lost; the caller polls too (the dispatcher's relay does), and
every (re)connect calls ``on_notify`` once in case something was missed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import psycopg

from jobrelay.core.settings import mask_url
from jobrelay.db import queries as q
from jobrelay.db.engine import libpq_url

log = logging.getLogger(__name__)

APPLICATION_NAME = "jobrelay-dispatcher-listen"


class OutboxListener:
    def __init__(
        self,
        database_url: str,
        on_notify: Callable[[], None],
        *,
        on_state: Callable[[bool], None] | None = None,
        health_check_seconds: float = 30.0,
        max_backoff_seconds: float = 5.0,
    ) -> None:
        self.url = libpq_url(database_url)
        self.on_notify = on_notify
        self.on_state = on_state or (lambda _connected: None)
        self.health_check_seconds = health_check_seconds
        self.max_backoff_seconds = max_backoff_seconds

    async def run(self) -> None:
        """Listen until cancelled, reconnecting with backoff."""
        failures = 0
        while True:
            try:
                await self._listen_once()
            except (psycopg.Error, OSError) as error:
                self.on_state(False)
                delay = min(self.max_backoff_seconds, 0.1 * 2**failures)
                failures += 1
                log.warning(
                    "listener connection lost (%s) at %s; reconnecting in %.1fs",
                    type(error).__name__,
                    mask_url(self.url),
                    delay,
                    extra={"event": "listener_lost"},
                )
                await asyncio.sleep(delay)
            else:
                failures = 0

    async def _listen_once(self) -> None:
        connection = await psycopg.AsyncConnection.connect(
            self.url, autocommit=True, application_name=APPLICATION_NAME, connect_timeout=5
        )
        async with connection:
            await connection.execute(q.LISTEN_OUTBOX)
            self.on_state(True)
            log.info("listening for new outbox rows", extra={"event": "listener_connected"})
            self.on_notify()  # anything sent while we were away
            while True:
                async for _notify in connection.notifies(timeout=self.health_check_seconds):
                    self.on_notify()
                # A quiet period: make sure the connection is still alive (a half-open TCP
                # connection would otherwise wait forever).
                await connection.execute(q.LISTENER_PING)
