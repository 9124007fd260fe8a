"""Batch handlers in the consumer (docs/batch-handlers.md). A delivery of a batch type is
claimed as any job's is, and runs under its own lease's heartbeat (``worker.py``); instead of
calling the handler it joins the open batch of its type and ``batch_key`` value here, and waits
for that batch's one call. A batch is called once it holds ``batch_size`` jobs, or
``batch_wait`` seconds after its first joined, or at once when the consumer stops (``drain``).
The list the call returns is mapped to each job's own ``HandlerRun`` (``runs_of``), which the
job's delivery then decides and stores as a single job's, fenced by its own lease token.

A job that leaves before the call (its lease lost, its cancel asked, a shutdown's grace over)
is taken out of its batch; once the call runs it stays in the list, its result dropped
(``BatchContext.cancelled`` says so), and a call all of whose jobs left is cancelled."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from jobrelay.consumer.handler_call import HandlerRun, check_result, invoke
from jobrelay.core.batches import BatchContext, BatchJob
from jobrelay.core.errors import PermanentError, TransientError
from jobrelay.core.registry import JobType

# What a batch handler returned that is not one dict or Exception per job: retried like an
# unexpected error (the next attempt may return the right list).
BATCH_RESULT_INVALID = "batch_result_invalid"


@dataclass(eq=False)
class _Member:
    job: BatchJob
    payload: BaseModel
    run: asyncio.Future[HandlerRun]  # cancelled when the job left the batch


@dataclass(eq=False)
class _Batch:
    job_type: JobType
    slot: tuple[str, Hashable]  # its type's name and batch_key value
    members: list[_Member] = field(default_factory=list)
    timer: asyncio.TimerHandle | None = None
    call: asyncio.Task[None] | None = None


class Batches:
    """A consumer's open batches, one per batch type and ``batch_key`` value."""

    def __init__(self, results_dir: Path) -> None:
        self.results_dir = results_dir
        self.open: dict[tuple[str, Hashable], _Batch] = {}
        self.calls: set[asyncio.Task[None]] = set()
        self.draining = False  # the consumer stops: every batch is called as it is

    async def run(self, job_type: JobType, job: BatchJob, payload: BaseModel) -> HandlerRun:
        """Job ``job``'s part of its batch's call: its own result or error. Never raises but
        on cancel (the job then leaves its batch)."""
        assert job_type.batch is not None
        try:
            key = job_type.batch.key(payload) if job_type.batch.key is not None else None
            hash(key)
        except Exception as error:
            refused = PermanentError(
                f"batch_key failed on the payload: {type(error).__name__}", code="batch_key_failed"
            )
            return HandlerRun(None, refused, 0.0)
        member = _Member(job, payload, asyncio.get_running_loop().create_future())
        batch = self._join(job_type, key, member)
        try:
            return await member.run
        except asyncio.CancelledError:
            self._leave(batch, member)
            raise

    def drain(self) -> None:
        """The consumer stops: call every open batch now, and any batch opened from now on at
        once (the deliveries already begun finish within the grace period)."""
        self.draining = True
        for batch in list(self.open.values()):
            self._call(batch)

    def _join(self, job_type: JobType, key: Hashable, member: _Member) -> _Batch:
        assert job_type.batch is not None
        slot = (job_type.name, key)
        batch = self.open.get(slot)
        if batch is None:
            batch = self.open[slot] = _Batch(job_type, slot)
        batch.members.append(member)
        if len(batch.members) >= job_type.batch.size or self.draining:
            self._call(batch)
        elif batch.timer is None:  # its first job: the wait starts
            loop = asyncio.get_running_loop()
            batch.timer = loop.call_later(job_type.batch.wait_seconds, self._call, batch)
        return batch

    def _call(self, batch: _Batch) -> None:
        """Close the batch (later jobs open another) and call its handler, once."""
        if batch.call is not None:
            return
        if batch.timer is not None:
            batch.timer.cancel()
        if self.open.get(batch.slot) is batch:
            del self.open[batch.slot]
        # A context of its own: not the trace or the log fields of the job that came first.
        call = asyncio.create_task(self._run_call(batch), context=contextvars.Context())
        batch.call = call
        self.calls.add(call)
        call.add_done_callback(self.calls.discard)

    async def _run_call(self, batch: _Batch) -> None:
        members = list(batch.members)
        context = batch_context(
            batch.job_type,
            [member.job for member in members],
            self.results_dir,
            gone=lambda index: members[index].run.done(),
        )
        runs = await call_batch(batch.job_type, context, [member.payload for member in members])
        for member, run in zip(members, runs, strict=True):
            if not member.run.done():
                member.run.set_result(run)

    def _leave(self, batch: _Batch, member: _Member) -> None:
        if batch.call is None:
            batch.members.remove(member)
            if not batch.members:  # nobody waits for it any more
                if batch.timer is not None:
                    batch.timer.cancel()
                if self.open.get(batch.slot) is batch:
                    del self.open[batch.slot]
        elif all(other.run.done() for other in batch.members):
            batch.call.cancel()


