"""``/v1/workflows`` against real PostgreSQL: the checks of a graph (422 invalid_workflow naming
the problem), the idempotency of a submission, the view, the cancel, and ``workflow_id`` on the
job view."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from tests.conftest import auth

TYPE = "demo.sleep"


def job(ref: str, *after: str, **options: Any) -> dict[str, Any]:
    return {"ref": ref, "type": TYPE, "payload": {"seconds": 0}, "after": list(after), **options}


def body(*jobs: dict[str, Any], **options: Any) -> dict[str, Any]:
    return {"jobs": list(jobs), **options}


async def post(
    api: httpx.AsyncClient, token: str, document: Any, key: str | None = None
) -> httpx.Response:
    return await api.post(
        "/v1/workflows", json=document, headers=auth(token, key or uuid.uuid4().hex)
    )


@pytest.mark.parametrize(
    ("document", "named"),
    [
        (body(), "1 to 1000 jobs, not 0"),
        (body(*[job(f"j{n}") for n in range(1001)]), "not 1001"),
        (body(job("a"), job("a")), "ref 'a' names two jobs"),
        (body(job("a b")), "ref 'a b' is not"),
        (body(job("a", "zz")), "job 'a' waits for 'zz', no job of it"),
        (body(job("a", "a")), "job 'a' waits for itself"),
        (body(job("a"), job("b", "a", "a")), "names 'a' twice"),
        (body(job("a", "c"), job("b", "a"), job("c", "b")), "wait in a cycle"),
    ],
)
async def test_a_graph_jobrelay_cannot_run_is_422_naming_the_problem(
    api: httpx.AsyncClient, alice: str, document: dict[str, Any], named: str
) -> None:
    answer = await post(api, alice, document)
    assert answer.status_code == 422, answer.text
    problem = answer.json()
    assert problem["code"] == "invalid_workflow"
    assert named in problem["detail"]
    assert answer.headers["content-type"].startswith("application/problem+json")


async def test_a_cycle_is_named_by_its_refs(api: httpx.AsyncClient, alice: str) -> None:
    answer = await post(api, alice, body(job("a", "c"), job("b", "a"), job("c", "b"), job("x")))
    assert "a -> b -> c -> a" in answer.json()["detail"]


async def test_a_job_of_an_unknown_type_is_named_by_its_ref(
    api: httpx.AsyncClient, alice: str
) -> None:
    answer = await post(api, alice, body(job("a"), {"ref": "b", "type": "no.such", "payload": {}}))
    assert answer.status_code == 422
    assert answer.json()["code"] == "unknown_job_type"
    assert "job 'b'" in answer.json()["detail"]


async def test_a_workflow_is_accepted_once_per_key(api: httpx.AsyncClient, alice: str) -> None:
    document = body(job("a"), job("b", "a"), on_failure="continue")
    first = await post(api, alice, document, key="wf-1")
    assert first.status_code == 202, first.text
    view = first.json()
    assert view["state"] == "running" and view["on_failure"] == "continue"
    assert {ref: entry["state"] for ref, entry in view["jobs"].items()} == {
        "a": "queued",
        "b": "waiting",
    }
    assert view["jobs"]["b"]["after"] == ["a"]
    assert view["counts"] == {"queued": 1, "waiting": 1}
    assert first.headers["location"] == f"/v1/workflows/{view['id']}"

    again = await post(api, alice, document, key="wf-1")
    assert (again.status_code, again.json()["id"]) == (200, view["id"])
    other = await post(api, alice, body(job("a")), key="wf-1")
    assert other.status_code == 409
    assert other.json()["code"] == "idempotency_conflict"


async def test_the_view_is_the_owners_and_the_job_view_names_its_workflow(
    api: httpx.AsyncClient, alice: str, bob: str
) -> None:
    view = (await post(api, alice, body(job("a"), job("b", "a")))).json()
    read = await api.get(f"/v1/workflows/{view['id']}", headers=auth(alice))
    assert read.status_code == 200 and read.json()["jobs"].keys() == {"a", "b"}
    assert (await api.get(f"/v1/workflows/{view['id']}", headers=auth(bob))).status_code == 404
    assert (await api.get(f"/v1/workflows/{uuid.uuid4()}", headers=auth(alice))).json()["code"] == (
        "workflow_not_found"
    )
    single = (await api.get(f"/v1/jobs/{view['jobs']['b']['id']}", headers=auth(alice))).json()
    assert (single["workflow_id"], single["state"], single["progress"]) == (
        view["id"],
        "waiting",
        None,
    )


async def test_a_cancel_ends_every_job_that_has_not_finished(
    api: httpx.AsyncClient, alice: str, bob: str
) -> None:
    view = (await post(api, alice, body(job("a"), job("b", "a")))).json()
    assert (
        await api.post(f"/v1/workflows/{view['id']}/cancel", headers=auth(bob))
    ).status_code == 404
    cancelled = await api.post(f"/v1/workflows/{view['id']}/cancel", headers=auth(alice))
    assert cancelled.status_code == 200
    assert cancelled.json()["state"] == "cancelled"
    assert cancelled.json()["counts"] == {"cancelled": 2}
    again = await api.post(f"/v1/workflows/{view['id']}/cancel", headers=auth(alice))
    assert again.json()["cancelled_at"] == cancelled.json()["cancelled_at"]
