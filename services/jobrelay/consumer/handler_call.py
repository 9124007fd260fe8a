"""Calling a job's handler (docs/life-of-a-job.md, step 3): under its type's timeout, a plain
``def`` handler in a thread of its own, and its result checked before anything is stored. Its
context carries the attempt's durable calls (docs/durable-execution.md): a sleep or a wait ends
the run with a ``DurableInterrupt``, which is no failure of the handler's."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

from pydantic import BaseModel

from jobrelay.core.durable import DurableInterrupt, DurableRun, DurableStore, Fence
from jobrelay.core.errors import PermanentError, RequestError, TransientError
from jobrelay.core.execution import Claimed
from jobrelay.core.failures import MESSAGE_MAX_BYTES, Failure, class_name, cut_head, storable
from jobrelay.core.jobs import Job
from jobrelay.core.jsonvalues import unstorable_json
from jobrelay.core.registry import AsyncHandler, JobContext, JobType, ProgressSink, SyncHandler


@dataclass(frozen=True)
class HandlerRun:
    result: dict[str, Any] | None
    error: BaseException | None
    seconds: float
    interrupt: DurableInterrupt | None = None
    """The attempt ended by a durable call: ``Suspended`` (the store put the job to sleep) or
    ``LeaseGone`` (nothing recorded, the lease is not ours). No failure of the handler's: its
    caller looks here before it decides anything (it is the run's ``error`` too, so that a
    caller that only looks there never takes the run for a success)."""


def durable_run(
    claim: Claimed, store: DurableStore | None, lease_seconds: float
) -> DurableRun | None:
    """The attempt's durable calls, fenced by its claim, with the steps the claim read. Their
    clock is the database's at the claim (its lease ran from then): a recorded sleep whose wake
    time has come returns at once. None without a store (a durable call then says so)."""
    job = claim.job
    if store is None or job.lease_until is None:
        return None
    return DurableRun(
        store,
        Fence(job.id, claim.lease_token, job.attempts),
        {record.name: record for record in job.steps or ()},
        now=job.lease_until - timedelta(seconds=lease_seconds),
    )


def job_context(
    job: Job,
    results_dir: Path,
    *,
    parent_results: Mapping[str, Any] | None = None,
    progress_sink: ProgressSink | None = None,
    durable: DurableRun | None = None,
) -> JobContext:
    """What the handler of a claimed job is given besides its payload. ``durable``: its steps,
    sleeps, signals and children (``durable_run``), run on this event loop."""
    return JobContext(
        job_id=job.id,
        job_type=job.type,
        attempt=job.attempts,
        max_attempts=job.max_attempts,
        results_dir=results_dir,
        logger=handler_logger(job.id, job.type, job.attempts),
        parent_results=parent_results or {},
        progress_sink=progress_sink,
        durable=durable,
        loop=asyncio.get_running_loop() if durable is not None else None,
    )


def handler_logger(
    job_id: uuid.UUID, job_type: str, attempt: int
) -> logging.LoggerAdapter[logging.Logger]:
    """``context.logger``: the ``jobrelay.handler`` logger, each line naming its attempt
    (the testing kit's contexts log the same way, ``jobrelay/testing/contexts.py``)."""
    return logging.LoggerAdapter(
        logging.getLogger("jobrelay.handler"),
        {"job_id": str(job_id), "attempt": attempt, "type": job_type},
    )


async def call_handler(job_type: JobType, context: JobContext, payload: BaseModel) -> HandlerRun:
    """Run the handler once: its result, or the error it ended with (a timeout is a
    ``TransientError`` with the code ``timeout``), or the durable call that ended it
    (``interrupt``), and how long it took. Never raises but on cancel."""
    started = time.monotonic()
    try:
        result = await invoke(job_type, context, payload, thread_name=context.job_id)
        check_result(result)
    except Exception as failure:
        return HandlerRun(None, failure, time.monotonic() - started)
    except DurableInterrupt as interrupt:  # a BaseException: past the handler's own excepts
        return HandlerRun(None, interrupt, time.monotonic() - started, interrupt)
    return HandlerRun(result, None, time.monotonic() - started)


async def invoke(job_type: JobType, context: Any, argument: Any, *, thread_name: object) -> Any:
    """The type's handler called once with ``(context, argument)`` under its timeout (then a
    ``TransientError`` with the code ``timeout``), a plain ``def`` in a thread of its own named
    after ``thread_name`` (formatted only then: an ``async def`` pays nothing for it): what it
    returned, or its error raised. A job's handler and a batch handler
    (``consumer/batches.py``) alike."""
    assert job_type.handler is not None
    try:
        async with asyncio.timeout(job_type.timeout_seconds):
            if job_type.runs_in_thread:
                handler = cast(SyncHandler, job_type.handler)
                return await _in_thread(handler, context, argument, thread_name)
            return await cast(AsyncHandler, job_type.handler)(context, argument)
    except TimeoutError as timed_out:
        error = TransientError(
            f"handler timed out after {job_type.timeout_seconds:g}s", code="timeout"
        )
        # Its traceback shows where the handler was waiting when the time ran out.
        raise error from timed_out


async def _in_thread(handler: SyncHandler, context: Any, argument: Any, name: object) -> Any:
    """Run a plain `def` handler in a thread of its own and wait for it.

    A thread cannot be interrupted: a timeout, a lost lease or a shutdown stops the wait, and
    the thread runs on to its end with its result dropped. It is a daemon thread, so that such
    a thread never keeps a stopping consumer from exiting (a pool's threads would be joined at
    exit), and it is not taken from the loop's default executor, which DNS lookups share.
    Whatever the handler raises reaches the awaiting task, a ``BaseException`` too: a durable
    call's ``Suspended`` or ``LeaseGone`` ends its attempt as on the event loop.
    """
    loop = asyncio.get_running_loop()
    done: asyncio.Future[Any] = loop.create_future()
    call = contextvars.copy_context()

    def settle(result: Any, error: BaseException | None) -> None:
        if done.done():  # the wait was given up
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(result)

    def run() -> None:
        result: Any = None
        error: BaseException | None = None
        try:
            result = call.run(handler, context, argument)
        except StopIteration as stopped:  # a future cannot hold one
            error = RuntimeError("the handler raised StopIteration")
            error.__cause__ = stopped
        except BaseException as failure:
            error = failure
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=run, name=f"jobrelay-handler-{name}", daemon=True).start()
    return await done


