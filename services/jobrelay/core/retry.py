"""Backoff: one jittered exponential delay for every wait in jobrelay (job retries, publish
retries, outages), and the job retry policy built on it."""

from __future__ import annotations

import random
from dataclasses import dataclass

UNKNOWN_TYPE_MAX_DELAY = 60.0


def backoff_ceiling(failures: int, base: float, cap: float) -> float:
    """``base * 2**(failures - 1)``, at most ``cap``: the upper bound after ``failures``
    consecutive failures (1-based; 0 counts as 1)."""
    return min(cap, base * 2.0 ** min(max(0, failures - 1), 64))


def backoff(failures: int, base: float, cap: float, rng: random.Random | None = None) -> float:
    """Equal jitter: uniform in [ceiling/2, ceiling]. Half the ceiling is kept fixed so delays
    grow with the failures (a test can see them grow), the other half spreads a burst."""
    ceiling = backoff_ceiling(failures, base, cap)
    return ceiling / 2 + (rng or random).uniform(0, ceiling / 2)


@dataclass(frozen=True)
class RetryPolicy:
    base_seconds: float = 1.0
    max_seconds: float = 300.0

    def ceiling(self, attempt: int) -> float:
        """The upper bound of the delay after failed attempt number ``attempt`` (1-based)."""
        return backoff_ceiling(attempt, self.base_seconds, self.max_seconds)

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Delay before the next attempt (equal jitter, see ``backoff``)."""
        return backoff(attempt, self.base_seconds, self.max_seconds, rng)

    def unknown_type_delay(self, rng: random.Random | None = None) -> float:
        """How long a job whose type a consumer did not know waits before it is offered again:
        uniform in [c/2, c], c = the maximum retry delay kept within 1 s and a minute, so the
        new consumers of a rolling deploy get it soon and an old one never spins on it."""
        ceiling = min(UNKNOWN_TYPE_MAX_DELAY, max(1.0, self.max_seconds))
        return backoff(1, ceiling, ceiling, rng)
