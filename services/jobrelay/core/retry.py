"""The job retry policy, built on the one jittered exponential backoff of jobrelay
(``jobrelay_client/backoff.py``, shared with the slim client: standard library only)."""

from __future__ import annotations

import random
from dataclasses import dataclass

from jobrelay_client.backoff import backoff as backoff, backoff_ceiling as backoff_ceiling

UNKNOWN_TYPE_MAX_DELAY = 60.0


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
