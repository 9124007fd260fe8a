"""PostgreSQL LISTEN/NOTIFY as a callback, on a connection of its own.

Three channels are listened to: ``channels.OUTBOX_CHANNEL`` (a statement trigger on the outbox:
new rows wake the dispatcher), and on one connection per API process ``channels.CLIENTS_CHANNEL``
(every change of a client's tokens or limit: the API's token cache empties) and
``channels.FINISHED_CHANNEL`` (a job became terminal: its ``?wait`` requests answer). Notifications
sent while the connection is down are lost: every (re)connect calls ``on_notify`` once in case
something was missed, and ``on_state`` tells the caller when it cannot rely on notifications
(the relay polls too; the API then looks every token up, and waiters poll).

LISTEN needs a session of its own: behind PgBouncer's transaction pooling it takes
``listen_database_url`` (a direct connection), and without one nothing listens
(``listen_url_for``; docs/pgbouncer.md).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import psycopg

from jobrelay.core.settings import Settings, mask_url
from jobrelay.db import channels, queries
from jobrelay.db.engine import libpq_url

log = logging.getLogger(__name__)

APPLICATION_NAME = "jobrelay-dispatcher-listen"
API_APPLICATION_NAME = "jobrelay-api-listen"


def listen_url_for(settings: Settings, listener: str) -> str | None:
    """Where ``listener`` ("dispatcher", "API") runs LISTEN: ``listen_database_url`` when set,
    else ``database_url`` in session mode. None in transaction mode without it: a pooler hands
    the session to other clients between transactions, so a LISTEN there would hear nothing
    (or another client's channels); the caller polls, and says so once here."""
    if settings.listen_database_url:
        return settings.listen_database_url
    if settings.pool_mode == "session":
        return settings.database_url
    log.warning(
        "the %s does not LISTEN: JOBRELAY_DATABASE_POOL_MODE=transaction and "
        "JOBRELAY_LISTEN_DATABASE_URL is unset; it polls instead (docs/pgbouncer.md)",
        listener,
        extra={"event": "listener_off", "listener": listener},
    )
    return None


class InRecovery(psycopg.OperationalError):
    """The listening connection's server is in recovery: no longer the primary, so it hears
    no NOTIFY (they are sent on the new primary). ``Listener.run`` reconnects, as for a lost
    connection; ``target_session_attrs=read-write`` in the URL finds the new primary."""


async def _ping_primary(connection: psycopg.AsyncConnection[Any]) -> None:
    cursor = await connection.execute(queries.LISTENER_PING.text)
    row = await cursor.fetchone()
    if row is None or row[0]:
        raise InRecovery("the listening connection's server is in recovery")


class Listener:
    def __init__(
        self,
        database_url: str,
        on_notify: Callable[[], None],
        *,
        listen: str = channels.LISTEN_OUTBOX,
        application_name: str = APPLICATION_NAME,
        on_state: Callable[[bool], None] | None = None,
        on_message: Callable[[str, str], None] | None = None,
        health_check_seconds: float = 30.0,
        max_backoff_seconds: float = 5.0,
    ) -> None:
        """``listen``: one or more LISTEN statements. ``on_message(channel, payload)``, when
        given, receives each notification instead of ``on_notify``, which then only marks a
        (re)connect."""
        self.url = libpq_url(database_url)
        self.listen = listen
        self.application_name = application_name
        self.on_notify = on_notify
        self.on_message = on_message
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
                self.on_notify()  # whatever the caller holds may have changed meanwhile
                delay = min(self.max_backoff_seconds, 0.1 * 2**failures)
                failures += 1
                log.warning(
                    "listener connection lost (%s) at %s (%s); reconnecting in %.1fs",
                    type(error).__name__,
                    mask_url(self.url),
                    self.listen,
                    delay,
                    extra={"event": "listener_lost"},
                )
                await asyncio.sleep(delay)
            else:
                failures = 0

    async def _listen_once(self) -> None:
        connection = await psycopg.AsyncConnection.connect(
            self.url, autocommit=True, application_name=self.application_name, connect_timeout=5
        )
        async with connection:
            await connection.execute(self.listen)
            self.on_state(True)
            log.info(self.listen, extra={"event": "listener_connected"})
            self.on_notify()  # anything sent while we were away
            while True:
                async for notify in connection.notifies(timeout=self.health_check_seconds):
                    if self.on_message is None:
                        self.on_notify()
                    else:
                        self.on_message(notify.channel, notify.payload)
                # A quiet period: make sure the connection is still alive (a half-open TCP
                # connection would otherwise wait forever) and still on the primary.
                await _ping_primary(connection)
