"""``POST /v1/jobs`` answers a well-formed submission without FastAPI's request handler
(``routes/jobs.py::SubmitRoute``) and every other one through it: the edges between the two
answer as FastAPI alone would."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import auth

GOOD = {"type": "catalog.export", "payload": {"course": "JavaScript"}}


async def test_a_json_subtype_is_accepted_directly(api: httpx.AsyncClient, alice: str) -> None:
    headers = auth(alice, "direct-1") | {"Content-Type": "application/vnd.jobs+json; charset=utf-8"}
    response = await api.post(
        "/v1/jobs", content=httpx.Request("POST", "/", json=GOOD).content, headers=headers
    )
    assert response.status_code == 202, response.text
    assert response.headers["location"] == f"/v1/jobs/{response.json()['id']}"


async def test_a_bad_token_is_401_whether_the_body_is_valid_or_not(
    api: httpx.AsyncClient,
) -> None:
    for body in (GOOD, {"type": ""}):
        response = await api.post("/v1/jobs", json=body, headers=auth("jr_wrong", "direct-2"))
        assert response.status_code == 401, response.text


# 1001: past the Header's max_length, FastAPI's validation fails and api/problems.py makes it
# the key's own 400; 201: within it, the direct path, the endpoint's own 400.
@pytest.mark.parametrize("length", [1001, 201])
async def test_a_key_too_long_is_the_same_400_on_either_path(
    api: httpx.AsyncClient, alice: str, length: int
) -> None:
    response = await api.post("/v1/jobs", json=GOOD, headers=auth(alice, "k" * length))
    assert response.status_code == 400, response.text
    assert response.json()["code"] == "idempotency_key_invalid"
