"""Batch handlers (docs/batch-handlers.md): how a type's consumer gathers its jobs into one
call, and the ``BatchContext`` that call is given. Pure: the registry states it, the consumer
(``consumer/batches.py``) and the testing kit follow it."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from jobrelay.core.errors import PermanentError

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


@dataclass(frozen=True)
class BatchJob:
    """One job of a batch, as its handler sees it: each keeps its own attempts."""

    job_id: uuid.UUID
    attempt: int
    max_attempts: int
    traceparent: str | None = None
    """Its trace context (its ``jobrelay.execute`` span's when tracing is on): a call the
    handler makes for this job alone may carry it on."""

    @property
    def idempotency_key(self) -> str:
        """Stable across attempts, as ``JobContext.idempotency_key`` (the same text)."""
        return f"jobrelay:{self.job_id}"


def _never_gone(_index: int) -> bool:
    return False


@dataclass(frozen=True)
class BatchContext:
    """What a batch handler knows about its call: ``jobs[i]`` is the job of ``payloads[i]``.

    No durable calls (steps, sleeps, signals, children) and no progress: one call serves many
    jobs, and each of those is recorded per job. ``cancelled(i)``: the result of job ``i``
    will be dropped (its client cancelled it, or its lease was lost): a handler may skip its
    work. The list it returns still holds one element per job, in order."""

    job_type: str
    jobs: tuple[BatchJob, ...]
    results_dir: Path
    logger: logging.LoggerAdapter[logging.Logger]
    gone: Callable[[int], bool] = field(default=_never_gone, repr=False, compare=False)

    def cancelled(self, index: int) -> bool:
        """Whether job ``index`` (of ``jobs``) left the batch: its outcome is no longer this
        call's. Cheap: no database read (the job's own heartbeat found it out)."""
        return self.gone(index)

    # A batch handler has no durable calls: say so rather than fail with an AttributeError.
    def step(self, *_args: Any, **_kwargs: Any) -> NoReturn:
        _no_durable_calls("step")

    def sleep(self, *_args: Any, **_kwargs: Any) -> NoReturn:
        _no_durable_calls("sleep")

    def wait_for_signal(self, *_args: Any, **_kwargs: Any) -> NoReturn:
        _no_durable_calls("wait_for_signal")

    def run_child(self, *_args: Any, **_kwargs: Any) -> NoReturn:
        _no_durable_calls("run_child")

    def start_child(self, *_args: Any, **_kwargs: Any) -> NoReturn:
        _no_durable_calls("start_child")


def _no_durable_calls(name: str) -> NoReturn:
    # Permanent: a retry would call it again; the batch's jobs are quarantined with the code.
    raise PermanentError(
        f"context.{name}: a batch handler has no durable calls (docs/batch-handlers.md); "
        "make the type a handler of one job to record steps, sleeps, signals or children",
        code="batch_durable_call",
    )