def check_result(result: Any) -> None:
    """Refuse (``PermanentError``, code ``invalid_result``) a result the store cannot keep."""
    if not isinstance(result, dict):
        raise PermanentError("the handler returned no dict", code="invalid_result")
    try:
        # What the store will write: a cycle or a nesting too deep for the encoder fails here
        # (the walk of unstorable_json would not end on a cycle).
        json.dumps(result, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        raise PermanentError("the handler's result is not JSON", code="invalid_result") from None
    problem = unstorable_json(result)  # what jsonb refuses: NUL, NaN, keys that are no strings
    if problem is not None:
        raise PermanentError(
            f"the handler's result cannot be stored as JSON: {problem}", code="invalid_result"
        )


def refusal_failure(error: RequestError | PermanentError, mask: Callable[[str], str]) -> Failure:
    """Why a claimed job was not run (its payload does not match its type, or the type has no
    handler): no traceback (the handler never ran), and for a payload the fields that failed
    (never their values). The worker's and the testing kit's (``jobrelay/testing/verdicts.py``)."""
    message = str(error)
    errors = getattr(error, "extra", {}).get("errors")
    if errors:
        message = f"{message}: {json.dumps(errors, ensure_ascii=False)}"
    message = cut_head(storable(mask(message)), MESSAGE_MAX_BYTES)
    return Failure(class_name(type(error)), message)
