"""Accept with idempotency, the part that is pure: the submission's request hash, computed one
way, and what a key answers, decided one way (docs/invariants.md, 5).

Every Python accept uses both: ``Store.accept_job`` / ``accept_jobs`` and ``jobrelay.enqueue``
(``db/accept.py``), the workflow accept (``db/workflow_store.py``, with the workflow's own hash
from ``core/workflows.py``) and the testing kit's ``Recorder`` (``jobrelay.testing``). The SQL
function ``jobrelay_enqueue`` (migration 0010) is the one other shape; tests/integration/
test_accept_parity.py runs the same cases through all of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from jobrelay.core.bounds import (
    DEFAULT_MAX_ATTEMPTS,
    IDEMPOTENCY_KEY_MAX,
    MAX_ATTEMPTS_MAX,
    TYPE_NAME_MAX,
)
from jobrelay.core.fingerprint import canonical_json, request_hash_of_json
from jobrelay.core.jobs import Flow, JobRequest, is_valid_idempotency_key
from jobrelay.core.jsonvalues import unstorable_json
from jobrelay.core.registry import Registry


class KeyDecision(StrEnum):
    """What a submission under an idempotency key gets."""

    NEW = "new"  # no job holds the key: this submission makes it
    EXISTING = "existing"  # the key's job was made for the same request: that job
    CONFLICT = "conflict"  # the key's job was made for another request: 409, nothing written


def decide(held_hash: str | None, asked_hash: str) -> KeyDecision:
    """The decision for a submission hashed ``asked_hash`` under a key whose job was made for
    ``held_hash`` (None: no job holds the key)."""
    if held_hash is None:
        return KeyDecision.NEW
    return KeyDecision.EXISTING if held_hash == asked_hash else KeyDecision.CONFLICT


@dataclass(frozen=True)
class Submission:
    """A checked request with its payload serialized once (stored and fingerprinted)."""

    request: JobRequest
    payload_json: str
    traceparent: str | None = None  # stored with a new job, not fingerprinted

    @classmethod
    def of(cls, request: JobRequest, traceparent: str | None = None) -> Submission:
        return cls(request, canonical_json(request.payload), traceparent)

    @property
    def fingerprint(self) -> str:
        """The request hash the job row keeps: type, payload, schedule and the flow fields the
        submission gave (``core/fingerprint.py::request_hash_of_json``); not max_attempts."""
        request = self.request
        return request_hash_of_json(
            request.type, self.payload_json, request.schedule, request.flow.given()
        )


def check_submission(
    job_type: str,
    payload: dict[str, Any],
    key: str,
    run_at: datetime | None,
    delay_seconds: float | None,
    max_attempts: int | None,
    registry: Registry | None,
    flow: Flow | None = None,
) -> Submission:
    """The checked request, or the error that says what is wrong with it: every check of
    ``jobrelay.enqueue`` (``transactional.py``, which adds the trace context) and of the testing
    kit's ``Recorder``, before anything is written."""
    flow = flow or Flow()
    check_key(key)
    payload_json = checked_job(job_type, payload, max_attempts)
    defaults = Flow()
    if registry is not None:
        model = registry.validate_payload(job_type, payload)
        defaults = registry.flow_defaults(job_type, model, flow)
    if max_attempts is None:
        max_attempts = (
            registry.max_attempts_for(job_type, DEFAULT_MAX_ATTEMPTS)
            if registry is not None
            else DEFAULT_MAX_ATTEMPTS
        )
    # Checks the schedule: an offset on run_at, a delay within a year, not both.
    request = JobRequest(
        key,
        job_type,
        payload,
        max_attempts,
        run_at=run_at,
        delay_seconds=delay_seconds,
        flow=flow,
        defaults=defaults,
    )
    return Submission(request, payload_json)


def check_key(key: object) -> None:
    if not isinstance(key, str) or not is_valid_idempotency_key(key):
        raise ValueError(
            f"key must be 1 to {IDEMPOTENCY_KEY_MAX} visible ASCII characters (0x21-0x7E)"
        )


def checked_job(job_type: object, payload: object, max_attempts: object) -> str:
    """The payload as stored JSON, once the type's shape, the payload and ``max_attempts``
    (None: not given) are what a job can have; else the error that says which is not."""
    if (
        not isinstance(job_type, str)
        or not 1 <= len(job_type) <= TYPE_NAME_MAX
        or "\x00" in job_type
    ):
        raise ValueError(f"type must be a string of 1 to {TYPE_NAME_MAX} characters, without NUL")
    if not isinstance(payload, dict):
        raise TypeError(f"payload must be a JSON object (a dict), not {type(payload).__name__}")
    try:
        payload_json = canonical_json(payload)
    except (TypeError, ValueError) as error:  # a value JSON has no form for; a cycle
        raise TypeError(f"payload is not JSON: {error}") from None
    problem = unstorable_json(payload)  # JSON, but not for jsonb: NaN, infinity, NUL
    if problem is not None:
        raise ValueError(f"payload cannot be stored: {problem}")
    if max_attempts is not None and (
        not isinstance(max_attempts, int)
        or isinstance(max_attempts, bool)
        or not 1 <= max_attempts <= MAX_ATTEMPTS_MAX
    ):
        raise ValueError(f"max_attempts must be an integer from 1 to {MAX_ATTEMPTS_MAX}")
    return payload_json
