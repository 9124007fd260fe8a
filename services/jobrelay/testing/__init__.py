"""``jobrelay.testing``: test your handlers, and the code that enqueues jobs, without servers
(docs/testing-handlers.md).

- ``make_context(...)``: a ``JobContext`` for calling a handler yourself, which keeps the
  progress the handler reports (``context.reports``).
- ``run_job(charge, payload)`` / ``await run_job_async(...)``: run a handler as a consumer
  would, and get its ``Verdict``: the payload checked against the type's model, the type's
  timeout enforced, a plain ``def`` run in a thread, the result checked, and the outcome decided
  by the consumer's own code (``consumer/handler_call.py``, ``core/jobs.py::decide_outcome``):
  succeeded, retrying after a delay, or quarantined, with the error code and message the job
  would show.
- ``run_batch(send, [payload, ...])`` / ``await run_batch_async(...)``: one call of a batch
  handler (docs/batch-handlers.md) as a consumer makes it, and each job's ``Verdict``.
- ``Recorder``: an in-memory stand-in for ``jobrelay.configure``'s client and for
  ``jobrelay.enqueue`` / ``enqueue_async``. ``with recorder.install():`` every enqueue (a
  definition's, with or without ``connection=``, and ``jobrelay.enqueue(...)``) is recorded and
  answered as jobrelay would: a fresh job, the same job again for the same key and request,
  ``jobrelay.IdempotencyConflict`` for another request under a used key.
- ``run_durable(order, payload, signals=..., children=...)`` / ``await run_durable_async``: a
  durable handler's whole life (docs/durable-execution.md) in memory, attempt after attempt:
  its steps recorded, its sleeps fast-forwarded on a ``FakeClock``, its signals given up front,
  on a schedule (``Signal``) or from ``on_sleep``, its children answered by a stub or a handler.
  Its ``DurableVerdict`` holds every attempt's ``Verdict`` and what the job recorded. Under it,
  ``InMemoryDurableStore``, the ``DurableStore`` port in memory.
"""

from jobrelay.testing.batches import run_batch, run_batch_async
from jobrelay.testing.contexts import Progress, RecordingContext, make_context
from jobrelay.testing.durable import ChildEnd, FakeClock, InMemoryDurableStore, Sleep
from jobrelay.testing.lives import (
    DurableVerdict,
    Signal,
    SleepingJob,
    run_durable,
    run_durable_async,
)
from jobrelay.testing.recorder import AsyncRecorder, RecordedJob, Recorder, recording
from jobrelay.testing.verdicts import LostLease, Slept, Verdict, run_job, run_job_async

__all__ = [
    "AsyncRecorder",
    "ChildEnd",
    "DurableVerdict",
    "FakeClock",
    "InMemoryDurableStore",
    "LostLease",
    "Progress",
    "RecordedJob",
    "Recorder",
    "RecordingContext",
    "Signal",
    "Sleep",
    "SleepingJob",
    "Slept",
    "Verdict",
    "make_context",
    "recording",
    "run_batch",
    "run_batch_async",
    "run_durable",
    "run_durable_async",
    "run_job",
    "run_job_async",
]
