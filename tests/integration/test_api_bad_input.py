"""Every bad input gets a problem+json answer with a stable code, and nothing is stored."""

from __future__ import annotations

import httpx
import pytest

from jobrelay.db import tables
from jobrelay.db.store import Store
from tests.conftest import auth
from tests.support import factories

GOOD = {"type": "catalog.export", "payload": {"course": "JavaScript"}}

# (case, headers builder, body kwargs, status, code)
CASES = [
    ("no token", lambda t: {"Idempotency-Key": "k"}, {"json": GOOD}, 401, "unauthorized"),
    ("wrong token", lambda t: auth("jr_wrong", "k"), {"json": GOOD}, 401, "unauthorized"),
    (
        "not a bearer",
        lambda t: {"Authorization": f"Basic {t}", "Idempotency-Key": "k"},
        {"json": GOOD},
        401,
        "unauthorized",
    ),
    ("no key", lambda t: auth(t), {"json": GOOD}, 400, "idempotency_key_missing"),
    ("empty key", lambda t: auth(t, ""), {"json": GOOD}, 400, "idempotency_key_invalid"),
    ("key too long", lambda t: auth(t, "k" * 201), {"json": GOOD}, 400, "idempotency_key_invalid"),
    ("key with a space", lambda t: auth(t, "a b"), {"json": GOOD}, 400, "idempotency_key_invalid"),
    (
        "malformed json",
        lambda t: auth(t, "k") | {"Content-Type": "application/json"},
        {"content": b'{"type": "catalog.export",'},
        400,
        "malformed_json",
    ),
    ("json array", lambda t: auth(t, "k"), {"json": [1, 2]}, 422, "validation_error"),
    (
        "type is a number",
        lambda t: auth(t, "k"),
        {"json": {"type": 5, "payload": {}}},
        422,
        "validation_error",
    ),
    (
        "payload is a string",
        lambda t: auth(t, "k"),
        {"json": {"type": "catalog.export", "payload": "JavaScript"}},
        422,
        "validation_error",
    ),
    (
        "unknown field",
        lambda t: auth(t, "k"),
        {"json": GOOD | {"urgency": 1}},  # (priority is a field since flow control)
        422,
        "validation_error",
    ),
    (
        "max_attempts zero",
        lambda t: auth(t, "k"),
        {"json": GOOD | {"max_attempts": 0}},
        422,
        "validation_error",
    ),
    (
        "max_attempts true (not a count)",
        lambda t: auth(t, "k"),
        {"json": GOOD | {"max_attempts": True}},
        422,
        "validation_error",
    ),
    (
        "max_attempts a string",
        lambda t: auth(t, "k"),
        {"json": GOOD | {"max_attempts": "3"}},
        422,
        "validation_error",
    ),
    (
        "unknown job type",
        lambda t: auth(t, "k"),
        {"json": {"type": "nope.nothing", "payload": {}}},
        422,
        "unknown_job_type",
    ),
    (
        "payload fails its schema",
        lambda t: auth(t, "k"),
        {"json": {"type": "catalog.export", "payload": {"course": ""}}},
        422,
        "invalid_payload",
    ),
    (
        "payload has an unknown field",
        lambda t: auth(t, "k"),
        {"json": {"type": "demo.sleep", "payload": {"seconds": 1, "x": 2}}},
        422,
        "invalid_payload",
    ),
    (
        "payload wrong type",
        lambda t: auth(t, "k"),
        {"json": {"type": "demo.fail", "payload": {"mode": "sometimes"}}},
        422,
        "invalid_payload",
    ),
    (
        "body over the limit",
        lambda t: auth(t, "k"),
        {"json": {"type": "catalog.export", "payload": {"course": "x" * 70_000}}},
        413,
        "payload_too_large",
    ),
]


@pytest.mark.parametrize(
    ("case", "headers", "body", "status", "code"), CASES, ids=[case[0] for case in CASES]
)
async def test_bad_submissions_get_a_problem_and_store_nothing(
    api: httpx.AsyncClient,
    alice: str,
    store: Store,
    case: str,
    headers: object,
    body: dict[str, object],
    status: int,
    code: str,
) -> None:
    response = await api.post("/v1/jobs", headers=headers(alice), **body)  # type: ignore[operator]

    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    problem = response.json()
    assert problem["code"] == code
    assert problem["status"] == status
    assert problem["type"].endswith("/" + code)
    assert await factories.count(store, tables.jobs) == 0


async def test_a_body_streamed_past_the_limit_without_length_is_refused(
    api: httpx.AsyncClient, alice: str
) -> None:
    async def chunks():  # type: ignore[no-untyped-def]
        for _ in range(20):
            yield b"x" * 8192

    response = await api.post("/v1/jobs", headers=auth(alice, "k"), content=chunks())
    assert response.status_code == 413


async def test_validation_errors_do_not_echo_the_input(api: httpx.AsyncClient, alice: str) -> None:
    secret = "sentinel-secret-7f3a"
    body = {"type": "demo.sleep", "payload": {"seconds": secret}}
    response = await api.post("/v1/jobs", json=body, headers=auth(alice, "k"))
    assert response.status_code == 422
    assert secret not in response.text


async def test_a_malformed_job_id_in_the_path_is_a_problem(
    api: httpx.AsyncClient, alice: str
) -> None:
    response = await api.get("/v1/jobs/not-a-uuid", headers=auth(alice))
    assert response.status_code == 422
    assert response.json()["code"] == "validation_error"


async def test_an_unknown_route_is_a_problem(api: httpx.AsyncClient) -> None:
    response = await api.get("/v1/nothing")
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("application/problem+json")


async def test_json_nested_too_deep_for_the_parser_is_malformed_json(
    api: httpx.AsyncClient, alice: str
) -> None:
    # Deeper than the parser of any supported Python takes: 3.11 stops near 1,000 levels,
    # 3.13 between 5,000 and 10,000.
    body = b'{"type": "demo.sleep", "payload": ' + b"[" * 20_000 + b"]" * 20_000 + b"}"
    response = await api.post(
        "/v1/jobs", content=body, headers=auth(alice, "k") | {"Content-Type": "application/json"}
    )
    assert response.status_code == 400
    assert response.json()["code"] == "malformed_json"
