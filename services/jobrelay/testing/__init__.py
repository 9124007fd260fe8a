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
- ``Recorder``: an in-memory stand-in for ``jobrelay.configure``'s client and for
  ``jobrelay.enqueue`` / ``enqueue_async``. ``with recorder.install():`` every enqueue (a
  definition's, with or without ``connection=``, and ``jobrelay.enqueue(...)``) is recorded and
  answered as jobrelay would: a fresh job, the same job again for the same key and request,
  ``jobrelay.IdempotencyConflict`` for another request under a used key.
"""

from jobrelay.testing.contexts import Progress, RecordingContext, make_context
from jobrelay.testing.recorder import AsyncRecorder, RecordedJob, Recorder, recording
from jobrelay.testing.verdicts import Verdict, run_job, run_job_async

__all__ = [
    "AsyncRecorder",
    "Progress",
    "RecordedJob",
    "Recorder",
    "RecordingContext",
    "Verdict",
    "make_context",
    "recording",
    "run_job",
    "run_job_async",
]
