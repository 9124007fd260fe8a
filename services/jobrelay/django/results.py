"""A jobrelay job as Django's ``TaskResult`` shows it (docs/django.md, "Results").

Built from the row of ``DJANGO_TASK_RESULT`` (services/jobrelay/db/queries.py): the job, its
stored result, its claims and the errors its failed attempts left in the journal.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from jobrelay.core.states import JobState
from jobrelay.django.compat import Task, TaskError, TaskResult, TaskResultStatus

# Django's four statuses, looked up by value: without Django's stubs a type checker takes
# a TextChoices member for the (value, label) tuple it is declared with.
READY = TaskResultStatus("READY")
RUNNING = TaskResultStatus("RUNNING")
SUCCESSFUL = TaskResultStatus("SUCCESSFUL")
FAILED = TaskResultStatus("FAILED")

# How each jobrelay state reads in Django's four.
STATUS_OF_STATE: dict[JobState, TaskResultStatus] = {
    JobState.QUEUED: READY,
    JobState.WAITING: READY,
    JobState.RETRYING: READY,  # ready to be executed again
    JobState.RUNNING: RUNNING,
    JobState.SLEEPING: RUNNING,  # started, and asleep between its attempts (durable execution)
    JobState.SUCCEEDED: SUCCESSFUL,
    JobState.QUARANTINED: FAILED,
    JobState.CANCELLED: FAILED,  # "unable to start", in Django's words
}

# A claim's journal detail names its consumer so: "consumer host:pid".
_CLAIM_DETAIL_PREFIX = "consumer "


def task_result_of(job: Mapping[str, Any], task: Task[Any, Any], backend: str) -> TaskResult[Any]:
    """The ``TaskResult`` of ``job`` (a ``DJANGO_TASK_RESULT`` row), a run of ``task``."""
    payload = _json(job["payload"])
    status = STATUS_OF_STATE[JobState(job["state"])]
    claimed_at: Sequence[datetime] = job["claimed_at"]
    result: TaskResult[Any] = TaskResult(
        task=task,
        id=str(job["id"]),
        status=status,
        enqueued_at=job["created_at"],
        started_at=claimed_at[0] if claimed_at else None,
        finished_at=job["finished_at"] if status in _FINISHED else None,
        last_attempted_at=claimed_at[-1] if claimed_at else None,
        args=payload.get("args", []),
        kwargs=payload.get("kwargs", {}),
        backend=backend,
        errors=[task_error(document) for document in _json(job["errors"])],
        worker_ids=[worker_id(detail) for detail in job["claimed_by"]],
    )
    stored = _json(job["result"])
    if status is SUCCESSFUL and isinstance(stored, dict):
        # Frozen, as Django's own backends set it: the value is not an argument of the class.
        object.__setattr__(result, "_return_value", stored.get("return_value"))
    return result


_FINISHED = frozenset({SUCCESSFUL, FAILED})


def task_error(document: Mapping[str, Any]) -> TaskError:
    """A failed attempt's journal error (``{"class", "message", "traceback"}``, masked) as
    Django's ``TaskError``. jobrelay names a built-in exception by its bare name; Django by
    its dotted path. Without a traceback (none was stored), the message stands in for it."""
    error_class = str(document.get("class") or "Exception")
    path = error_class if "." in error_class else f"builtins.{error_class}"
    text = document.get("traceback") or f"{error_class}: {document.get('message') or ''}"
    return TaskError(exception_class_path=path, traceback=str(text))


def worker_id(claim_detail: str) -> str:
    """The consumer of one claim (``host:pid``), from the claim's journal detail."""
    return claim_detail.removeprefix(_CLAIM_DETAIL_PREFIX)


def _json(value: Any) -> Any:
    # Django's psycopg backend loads jsonb as text (its JSONField decodes it).
    return json.loads(value) if isinstance(value, str) else value
