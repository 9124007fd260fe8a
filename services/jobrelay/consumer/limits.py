"""The runtime limits (``type_limits``) as this consumer last read them, read again every
``interval`` (2 s), so an operator's change reaches every consumer within seconds, with no
restart (docs/flow-control.md).

They only choose how a job is claimed (alone, in a transaction that checks its limit, or in a
group): the claim reads the limit in force itself, so a limit holds exactly from the moment its
row is written, and a stale read costs at most one refused group claim.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping

from jobrelay.core.errors import StoreUnavailable
from jobrelay.core.flow import Limit
from jobrelay.eventloop import stopped_within

log = logging.getLogger("jobrelay.consumer")

RUNTIME_LIMITS_INTERVAL = 2.0


class RuntimeLimits:
    def __init__(
        self,
        read: Callable[[], Awaitable[Mapping[str, Limit]]],
        *,
        interval: float = RUNTIME_LIMITS_INTERVAL,
    ) -> None:
        self.read = read
        self.interval = interval
        self.by_type: Mapping[str, Limit] = {}

    def __call__(self) -> Mapping[str, Limit]:
        return self.by_type

    async def refresh(self) -> None:
        """Read them again; through an outage the last read stays."""
        try:
            self.by_type = await self.read()
        except StoreUnavailable as error:
            log.warning(
                "runtime limits not read (%s); the last read stays",
                error,
                extra={"event": "runtime_limits_unread"},
            )

    async def keep_fresh(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self.refresh()
            await stopped_within(stop, self.interval)
