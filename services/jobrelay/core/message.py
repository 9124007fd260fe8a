"""The message envelope the dispatcher publishes and the consumer reads (docs/life-of-a-job.md)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jobrelay.core.telemetry_context import valid_traceparent

MESSAGE_VERSION = 1
CONTENT_TYPE = "application/json"
MAX_TYPE_LENGTH = 200
# The job's W3C trace context rides in the message headers (not the body, which stays the
# envelope alone), under the name a W3C propagator reads (docs/observability.md).
TRACEPARENT_HEADER = "traceparent"


class MalformedMessage(ValueError):
    """The body is not a jobrelay envelope. The reason is safe to store (no body dump)."""


@dataclass(frozen=True)
class Envelope:
    job_id: uuid.UUID
    type: str
    version: int = MESSAGE_VERSION

    def encode(self) -> bytes:
        body = {"job_id": str(self.job_id), "type": self.type, "version": self.version}
        return json.dumps(body, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, body: bytes) -> Envelope:
        try:
            document: Any = json.loads(body)
        except (ValueError, RecursionError):
            # Not only JSONDecodeError: nesting past the recursion limit and integers past the
            # 4300-digit conversion limit raise these bare, from inside the decoder.
            raise MalformedMessage("body is not JSON") from None
        if not isinstance(document, dict):
            raise MalformedMessage("body is not a JSON object")
        version = document.get("version")
        if version != MESSAGE_VERSION:
            raise MalformedMessage("unsupported or missing version")
        job_type = document.get("type")
        # A type is a registry name: printable text that PostgreSQL can store and compare
        # (a NUL in it would fail every statement that looks the job up by type).
        if (
            not isinstance(job_type, str)
            or not job_type
            or len(job_type) > MAX_TYPE_LENGTH
            or not job_type.isprintable()
        ):
            raise MalformedMessage("missing or invalid type")
        raw_id = document.get("job_id")
        if not isinstance(raw_id, str):
            raise MalformedMessage("missing or invalid job_id")
        try:
            job_id = uuid.UUID(raw_id)
        except ValueError:
            raise MalformedMessage("job_id is not a UUID") from None
        return cls(job_id=job_id, type=job_type, version=version)


def trace_headers(traceparent: str | None) -> dict[str, Any] | None:
    """The headers of a job's message: its ``traceparent`` if it has one, else none at all."""
    return None if traceparent is None else {TRACEPARENT_HEADER: traceparent}


def traceparent_of(headers: Mapping[str, Any] | None) -> str | None:
    """The valid ``traceparent`` of a message's headers (written by ``trace_headers``, or by
    anyone: a malformed one is ignored), else None."""
    if not headers:
        return None
    return valid_traceparent(headers.get(TRACEPARENT_HEADER))
