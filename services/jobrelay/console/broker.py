"""Whether the broker answers, for the pages that act on it: without it a replay or a purge
cannot run, so the pages say so in a banner, their buttons are disabled and their forms are
refused with a flash message.

The check is the API's own ``BrokerProbe`` (``broker/health.py``, which ``/readyz`` uses): one
kept connection, one round trip per check, never a connection per page view. One answer serves
every page view for ``FRESH_SECONDS`` (the overview's script asks every few seconds, per open
tab); a page waits at most ``CHECK_SECONDS`` for it (a probe still running then goes on, for the
next page); and what an action learns (a replay that met no broker, a quarantine report that
read the queue) is an answer too.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from jobrelay.core.errors import BrokerUnavailable

CHECK_SECONDS = 1.0
FRESH_SECONDS = 5.0
BANNER = "Broker unreachable: replay is unavailable."

Probe = Callable[[], Awaitable[None]]


class BrokerCheck:
    """The broker's last known reachability, asked again once it is older than
    ``fresh_seconds``. ``probe`` raises ``BrokerUnavailable`` when the broker does not answer."""

    def __init__(
        self,
        probe: Probe,
        *,
        timeout_seconds: float = CHECK_SECONDS,
        fresh_seconds: float = FRESH_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._probe = probe
        self._timeout_seconds = timeout_seconds
        self._fresh_seconds = fresh_seconds
        self._clock = clock
        self._answer: tuple[float, bool] | None = None  # (until, reachable)
        self._lock = asyncio.Lock()

    async def reachable(self) -> bool:
        async with self._lock:  # page views at once share one check
            if self._answer is not None and self._clock() < self._answer[0]:
                return self._answer[1]
            try:
                await self._probe_within()
            except (BrokerUnavailable, TimeoutError):
                self.learned(reachable=False)
            else:
                self.learned(reachable=True)
            assert self._answer is not None
            return self._answer[1]

    async def _probe_within(self) -> None:
        """The probe, waited for ``timeout_seconds`` at most; not cancelled after that (it is the
        API's shared probe), its late answer dropped."""
        probe = asyncio.ensure_future(self._probe())
        probe.add_done_callback(_drop_answer)
        async with asyncio.timeout(self._timeout_seconds):
            await asyncio.shield(probe)

    def learned(self, *, reachable: bool) -> None:
        """An answer found by other means (an operation that met the broker, or did not)."""
        self._answer = (self._clock() + self._fresh_seconds, reachable)


def _drop_answer(probe: asyncio.Future[None]) -> None:
    if not probe.cancelled():
        probe.exception()  # retrieved: an answer nobody waited for is no "never retrieved" log
