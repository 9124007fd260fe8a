"""The errors the client raises for an answer that is not a success."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any


class ApiError(Exception):
    """The API answered with an error (a problem+json body, RFC 9457), or with something that
    is not a job. ``status`` is the HTTP status, ``code`` the problem's stable code
    (``idempotency_conflict``, ``job_not_found``, ``rate_limited``...; ``http_<status>`` when
    the body had none, as from a proxy), ``detail`` what it says, ``retry_after`` the seconds
    the server asked to wait (``Retry-After``) or None.

    ``problem`` is the whole problem body as a dict (empty when the answer had none): ``type``,
    ``title``, ``status``, ``code``, ``detail``, and what a problem adds, e.g. the ``job_id``
    of a 409 ``idempotency_conflict``, or the ``errors`` of a 422 ``validation_error``, one
    ``{"loc": [...], "msg": ..., "type": ...}`` per invalid field. The message names the first
    few of those fields: ``422 validation_error: The request is not valid (body.max_attempts:
    Input should be a valid integer)``.

    Neither the message nor the repr holds the request: the token is never in an error."""

    def __init__(
        self,
        status: int,
        code: str,
        detail: str,
        *,
        retry_after: float | None = None,
        problem: Mapping[str, Any] | None = None,
    ) -> None:
        self.problem: dict[str, Any] = dict(problem or {})
        super().__init__(f"{status} {code}: {detail}{_field_errors(self.problem)}")
        self.status = status
        self.code = code
        self.detail = detail
        self.retry_after = retry_after

    def __repr__(self) -> str:
        return f"{type(self).__name__}(status={self.status}, code={self.code!r})"

    @classmethod
    def from_answer(
        cls, status: int, body: bytes, *, reason: str, retry_after: float | None = None
    ) -> ApiError:
        """The error for an answer: of the class its code names (``IdempotencyConflict``),
        with the problem's code and detail, or ``http_<status>`` and the reason phrase."""
        problem = _problem(body)
        code = problem.get("code")
        if not isinstance(code, str) or not code:
            code = f"http_{status}"
        detail = problem.get("detail") or problem.get("title") or reason or "error"
        kind = _CLASSES.get(code, cls)
        return kind(status, code, str(detail), retry_after=retry_after, problem=problem)


class IdempotencyConflict(ApiError):
    """409 ``idempotency_conflict``: the key was used before for another type or payload, and
    nothing changed."""

    code = "idempotency_conflict"

    @classmethod
    def of_holder(
        cls, detail: str, holder: uuid.UUID, *, held_by: str = "job_id"
    ) -> IdempotencyConflict:
        """The conflict raised without the API (``jobrelay.enqueue``, the testing kit's
        ``Recorder``), with the problem the API would answer; ``held_by`` names the field of
        what holds the key (``job_id``, ``workflow_id``)."""
        problem = {
            "title": "This Idempotency-Key was already used for a different request",
            "status": 409,
            "code": cls.code,
            "detail": detail,
            held_by: str(holder),
        }
        return cls(409, cls.code, detail, problem=problem)

    @property
    def job_id(self) -> uuid.UUID | None:
        """The job that holds the key, when the API named it."""
        return _job_id(self.problem)


class JobFinished(ApiError):
    """409 ``job_finished``: a signal sent to a job that has finished (succeeded, quarantined
    or cancelled); nothing was kept."""

    code = "job_finished"


class DuplicateJobError(ApiError):
    """409 ``duplicate_job``: a submission with ``on_duplicate="reject"`` met a job of its
    ``unique_key`` (live, or ended within ``unique_for_seconds``); nothing was accepted.
    ``job_id``: that job."""

    code = "duplicate_job"

    @property
    def job_id(self) -> uuid.UUID | None:
        """The job of the unique key, when the API named it."""
        return _job_id(self.problem)


class ThrottledError(ApiError):
    """429 ``throttled``: over the job type's throttle (per ``throttle_key``); nothing was
    accepted. Not sent again by the client (docs/submitting.md): ``retry_after`` says when
    one more would be taken."""

    code = "throttled"


# The errors raised as their own class, by the problem's code.
_CLASSES: dict[str, type[ApiError]] = {
    IdempotencyConflict.code: IdempotencyConflict,
    JobFinished.code: JobFinished,
    DuplicateJobError.code: DuplicateJobError,
    ThrottledError.code: ThrottledError,
}


def _job_id(problem: Mapping[str, Any]) -> uuid.UUID | None:
    """The problem's ``job_id``, when it names one."""
    try:
        return uuid.UUID(str(problem["job_id"]))
    except (KeyError, ValueError):
        return None


# A message stays one readable line: the fields past these are in ``problem["errors"]``.
FIELD_ERRORS_SHOWN = 3


def _field_errors(problem: Mapping[str, Any]) -> str:
    """`` (loc: msg; …)`` for a problem that lists its invalid fields, else nothing."""
    errors = problem.get("errors")
    if not isinstance(errors, list) or not errors:
        return ""
    shown = [_field_error(error) for error in errors[:FIELD_ERRORS_SHOWN]]
    more = len(errors) - len(shown)
    if more:
        shown.append(f"{more} more")
    return f" ({'; '.join(shown)})"


def _field_error(error: Any) -> str:
    if not isinstance(error, Mapping):
        return str(error)
    loc = error.get("loc")
    where = ".".join(str(part) for part in loc) if isinstance(loc, list) else ""
    message = str(error.get("msg") or error.get("type") or "invalid")
    return f"{where}: {message}" if where else message


def _problem(body: bytes) -> dict[str, Any]:
    try:
        problem = json.loads(body)
    except ValueError:  # not JSON (a proxy's page), or not UTF-8
        return {}
    return problem if isinstance(problem, dict) else {}
