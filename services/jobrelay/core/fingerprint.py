"""Request fingerprinting: same type and payload ⇔ same hash, whatever the key order."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def request_hash(job_type: str, payload: Any, schedule: Mapping[str, Any] | None = None) -> str:
    return request_hash_of_json(job_type, canonical_json(payload), schedule)


def request_hash_of_json(
    job_type: str, payload_json: str, schedule: Mapping[str, Any] | None = None
) -> str:
    """``request_hash`` from the payload's canonical JSON, which the accept path also stores:
    the payload is serialized once. The document is ``canonical_json`` of
    ``{"type": job_type, "payload": payload}``, spelled out ("payload" sorts before "type"),
    with ``"schedule"`` between them when the request asked for a due time
    (``JobRequest.schedule``): a request without one hashes as it always did."""
    when = f',"schedule":{canonical_json(schedule)}' if schedule is not None else ""
    document = f'{{"payload":{payload_json}{when},"type":{canonical_json(job_type)}}}'
    return hashlib.sha256(document.encode()).hexdigest()


def token_hash(token: str) -> str:
    """Tokens are 256-bit random values, so a plain SHA-256 is as strong as a slow hash here."""
    return hashlib.sha256(token.encode()).hexdigest()
