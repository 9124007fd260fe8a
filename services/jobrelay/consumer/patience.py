"""The consumer through a database outage (docs/failure-points.md): a claim, a deferral or a
final write is retried with growing, jittered pauses up to a patience, and then given up, for
the delivery to be requeued instead; the broker's own retries wait longer. Back off, never spin.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from jobrelay.consumer.metrics import ConsumerMetrics
from jobrelay.core.errors import StoreUnavailable
from jobrelay.core.retry import backoff

log = logging.getLogger("jobrelay.consumer")
T = TypeVar("T")


class Backoff:
    """Growing, jittered pauses while the database is unreachable: back off, never spin.

    Counted per call being retried, not shared by the workers: a shared count would grow with
    the number of workers and keep all of them asleep long after the database is back.
    """

    def __init__(self, base: float = 0.1, cap: float = 2.0, rng: random.Random | None = None):
        self.base = base
        self.cap = cap
        self.rng = rng or random.Random()

    def before_requeue(self) -> float:
        """The pause before a delivery is handed back because the database stayed away."""
        return backoff(1, self.cap, self.cap, self.rng)

    def pause(self, failures: int) -> float:
        return backoff(failures, self.base, self.cap, self.rng)

    def before_republish(self, failures: int) -> float:
        """The pause before another try at a publish to the broker: ten times the database's,
        for a robust connection's reconnect takes seconds."""
        return backoff(failures, 10 * self.base, 10 * self.cap, self.rng)


class Patience:
    """``await patiently(call)``: the call, retried through a database outage with growing
    pauses for up to ``seconds``; past that its ``StoreUnavailable`` is raised."""

    def __init__(self, seconds: float, backoff: Backoff, metrics: ConsumerMetrics) -> None:
        self.seconds = seconds
        self.backoff = backoff
        self.metrics = metrics

    async def __call__(self, call: Callable[[], Awaitable[T]]) -> T:
        deadline = time.monotonic() + self.seconds
        failures = 0
        while True:
            try:
                return await call()
            except StoreUnavailable:
                self.metrics.store_errors.inc()
                failures += 1
                pause = self.backoff.pause(failures)
                if time.monotonic() + pause > deadline:
                    raise
                log.warning(
                    "database unreachable; retrying in %.2fs",
                    pause,
                    extra={"event": "store_unavailable"},
                )
                await asyncio.sleep(pause)
