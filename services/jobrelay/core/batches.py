"""Batch handlers (docs/flow-control.md, "Batch handlers"): how a type's consumer gathers its
jobs into one call. Pure: the registry states it, the consumer and the testing kit follow it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# A batch: at most this many jobs in one call.
BATCH_SIZE_MAX = 1000
# A batch waits at most this long for more jobs after its first.
BATCH_WAIT_MAX_SECONDS = 60.0


@dataclass(frozen=True)
class Batching:
    """A batch type's gathering: up to ``size`` due jobs of the type in one call (of one
    ``key(payload)`` value when ``key`` is given), waiting up to ``wait_seconds`` after the
    first for more."""

    size: int
    wait_seconds: float = 1.0
    key: Callable[[Any], str] | None = None


def batching_of(
    name: str, size: int | None, wait_seconds: float, key: Callable[[Any], str] | None
) -> Batching | None:
    """``registry.job``'s ``batch_size``, ``batch_wait`` and ``batch_key`` of type ``name``,
    checked; None when ``size`` is None (a handler of one job)."""
    owner = f"job type {name!r}"
    if size is None:
        if key is not None:
            raise ValueError(f"{owner}: batch_key needs a batch_size")
        return None
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= BATCH_SIZE_MAX:
        raise ValueError(f"{owner}: batch_size is a whole number from 1 to {BATCH_SIZE_MAX}")
    if (
        isinstance(wait_seconds, bool)
        or not isinstance(wait_seconds, int | float)
        or not 0 <= wait_seconds <= BATCH_WAIT_MAX_SECONDS
    ):
        raise ValueError(f"{owner}: batch_wait is 0 to {BATCH_WAIT_MAX_SECONDS:g} seconds")
    if key is not None and not callable(key):
        raise ValueError(f"{owner}: batch_key must be a function of the payload")
    return Batching(size, float(wait_seconds), key)