def batch_context(
    job_type: JobType,
    jobs: list[BatchJob],
    results_dir: Path,
    *,
    gone: Callable[[int], bool] | None = None,
) -> BatchContext:
    """The context of one call of ``job_type``'s batch handler for ``jobs``; ``gone(i)``: job
    ``i`` left the batch (None: none ever does)."""
    logger = logging.LoggerAdapter(
        logging.getLogger("jobrelay.handler"), {"type": job_type.name, "batch_jobs": len(jobs)}
    )
    extra = {} if gone is None else {"gone": gone}
    return BatchContext(job_type.name, tuple(jobs), results_dir, logger, **extra)


async def call_batch(
    job_type: JobType, context: BatchContext, payloads: list[BaseModel]
) -> list[HandlerRun]:
    """Call the batch handler once under the type's timeout (the whole call's): each job's
    ``HandlerRun``, in order. The call raising (or timing out) is every job's failure. Never
    raises but on cancel."""
    started = time.monotonic()
    name = f"batch-{context.jobs[0].job_id}" if context.jobs else "batch"
    try:
        returned = await invoke(job_type, context, payloads, thread_name=name)
    except Exception as failure:
        return [HandlerRun(None, failure, time.monotonic() - started)] * len(payloads)
    return runs_of(returned, len(payloads), time.monotonic() - started)


def runs_of(returned: Any, count: int, seconds: float) -> list[HandlerRun]:
    """Each job's run from what a batch handler returned for ``count`` jobs: a dict is its
    result (checked as a single job's), an Exception its failure; anything else, or a list
    of the wrong length (then for every job), a ``TransientError`` ``batch_result_invalid``."""
    if not isinstance(returned, list | tuple) or len(returned) != count:
        what = (
            f"{len(returned)} results"
            if isinstance(returned, list | tuple)
            else f"a {type(returned).__name__}"
        )
        invalid = TransientError(
            f"the batch handler returned {what} for {count} jobs: it returns a list of one "
            "dict or Exception per payload, in order",
            code=BATCH_RESULT_INVALID,
        )
        return [HandlerRun(None, invalid, seconds)] * count
    return [_run_of(element, index, seconds) for index, element in enumerate(returned)]


def _run_of(element: Any, index: int, seconds: float) -> HandlerRun:
    if isinstance(element, Exception):
        return HandlerRun(None, element, seconds)
    if not isinstance(element, dict):
        invalid = TransientError(
            f"the batch handler's result {index} is a {type(element).__name__}, neither a "
            "dict nor an Exception",
            code=BATCH_RESULT_INVALID,
        )
        return HandlerRun(None, invalid, seconds)
    try:
        check_result(element)
    except PermanentError as refused:  # invalid_result: quarantined, as a single job's
        return HandlerRun(None, refused, seconds)
    return HandlerRun(element, None, seconds)
