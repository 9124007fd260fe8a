"""Backoff: one jittered exponential delay for every wait in jobrelay (the client's retries,
job retries, publish retries, outages). Standard library only: the slim client and the
server's pure core (``jobrelay/core/retry.py``) both read this one copy."""

from __future__ import annotations

import random


def backoff_ceiling(failures: int, base: float, cap: float) -> float:
    """``base * 2**(failures - 1)``, at most ``cap``: the upper bound after ``failures``
    consecutive failures (1-based; 0 counts as 1)."""
    return min(cap, base * 2.0 ** min(max(0, failures - 1), 64))


def backoff(failures: int, base: float, cap: float, rng: random.Random | None = None) -> float:
    """Equal jitter: uniform in [ceiling/2, ceiling]. Half the ceiling is kept fixed so delays
    grow with the failures (a test can see them grow), the other half spreads a burst."""
    ceiling = backoff_ceiling(failures, base, cap)
    return ceiling / 2 + (rng or random).uniform(0, ceiling / 2)
