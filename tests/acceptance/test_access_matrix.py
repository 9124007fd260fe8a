"""Who may call what: every endpoint × (no token, wrong token, the job's client, another client,
an admin), with the status each must get.

Another client's job is 404 with the same body as a job that does not exist — never 403, which
would confirm that the id exists. Admin endpoints are 401 without a valid token and 403 with a
client's. A refused call changes nothing. A route missing from the table fails the last test.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import httpx
import pytest

from jobrelay.api.app import create_app
from jobrelay.core.settings import Settings
from jobrelay.core.states import JobState
from jobrelay.db.store import Store
from tests.conftest import MakeSettings, api_client, auth
from tests.support.factories import job_row, set_job

ROLES = ("none", "wrong", "client", "other", "admin")
SUBMIT = {"type": "demo.sleep", "payload": {"seconds": 0}}
WORKFLOW = {"jobs": [{"ref": "only", **SUBMIT}]}
PUBLIC = (200, 200, 200, 200, 200)
OWN_JOB = (401, 401, 200, 404, 404)
ADMIN_ONLY = (401, 401, 403, 403, 200)

# method, path ({queued} / {quarantined}: a job of the "client" role in that state), statuses
MATRIX: list[tuple[str, str, tuple[int, ...]]] = [
    ("POST", "/v1/jobs", (401, 401, 202, 202, 202)),
    ("POST", "/v1/jobs/batch", (401, 401, 200, 200, 200)),
    ("GET", "/v1/jobs", (401, 401, 200, 200, 200)),
    ("GET", "/v1/jobs/{queued}", OWN_JOB),
    ("GET", "/v1/jobs/{queued}/events", OWN_JOB),
    ("GET", "/v1/jobs/{queued}/trace", OWN_JOB),
    ("POST", "/v1/jobs/{queued}/cancel", OWN_JOB),
    # {name}: a signal's name; an admin may signal any client's job (durable execution)
    ("POST", "/v1/jobs/{queued}/signals/{name}", (401, 401, 202, 404, 202)),
    # {workflow}: a workflow of the "client" role, of one queued job (issue 26)
    ("POST", "/v1/workflows", (401, 401, 202, 202, 202)),
    ("GET", "/v1/workflows/{workflow}", OWN_JOB),
    ("POST", "/v1/workflows/{workflow}/cancel", OWN_JOB),
    ("GET", "/v1/admin/stats", ADMIN_ONLY),
    ("GET", "/v1/admin/quarantine", ADMIN_ONLY),
    ("POST", "/v1/admin/quarantine/reconcile", ADMIN_ONLY),
    ("POST", "/v1/admin/jobs/{quarantined}/replay", ADMIN_ONLY),
    ("GET", "/v1/admin/jobs/{queued}/trace", ADMIN_ONLY),
    ("POST", "/v1/admin/jobs/{queued}/cancel", ADMIN_ONLY),  # any client's job (issue 37)
    ("GET", "/v1/admin/clients", ADMIN_ONLY),
    # {name}: the queue default; {job_type}: demo.sleep (issue 25, flow control)
    ("GET", "/v1/admin/queues", ADMIN_ONLY),
    ("POST", "/v1/admin/queues/{name}/pause", ADMIN_ONLY),
    ("POST", "/v1/admin/queues/{name}/resume", ADMIN_ONLY),
    ("GET", "/v1/admin/limits", ADMIN_ONLY),
    ("GET", "/v1/admin/limits/{job_type}", ADMIN_ONLY),
    ("PUT", "/v1/admin/limits/{job_type}", ADMIN_ONLY),
    ("DELETE", "/v1/admin/limits/{job_type}", (401, 401, 403, 403, 204)),
    ("GET", "/v1/admin/types", ADMIN_ONLY),
    ("GET", "/v1/admin/sequences", ADMIN_ONLY),  # issue 41: order and submission policies
    ("GET", "/healthz", PUBLIC),
    ("GET", "/readyz", PUBLIC),
    ("GET", "/metrics", PUBLIC),
    ("GET", "/openapi.json", PUBLIC),
    ("GET", "/docs", PUBLIC),
]


@pytest.fixture
async def api(make_settings: MakeSettings, store: Store) -> AsyncIterator[httpx.AsyncClient]:
    """The API with a reachable broker: /readyz and the quarantine report answer 200 when
    allowed."""
    async with api_client(make_settings(), store) as client:
        yield client


def headers_for(role: str, tokens: dict[str, str]) -> dict[str, str]:
    if role == "none":
        return {}
    if role == "wrong":
        return auth("jr_" + uuid.uuid4().hex)
    return auth(tokens[role])


async def new_job(api: httpx.AsyncClient, token: str, *, quarantined: bool, store: Store) -> str:
    response = await api.post("/v1/jobs", json=SUBMIT, headers=auth(token, uuid.uuid4().hex))
    assert response.status_code == 202, response.text
    job_id = response.json()["id"]
    if quarantined:
        await set_job(store, job_id, state=JobState.QUARANTINED)
    return str(job_id)


async def new_workflow(api: httpx.AsyncClient, token: str) -> tuple[str, str]:
    """A workflow of one job: its id and its job's."""
    response = await api.post("/v1/workflows", json=WORKFLOW, headers=auth(token, uuid.uuid4().hex))
    assert response.status_code == 202, response.text
    view = response.json()
    return view["id"], view["jobs"]["only"]["id"]


