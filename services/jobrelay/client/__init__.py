"""The jobrelay API from Python (httpx)::

    from jobrelay import Client

    with Client("http://localhost:8000", token) as client:
        job = client.submit("catalog.export", {"course": "JavaScript"}, key="export-js")
        job = client.get(job.id)
        for queued in client.jobs(state="queued"):
            ...

``AsyncClient`` is the same for asyncio (``async with``, ``await``, ``async for``).

- ``submit(type, payload, *, key=None, max_attempts=None, run_at=None, delay=None) -> Job``:
  a random key when none is given. Connection errors, timeouts, 429, 502, 503 and 504 are
  retried a bounded number of times (``retries``, default 5) with the SAME key, after a
  jittered exponential backoff or as long as the answer's ``Retry-After`` says (at most a
  minute); the API makes one job of them. ``run_at`` (an aware datetime) or ``delay``
  (seconds or a timedelta): not run before then.
- ``submit_many([{"type": ..., "payload": ..., "key": ...}, ...])``: up to 1,000 jobs in one
  request (``POST /v1/jobs/batch``), one ``Job`` or ``ApiError`` per job, in order.
- ``signal(id, name, value, *, idempotency_key=None) -> Signal``: a signal for the job's
  ``context.wait_for_signal(name)`` (``POST /v1/jobs/{id}/signals/{name}``), retried with the
  same key; a finished job raises ``JobFinished`` (409 ``job_finished``).
- ``get(id, *, steps=None)`` (``steps="values"``: the recorded steps with their values),
  ``cancel(id)``, ``jobs(state=None, type=None)`` (every page, following
  ``next_cursor``). Reads are retried like submissions; a cancel only where the API surely did
  not act on it (a refused connection, 429, 503), since a repeated cancel answers 409.
- ``wait(id, timeout)``: the job once finished, woken by the API (``?wait=``), or
  ``TimeoutError``.
- ``submit_workflow(workflow, *, key=None, on_failure="cancel_dependents") -> WorkflowView``:
  the jobs of a ``jobrelay.Workflow`` as one graph (``POST /v1/workflows``), retried with the
  same key like a submission; ``get_workflow(id)``, ``cancel_workflow(id)``. The view has
  ``.id``, ``.state``, ``.on_failure``, ``.jobs`` (ref -> ``WorkflowJob``) and ``.counts``.
- ``submit`` and ``submit_many`` take the order and submission policies (``sequence_key``,
  ``unique_for_seconds``, ``on_duplicate``, ``debounce_seconds``, ``debounce_max_seconds``,
  ``throttle_key``; docs/flow-control.md); the ``Job`` says ``deduplicated`` / ``debounced``.
- An error answer raises ``ApiError`` (``status``, ``code``, ``detail``, ``retry_after``);
  409 ``idempotency_conflict`` raises its subclass ``IdempotencyConflict``, 409
  ``duplicate_job`` ``DuplicateJobError`` (``job_id``), 429 ``throttled`` ``ThrottledError``
  (never sent again: ``retry_after`` says when one would be taken). The API still
  unreachable after the retries: the last ``httpx.TransportError``. No error holds the token.
"""

from jobrelay.client.aio import AsyncClient
from jobrelay.client.errors import (
    ApiError,
    DuplicateJobError,
    IdempotencyConflict,
    JobFinished,
    ThrottledError,
)
from jobrelay.client.models import (
    Job,
    JobLinks,
    Progress,
    Signal,
    Step,
    WorkflowJob,
    WorkflowView,
)
from jobrelay.client.sync import Client

__all__ = [
    "ApiError",
    "AsyncClient",
    "Client",
    "DuplicateJobError",
    "IdempotencyConflict",
    "Job",
    "JobFinished",
    "JobLinks",
    "Progress",
    "Signal",
    "Step",
    "ThrottledError",
    "WorkflowJob",
    "WorkflowView",
]
