"""RabbitMQ's ``connection.blocked`` / ``connection.unblocked``, as state the relay can read.

A broker under a memory or disk alarm blocks the connections that publish: it stops reading
from them until the alarm clears. aiormq already holds its writes back meanwhile and announces
the capability to the broker; what it keeps to itself is that it happened and why. ``BlockWatch``
wraps its two handlers for that. They are private to aiormq, whose version the lock fixes; the
alarm test (tests/integration/test_broker_alarm.py) fails if a new version moves them, and
``attach`` then logs that blocks can only be seen as publish timeouts, rather than failing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aio_pika.abc import AbstractConnection

log = logging.getLogger(__name__)

# aiormq.Connection's handlers, as Python mangles their private names.
BLOCKED_HANDLER = "_Connection__handle_connection_blocked"
UNBLOCKED_HANDLER = "_Connection__handle_connection_unblocked"


class BlockWatch:
    """Whether the broker blocks the watched connection, and why (``reason``)."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self._unblocked = asyncio.Event()
        self._unblocked.set()

    @property
    def blocked(self) -> bool:
        return self.reason is not None

    async def wait_unblocked(self) -> None:
        """Returns once unblocked (at once if not blocked)."""
        await self._unblocked.wait()

    def attach(self, connection: AbstractConnection) -> None:
        """Watch a newly opened connection: a new connection starts unblocked (the broker
        blocks it again when it publishes during the alarm)."""
        self._set(None)
        underlying: Any = getattr(getattr(connection, "transport", None), "connection", None)
        on_blocked = getattr(underlying, BLOCKED_HANDLER, None)
        on_unblocked = getattr(underlying, UNBLOCKED_HANDLER, None)
        if on_blocked is None or on_unblocked is None:
            log.warning(
                "this aiormq does not expose connection.blocked: a broker alarm shows only as "
                "publish timeouts",
                extra={"event": "broker_block_unwatched"},
            )
            return
        setattr(underlying, BLOCKED_HANDLER, self._after(on_blocked, self._blocked_by))
        setattr(underlying, UNBLOCKED_HANDLER, self._after(on_unblocked, lambda _: self._set(None)))

    def _blocked_by(self, frame: Any) -> None:
        self._set(str(getattr(frame, "reason", "") or "blocked")[:200])

    def _set(self, reason: str | None) -> None:
        self.reason = reason
        if reason is None:
            self._unblocked.set()
        else:
            self._unblocked.clear()

    @staticmethod
    def _after(
        handler: Callable[[Any], Awaitable[None]], then: Callable[[Any], None]
    ) -> Callable[[Any], Awaitable[None]]:
        async def handle(frame: Any) -> None:
            await handler(frame)
            then(frame)

        return handle
