"""The jobrelay API from Python (httpx): the slim client, ``pip install jobrelay-client``,
with httpx its only dependency (docs/installing.md). The full package's ``jobrelay.Client``
(``jobrelay/client/``) is this one, re-exported::

    from jobrelay_client import Client        # jobrelay-client alone
    from jobrelay import Client               # the same class, with jobrelay installed

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
  the jobs of a ``Workflow`` (``jobrelay_client.Workflow``, the very class
  ``jobrelay.Workflow`` is) as one graph (``POST /v1/workflows``), retried with the same key
  like a submission; ``get_workflow(id)``, ``cancel_workflow(id)``. The view has
  ``.id``, ``.state``, ``.on_failure``, ``.jobs`` (ref -> ``WorkflowJob``) and ``.counts``.
- ``submit`` and ``submit_many`` take the order and submission policies (``sequence_key``,
  ``unique_for_seconds``, ``on_duplicate``, ``debounce_seconds``, ``debounce_max_seconds``,
  ``throttle_key``; docs/flow-control.md); the ``Job`` says ``deduplicated`` / ``debounced``.
- An error answer raises ``ApiError`` (``status``, ``code``, ``detail``, ``retry_after``);
  409 ``idempotency_conflict`` raises its subclass ``IdempotencyConflict``, 409
  ``duplicate_job`` ``DuplicateJobError`` (``job_id``), 429 ``throttled`` ``ThrottledError``
  (never sent again: ``retry_after`` says when one would be taken). The API still
  unreachable after the retries: the last ``httpx.TransportError``. No error holds the token.

Every name is imported on first use (``__getattr__``), so that the server's pure core, which
reads the standard-library modules of this package (``bounds.py``, ``backoff.py``, ``flow.py``,
``workflows.py``), loads no httpx.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jobrelay_client.aio import AsyncClient
    from jobrelay_client.errors import (
        ApiError,
        DuplicateJobError,
        IdempotencyConflict,
        JobFinished,
        ThrottledError,
    )
    from jobrelay_client.models import (
        Job,
        JobLinks,
        Progress,
        Signal,
        Step,
        WorkflowJob,
        WorkflowView,
    )
    from jobrelay_client.sync import Client
    from jobrelay_client.workflows import OnFailure, Workflow

# Each public name -> the module that defines it.
_MODULES = {
    "AsyncClient": "aio",
    "Client": "sync",
    **dict.fromkeys(
        ("ApiError", "DuplicateJobError", "IdempotencyConflict", "JobFinished", "ThrottledError"),
        "errors",
    ),
    **dict.fromkeys(
        ("Job", "JobLinks", "Progress", "Signal", "Step", "WorkflowJob", "WorkflowView"), "models"
    ),
    **dict.fromkeys(("OnFailure", "Workflow"), "workflows"),
}

__all__ = [
    "ApiError",
    "AsyncClient",
    "Client",
    "DuplicateJobError",
    "IdempotencyConflict",
    "Job",
    "JobFinished",
    "JobLinks",
    "OnFailure",
    "Progress",
    "Signal",
    "Step",
    "ThrottledError",
    "Workflow",
    "WorkflowJob",
    "WorkflowView",
]


def __getattr__(name: str) -> Any:
    if name not in _MODULES:
        raise AttributeError(f"module 'jobrelay_client' has no attribute {name!r}")
    return getattr(importlib.import_module(f"jobrelay_client.{_MODULES[name]}"), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_MODULES))
