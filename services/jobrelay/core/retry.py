"""Retry policy: exponential backoff with full jitter, capped."""

from __future__ import annotations

import random
from dataclasses import dataclass

UNKNOWN_TYPE_MAX_DELAY = 60.0


@dataclass(frozen=True)
class RetryPolicy:
    base_seconds: float = 1.0
    max_seconds: float = 300.0

    def ceiling(self, attempt: int) -> float:
        """The upper bound of the delay after failed attempt number ``attempt`` (1-based)."""
        return min(self.max_seconds, self.base_seconds * 2.0 ** max(0, attempt - 1))

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Delay before the next attempt: uniform in [ceiling/2, ceiling].

        Half the ceiling is kept fixed so delays grow with the attempt number (a test can see
        them grow) while the other half spreads a burst of failures over time.
        """
        ceiling = self.ceiling(attempt)
        return ceiling / 2 + (rng or random).uniform(0, ceiling / 2)

    def unknown_type_delay(self, rng: random.Random | None = None) -> float:
        """How long a job whose type a consumer did not know waits before it is offered again:
        uniform in [c/2, c], c = the maximum retry delay kept within 1 s and a minute, so the
        new consumers of a rolling deploy get it soon and an old one never spins on it."""
        ceiling = min(UNKNOWN_TYPE_MAX_DELAY, max(1.0, self.max_seconds))
        return ceiling / 2 + (rng or random).uniform(0, ceiling / 2)
