"""The error hierarchy jobrelay owns.

Adapters translate driver errors into these at their boundary, so services and the CLI never
catch a psycopg or aio-pika exception by name. Every error carries a stable ``code`` that appears
in problem+json bodies, CLI messages and ``jobs.last_error_code``.
"""

from __future__ import annotations


class JobrelayError(Exception):
    """Base of every error this project raises on purpose."""

    code = "jobrelay_error"


# --- errors a handler raises to steer the outcome of an attempt -----------------------------


class HandlerError(JobrelayError):
    """Raised by a job handler. The message must be safe to store: no secrets, no payload."""

    code = "handler_error"

    def __init__(self, message: str = "", *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class TransientError(HandlerError):
    """The attempt failed for a reason that may pass: retry with backoff."""

    code = "transient_error"


class PermanentError(HandlerError):
    """Retrying cannot help: quarantine at once."""

    code = "permanent_error"


# --- infrastructure ---------------------------------------------------------------------------


class StoreUnavailable(JobrelayError):
    """PostgreSQL cannot be reached or the connection broke mid-statement."""

    code = "database_unavailable"


class BrokerUnavailable(JobrelayError):
    """RabbitMQ cannot be reached or the channel broke before a confirm."""

    code = "broker_unavailable"


class ConfigurationError(JobrelayError):
    code = "configuration_error"


# --- request errors (the API and the CLI) -----------------------------------------------------


class RequestError(JobrelayError):
    """A caller's mistake. ``title`` says what is wrong in one line (the default detail); how
    an interface answers it is the interface's business (the API's statuses: ``api/problems.py``).
    """

    title = "Bad request"

    def __init__(self, detail: str = "", **extra: object) -> None:
        super().__init__(detail or self.title)
        self.detail = detail or self.title
        self.extra = extra


class Unauthorized(RequestError):
    code = "unauthorized"
    title = "Missing or invalid bearer token"


class Forbidden(RequestError):
    code = "forbidden"
    title = "This operation needs an admin token"


class TypeNotAllowed(RequestError):
    """The client may not submit this type (its type patterns, or the default rule that keeps
    Django tasks and ``api=False`` types off HTTP: docs/submitting.md). Nothing was written."""

    code = "type_not_allowed"
    title = "This client may not submit this job type"


class JobNotFound(RequestError):
    code = "job_not_found"
    title = "No such job"


class IdempotencyKeyInvalid(RequestError):
    code = "idempotency_key_invalid"
    title = "Idempotency-Key must be 1 to 200 visible ASCII characters"


class IdempotencyKeyMissing(RequestError):
    code = "idempotency_key_missing"
    title = "The Idempotency-Key header is required"


class InvalidCursor(RequestError):
    code = "invalid_cursor"
    title = "The cursor is not one this API handed out"


class IdempotencyConflict(RequestError):
    code = "idempotency_conflict"
    title = "This Idempotency-Key was already used for a different request"


class NotCancellable(RequestError):
    code = "not_cancellable"
    title = "Only jobs that have not succeeded or been cancelled can be cancelled"


class NotReplayable(RequestError):
    code = "not_replayable"
    title = "Only quarantined jobs can be replayed"


class SignalTooLarge(RequestError):
    code = "payload_too_large"
    title = "Request body too large"


class JobFinished(RequestError):
    """A signal sent to a job that has finished (succeeded, quarantined, cancelled): nothing
    was kept, no wait of its can take it any more."""

    code = "job_finished"
    title = "The job has finished: a signal to it is not kept"


class RateLimited(RequestError):
    code = "rate_limited"
    title = "Over this client's submission rate; retry with the same key after Retry-After"

    def __init__(self, retry_after_seconds: float, limit: str) -> None:
        super().__init__(f"the limit is {limit}")
        self.retry_after_seconds = retry_after_seconds


class Throttled(RequestError):
    """Over the throttle of the submission's type (per its throttle key): refused, nothing
    written (docs/flow-control.md, "Throttle")."""

    code = "throttled"
    title = "Over this job type's throttle; nothing was accepted, try again after Retry-After"

    def __init__(self, retry_after_seconds: float, throttle: str) -> None:
        super().__init__(f"the throttle is {throttle}")
        self.retry_after_seconds = retry_after_seconds


class DuplicateJob(RequestError):
    """A unique submission with ``"on_duplicate": "reject"`` met a job of its key (live, or
    ended within its window): nothing written; ``job_id`` names that job."""

    code = "duplicate_job"
    title = "A job of this unique key exists; nothing was accepted"


class InvalidPolicy(RequestError):
    """The order and submission policies of a submission do not go together (a debounce
    without a unique key, a window beside a debounce's schedule, ...)."""

    code = "invalid_policy"
    title = "The submission's policies do not go together"


class UnknownJobType(RequestError):
    code = "unknown_job_type"
    title = "Unknown job type"


class InvalidPayload(RequestError):
    code = "invalid_payload"
    title = "The payload does not match the job type's schema"


class InvalidSchedule(RequestError):
    code = "invalid_schedule"
    title = "Give run_at (RFC 3339 with an offset) or delay_seconds, not both"


class QueueNotFound(RequestError):
    code = "queue_not_found"
    title = "No such queue"


class JobTypeNotFound(RequestError):
    code = "job_type_not_found"
    title = "No such job type in this API's registry"