async def call(
    api: httpx.AsyncClient, method: str, path: str, headers: dict[str, str]
) -> httpx.Response:
    if method == "POST" and path == "/v1/jobs":
        headers = headers | {"Idempotency-Key": uuid.uuid4().hex}
        return await api.post(path, json=SUBMIT, headers=headers)
    if method == "POST" and path == "/v1/workflows":
        headers = headers | {"Idempotency-Key": uuid.uuid4().hex}
        return await api.post(path, json=WORKFLOW, headers=headers)
    if method == "POST" and path == "/v1/jobs/batch":
        batch = {"jobs": [{"idempotency_key": uuid.uuid4().hex, **SUBMIT}]}
        return await api.post(path, json=batch, headers=headers)
    if method == "POST" and "/signals/" in path:  # a signal's value
        return await api.post(path, json={"approved": True}, headers=headers)
    if method == "PUT":  # a runtime limit
        return await api.put(path, json={"concurrency": 1}, headers=headers)
    return await api.request(method, path, headers=headers)


async def job_state(store: Store, job_id: str) -> str:
    return str((await job_row(store, job_id)).state)


@pytest.mark.parametrize(
    ("method", "path", "expected"), MATRIX, ids=[f"{m} {p}" for m, p, _ in MATRIX]
)
async def test_each_role_gets_the_status_of_the_matrix(
    api: httpx.AsyncClient,
    store: Store,
    alice: str,
    bob: str,
    admin: str,
    method: str,
    path: str,
    expected: tuple[int, ...],
) -> None:
    tokens = {"client": alice, "other": bob, "admin": admin}
    got: dict[str, int] = {}
    for role in ROLES:
        # A fresh job per call: a cancel or a replay by one role must not decide the next's.
        if "{workflow}" in path:
            workflow_id, job_id = await new_workflow(api, alice)
            path_of_role = path.replace("{workflow}", workflow_id)
        else:
            job_id = await new_job(api, alice, quarantined="{quarantined}" in path, store=store)
            path_of_role = path
        state_before = await job_state(store, job_id)
        concrete = path_of_role.replace("{queued}", job_id).replace("{quarantined}", job_id)
        concrete = concrete.replace("{name}", "default").replace("{job_type}", "demo.sleep")
        response = await call(api, method, concrete, headers_for(role, tokens))
        got[role] = response.status_code
        if response.status_code >= 400:
            assert_problem(response, "workflow_not_found" if "{workflow}" in path else None)
            assert await job_state(store, job_id) == state_before, f"{role} changed the job"
    assert got == dict(zip(ROLES, expected, strict=True))


def assert_problem(response: httpx.Response, not_found: str | None = None) -> None:
    assert response.headers["content-type"].startswith("application/problem+json")
    body = response.json()
    assert body["status"] == response.status_code
    not_found = not_found or "job_not_found"
    code = {401: "unauthorized", 403: "forbidden", 404: not_found}[response.status_code]
    assert body["code"] == code
    if response.status_code == 401:
        assert response.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize(
    "path", ["/v1/jobs/{id}", "/v1/jobs/{id}/events", "/v1/jobs/{id}/trace", "/v1/jobs/{id}/cancel"]
)
async def test_another_clients_job_looks_exactly_like_a_job_that_does_not_exist(
    api: httpx.AsyncClient, store: Store, alice: str, bob: str, path: str
) -> None:
    job_id = await new_job(api, alice, quarantined=False, store=store)
    method = "POST" if path.endswith("/cancel") else "GET"
    foreign = await api.request(method, path.format(id=job_id), headers=auth(bob))
    missing = await api.request(method, path.format(id=uuid.uuid4()), headers=auth(bob))
    assert foreign.status_code == missing.status_code == 404
    assert foreign.json() == missing.json()
    assert job_id not in foreign.text


async def test_a_client_lists_only_its_own_jobs_and_an_admin_token_is_a_client_of_its_own(
    api: httpx.AsyncClient, store: Store, alice: str, bob: str, admin: str
) -> None:
    mine = await new_job(api, alice, quarantined=False, store=store)
    listed: dict[str, list[str]] = {}
    for role, token in {"client": alice, "other": bob, "admin": admin}.items():
        page = (await api.get("/v1/jobs", headers=auth(token))).json()
        listed[role] = [item["id"] for item in page["items"]]
    assert listed == {"client": [mine], "other": [], "admin": []}


def test_the_matrix_covers_every_route_of_the_app(settings: Settings) -> None:
    # Every route the app serves is in its OpenAPI document, which reads the routers the app
    # includes however FastAPI nests them, except FastAPI's own pages (the table has the two
    # of them that matter) and the console's under /ui, left out of the document on purpose:
    # tests/integration/test_console.py sends every one of those a caller without a session.
    document = create_app(settings).openapi()
    routes = {
        (method.upper(), path)
        for path, operations in document["paths"].items()
        for method in operations
    } | {("GET", "/openapi.json"), ("GET", "/docs")}
    tabled = {
        (
            method,
            path.replace("{queued}", "{job_id}")
            .replace("{quarantined}", "{job_id}")
            .replace("{workflow}", "{workflow_id}"),
        )
        for method, path, _ in MATRIX
    }
    assert routes == tabled
