"""Request fingerprinting: same type and payload ⇔ same hash, whatever the key order."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def request_hash(
    job_type: str,
    payload: Any,
    schedule: Mapping[str, Any] | None = None,
    flow: Mapping[str, Any] | None = None,
) -> str:
    return request_hash_of_json(job_type, canonical_json(payload), schedule, flow)


def request_hash_of_json(
    job_type: str,
    payload_json: str,
    schedule: Mapping[str, Any] | None = None,
    flow: Mapping[str, Any] | None = None,
) -> str:
    """``request_hash`` from the payload's canonical JSON, which the accept path also stores:
    the payload is serialized once. The document is ``canonical_json`` of
    ``{"type": job_type, "payload": payload}``, spelled out ("payload" sorts before "type"),
    with ``"schedule"`` between them when the request asked for a due time
    (``JobRequest.schedule``): a request without one hashes as it always did.

    ``flow``: the flow control fields the submission gave itself (``Flow.given``: its
    priority, keys and policies), each at its sorted place in the document, and only when
    given: a submission that gives none hashes as before they existed, so a resubmission
    across the upgrade is still the same request. A priority is hashed whenever it is given,
    0 too: with a type whose default is 10, "0" and "none" ask for different jobs. What the
    type fills in (its default priority, its key functions) is not hashed: it follows from
    the type and payload, and may change with the code."""
    if not flow:  # the hot path, and the document of every request before flow control
        when = f',"schedule":{canonical_json(schedule)}' if schedule is not None else ""
        document = f'{{"payload":{payload_json}{when},"type":{canonical_json(job_type)}}}'
        return hashlib.sha256(document.encode()).hexdigest()
    # Every field given, the order and submission policies too (``sequence_key``,
    # ``unique_for_seconds``, ``on_duplicate``, ``debounce_*``, ``throttle_key``:
    # docs/flow-control.md).
    parts = {**flow, "payload": payload_json, "schedule": schedule, "type": job_type}
    fields = [
        f'"{name}":{value if name == "payload" else canonical_json(value)}'
        for name, value in sorted(parts.items())
        if value is not None
    ]
    document = "{" + ",".join(fields) + "}"
    return hashlib.sha256(document.encode()).hexdigest()


def token_hash(token: str) -> str:
    """Tokens are 256-bit random values, so a plain SHA-256 is as strong as a slow hash here."""
    return hashlib.sha256(token.encode()).hexdigest()
