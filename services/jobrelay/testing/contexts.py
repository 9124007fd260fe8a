"""``make_context``: the ``JobContext`` a consumer would give, keeping the handler's progress
(docs/testing-handlers.md)."""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from jobrelay.consumer.handler_call import handler_logger
from jobrelay.core.bounds import DEFAULT_MAX_ATTEMPTS
from jobrelay.core.durable import DurableRun
from jobrelay.core.registry import JobContext, JobDefinition
from jobrelay.testing.durable import InMemoryDurableStore


class Progress(NamedTuple):
    """One ``context.progress(fraction, message)`` the handler reported."""

    fraction: float
    message: str | None


@dataclass(frozen=True)
class RecordingContext(JobContext):
    """A ``JobContext`` that keeps every progress report, in order, in ``reports``."""

    reports: list[Progress] = field(default_factory=list, repr=False, compare=False)


def make_context(
    job_type: str | JobDefinition[Any, Any, Any] = "test.job",
    *,
    attempt: int = 1,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    job_id: uuid.UUID | None = None,
    results_dir: Path | None = None,
    parent_results: Mapping[str, Any] | None = None,
    store: InMemoryDurableStore | None = None,
) -> RecordingContext:
    """The context a consumer would give attempt ``attempt`` of ``max_attempts`` of a job of
    ``job_type`` (a name or a definition): a fresh job id unless given, a new temporary
    folder as ``results_dir`` unless given (removed when the test process exits; pass
    pytest's ``tmp_path`` to keep it), the ``jobrelay.handler`` logger, and in a workflow its
    parents' ``parent_results`` by ref. Its progress reports are kept in ``context.reports``.
    ``ValueError`` for an attempt no consumer runs (below 1, or past ``max_attempts``).
    ``store``: its durable calls (``context.step``, ``sleep``...) are recorded there, the job
    claimed for this attempt (``run_job`` gives its own context a fresh store)."""
    name = job_type.name if isinstance(job_type, JobDefinition) else job_type
    _check_attempt(attempt, max_attempts)
    job_id = job_id or uuid.uuid4()
    reports: list[Progress] = []
    durable = None if store is None else claimed_run(store, name, job_id, attempt, max_attempts)
    return RecordingContext(
        job_id=job_id,
        job_type=name,
        attempt=attempt,
        max_attempts=max_attempts,
        results_dir=results_dir or _temporary_results_dir(),
        logger=handler_logger(job_id, name, attempt),
        parent_results=dict(parent_results or {}),
        progress_sink=lambda fraction, message: reports.append(Progress(fraction, message)),
        durable=durable,
        reports=reports,
    )


def claimed_run(
    store: InMemoryDurableStore, name: str, job_id: uuid.UUID, attempt: int, max_attempts: int
) -> DurableRun:
    """The durable calls of attempt ``attempt`` of the job, claimed in ``store``."""
    job = store.add_job(name, job_id=job_id, max_attempts=max_attempts)
    job.attempts = attempt - 1
    fence = store.claim(job.id)
    return DurableRun(store, fence, store.records(job.id), now=store.clock.now())


def _check_attempt(attempt: int, max_attempts: int) -> None:
    for option, value in (("attempt", attempt), ("max_attempts", max_attempts)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{option} is a whole number of at least 1, not {value!r}")
    if attempt > max_attempts:
        raise ValueError(
            f"attempt {attempt} of {max_attempts}: a consumer never runs an attempt past the limit"
        )


# The folder the contexts' results_dirs are made in, one a context: removed at the process's
# exit (a TemporaryDirectory's finalizer), not one folder left in /tmp per run_job.
_results_root: tempfile.TemporaryDirectory[str] | None = None


def _temporary_results_dir() -> Path:
    global _results_root
    if _results_root is None:
        _results_root = tempfile.TemporaryDirectory(prefix="jobrelay-test-")
    return Path(tempfile.mkdtemp(dir=_results_root.name))
