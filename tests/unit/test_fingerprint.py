"""The request hash is spelled out by hand (``core/fingerprint.py``) so that the accept path
serializes a payload once; it must stay the hash earlier versions stored for the same request,
or a repeated submission would suddenly conflict with its own job."""

from __future__ import annotations

import hashlib
from typing import Any

from hypothesis import given, strategies as st

from jobrelay.core.fingerprint import canonical_json, request_hash
from jobrelay.core.jobs import Flow

# Text without lone surrogates: the API refuses those before anything is hashed.
_text = st.text(alphabet=st.characters(exclude_categories=["Cs"]))
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text, inner, max_size=4),
    max_leaves=12,
)


def _as_stored_before(job_type: str, payload: Any) -> str:
    document = canonical_json({"type": job_type, "payload": payload})
    return hashlib.sha256(document.encode()).hexdigest()


@given(job_type=_text, payload=st.dictionaries(_text, _json, max_size=5))
def test_the_request_hash_is_the_hash_of_the_canonical_request(
    job_type: str, payload: dict[str, Any]
) -> None:
    assert request_hash(job_type, payload) == _as_stored_before(job_type, payload)


def test_a_type_with_quotes_and_unicode_is_spelled_as_json() -> None:
    payload = {"b": [1, {"z": "ü"}], "a": None}
    assert request_hash('odd"type\\ü', payload) == _as_stored_before('odd"type\\ü', payload)


def test_a_flow_is_hashed_as_the_canonical_document_with_its_fields_the_policies_too() -> None:
    flow = Flow(
        3,
        "c",
        "u",
        sequence_key="s",
        unique_for_seconds=60,
        on_duplicate="reject",
        debounce_seconds=5,
        debounce_max_seconds=30.5,
        throttle_key="t",
    ).given()
    payload = {"a": 1}
    document = canonical_json({"type": "x.y", "payload": payload, **flow})
    assert request_hash("x.y", payload, None, flow) == hashlib.sha256(document.encode()).hexdigest()


def test_each_policy_given_is_another_request() -> None:
    plain = request_hash("x.y", {}, None, Flow(unique_key="u").given())
    policies = [
        {"sequence_key": "s"},
        {"unique_for_seconds": 60},
        {"on_duplicate": "reject"},
        {"debounce_seconds": 5},
        {"throttle_key": "t"},
    ]
    hashes = {request_hash("x.y", {}, None, Flow(unique_key="u", **p).given()) for p in policies}
    assert plain not in hashes and len(hashes) == len(policies)
