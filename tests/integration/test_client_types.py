"""Which client may submit what (SPEC section 25; docs/submitting.md), against real PostgreSQL:
a client's type patterns bind every HTTP submission (single, batch, workflow) and the code
paths (``jobrelay.enqueue``, ``jobrelay_enqueue``); without patterns a client may submit every
type but those closed to HTTP (``api=False``, Django tasks: tests/integration/
test_django_backend.py), an admin client every type. A refused submission writes nothing."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import psycopg
import pytest
from pydantic import BaseModel

import jobrelay
from jobrelay.core.fingerprint import token_hash
from jobrelay.core.registry import JobContext, Registry
from jobrelay.core.settings import Settings
from jobrelay.core.type_catalog import RegisteredType
from jobrelay.db.client_store import ClientStore
from jobrelay.db.store import Store
from jobrelay.db.type_store import PgTypeStore
from jobrelay.handlers.loading import load_registry
from tests.conftest import auth, make_client
from tests.support import factories
from tests.support.system import cli, cli_json

OPEN = "catalog.export"  # a built-in type, open to HTTP
OPEN_BODY = {"type": OPEN, "payload": {"course": "JavaScript"}}
CLOSED = "ops.wipe"  # loaded by the API, declared api=False
CLOSED_BODY = {"type": CLOSED, "payload": {"tenant": "t1"}}
REGISTERED_CLOSED = "billing.refund"  # not loaded by the API; a consumer registered it api=False


class Wipe(BaseModel):
    tenant: str


def api_registry() -> Registry:
    """The built-in types and one closed to HTTP."""
    registry = load_registry("", builtins=True)

    @registry.job(CLOSED, Wipe, api=False)
    async def wipe(context: JobContext, payload: Wipe) -> dict[str, Any]:
        return {}

    return registry


@pytest.fixture
async def api(settings: Settings, store: Store) -> AsyncIterator[httpx.AsyncClient]:
    from jobrelay.api.app import create_app

    await PgTypeStore(store).register_types(
        [
            RegisteredType(
                name=REGISTERED_CLOSED,
                payload_schema={"type": "object"},
                registered_by="test",
                api=False,
            )
        ]
    )
    app = create_app(settings, store=store, registry=api_registry())
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://jobrelay.test") as client:
        yield client


async def client_with_types(store: Store, name: str, *patterns: str, admin: bool = False) -> str:
    token = "jr_" + uuid.uuid4().hex
    await ClientStore(store).create_client(
        name, token_hash(token), is_admin=admin, type_patterns=patterns or None
    )
    return token


async def written(store: Store) -> dict[str, int]:
    """How many rows each table a submission writes holds."""
    names = ("jobs", "outbox", "job_events", "workflows")
    return {name: await factories.count(store, factories.table_named(name)) for name in names}


NOTHING = {"jobs": 0, "outbox": 0, "job_events": 0, "workflows": 0}


def assert_refused(response: httpx.Response, job_type: str) -> None:
    assert response.status_code == 403, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    problem = response.json()
    assert problem["code"] == "type_not_allowed"
    assert problem["job_type"] == job_type


async def post_job(api: httpx.AsyncClient, token: str, body: dict[str, Any]) -> httpx.Response:
    return await api.post("/v1/jobs", json=body, headers=auth(token, uuid.uuid4().hex))


# --- the default rule ----------------------------------------------------------------------------


async def test_a_client_without_patterns_submits_open_types_but_not_closed_ones(
    api: httpx.AsyncClient, alice: str, store: Store
) -> None:
    assert_refused(await post_job(api, alice, CLOSED_BODY), CLOSED)
    registered = {"type": REGISTERED_CLOSED, "payload": {}}
    assert_refused(await post_job(api, alice, registered), REGISTERED_CLOSED)
    assert await written(store) == NOTHING

    assert (await post_job(api, alice, OPEN_BODY)).status_code == 202


async def test_a_client_whose_patterns_name_a_closed_type_submits_it(
    api: httpx.AsyncClient, store: Store
) -> None:
    token = await client_with_types(store, "ops-tools", "ops.*", "billing.refund")

    assert (await post_job(api, token, CLOSED_BODY)).status_code == 202
    registered = {"type": REGISTERED_CLOSED, "payload": {}}
    assert (await post_job(api, token, registered)).status_code == 202
    # Its patterns decide alone: an open type they do not name is refused.
    assert_refused(await post_job(api, token, OPEN_BODY), OPEN)


async def test_an_admin_client_without_patterns_submits_every_type(
    api: httpx.AsyncClient, admin: str
) -> None:
    assert (await post_job(api, admin, CLOSED_BODY)).status_code == 202
    assert (await post_job(api, admin, OPEN_BODY)).status_code == 202


# --- patterns over HTTP: nothing written when refused ----------------------------------------


async def test_a_single_submission_outside_the_patterns_writes_nothing(
    api: httpx.AsyncClient, store: Store
) -> None:
    token = await client_with_types(store, "shop", "shop.*", "mail.send")

    assert_refused(await post_job(api, token, OPEN_BODY), OPEN)
    assert await written(store) == NOTHING


async def test_a_batch_with_one_item_outside_the_patterns_writes_nothing(
    api: httpx.AsyncClient, store: Store
) -> None:
    token = await client_with_types(store, "exports", "catalog.*")
    items = [
        {**OPEN_BODY, "idempotency_key": "ok-1"},
        {**CLOSED_BODY, "idempotency_key": "refused-1"},
    ]

    response = await api.post("/v1/jobs/batch", json={"jobs": items}, headers=auth(token))

    assert_refused(response, CLOSED)
    assert await written(store) == NOTHING


async def test_a_workflow_with_one_job_outside_the_patterns_writes_nothing(
    api: httpx.AsyncClient, store: Store
) -> None:
    token = await client_with_types(store, "sleepers", "demo.sleep")
    document = {
        "jobs": [
            {"ref": "a", "type": "demo.sleep", "payload": {"seconds": 0}},
            {"ref": "b", "after": ["a"], **OPEN_BODY},
        ]
    }

    response = await api.post("/v1/workflows", json=document, headers=auth(token, "wf-1"))

    assert_refused(response, OPEN)
    assert await written(store) == NOTHING


async def test_changed_patterns_apply_to_the_next_submission(
    api: httpx.AsyncClient, store: Store
) -> None:
    token = await client_with_types(store, "shop", "shop.*")
    assert_refused(await post_job(api, token, OPEN_BODY), OPEN)

    await ClientStore(store).set_client_type_patterns("shop", ["catalog.export"])
    assert (await post_job(api, token, OPEN_BODY)).status_code == 202

    await ClientStore(store).set_client_type_patterns("shop", None)  # the default rule
    assert (await post_job(api, token, OPEN_BODY)).status_code == 202
    assert_refused(await post_job(api, token, CLOSED_BODY), CLOSED)


# --- the code paths: explicit patterns bind, the closed default does not ----------------------


async def test_enqueue_is_bound_by_explicit_patterns_only(
    store: Store, database_url: str, alice: str
) -> None:
    await client_with_types(store, "shop", "shop.*")
    url = jobrelay.libpq_url(database_url)
    with psycopg.connect(url) as connection:
        with pytest.raises(
            jobrelay.TypeNotAllowed, match=r"'shop' may not submit type 'ops\.wipe'"
        ):
            jobrelay.enqueue(connection, client="shop", type=CLOSED, payload={}, key="k-1")
        workflow = jobrelay.Workflow()
        workflow.add("shop.pay", {}, ref="pay")
        workflow.add(OPEN, {}, ref="export", after=["pay"])
        with pytest.raises(jobrelay.TypeNotAllowed, match=r"'catalog\.export'"):
            jobrelay.enqueue_workflow(connection, workflow, client="shop", key="w-1")
        # A client without patterns enqueues a type closed to HTTP from code.
        jobrelay.enqueue(connection, client="alice", type=CLOSED, payload={}, key="k-2")
        jobrelay.enqueue(connection, client="shop", type="shop.pay", payload={}, key="k-3")
        connection.commit()
    assert (await written(store))["jobs"] == 2


async def test_the_sql_function_is_bound_by_explicit_patterns_only(
    store: Store, database_url: str, alice: str
) -> None:
    await client_with_types(store, "shop", "shop.*", "mail.send_?")
    call = "SELECT jobrelay.jobrelay_enqueue(%s, %s, '{}'::jsonb, %s)"
    with psycopg.connect(jobrelay.libpq_url(database_url), autocommit=True) as connection:
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="type_not_allowed"):
            connection.execute(call, ["shop", OPEN, "k-1"])
        # "_" is a character of the pattern, not LIKE's wildcard; "?" is one character.
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="type_not_allowed"):
            connection.execute(call, ["shop", "mail.sendX1", "k-2"])
        connection.execute(call, ["shop", "mail.send_1", "k-3"])
        connection.execute(call, ["shop", "shop.tasks.confirm_order", "k-4"])
        connection.execute(call, ["alice", CLOSED, "k-5"])
    assert (await written(store))["jobs"] == 3


# --- managing the patterns: CLI and admin API ---------------------------------------------------


async def test_types_round_trip_through_the_cli_and_the_admin_api(
    api: httpx.AsyncClient, settings: Settings, admin: str
) -> None:
    created = cli_json(settings, "clients", "create", "shop", "--types", "shop.*, mail.send")
    assert created["type_patterns"] == ["shop.*", "mail.send"]

    listed = {client["name"]: client for client in cli_json(settings, "clients", "list")}
    assert listed["shop"]["type_patterns"] == ["shop.*", "mail.send"]
    assert listed["ops"]["type_patterns"] is None

    updated = cli(settings, "clients", "update", "shop", "--types", "shop.*,catalog.export")
    assert updated.returncode == 0, updated.stderr
    response = await api.get("/v1/admin/clients", headers=auth(admin))
    assert response.status_code == 200
    shown = {client["name"]: client for client in response.json()["clients"]}
    assert shown["shop"]["type_patterns"] == ["shop.*", "catalog.export"]
    assert shown["ops"]["admin"] is True and shown["ops"]["type_patterns"] is None
    assert created["token"] not in response.text and "token_hash" not in shown["shop"]

    cleared = cli(settings, "clients", "update", "shop", "--default-types")
    assert cleared.returncode == 0, cleared.stderr
    listed = {client["name"]: client for client in cli_json(settings, "clients", "list")}
    assert listed["shop"]["type_patterns"] is None


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        (("create", "x", "--types", ""), "--types: give at least one type pattern"),
        (("create", "x", "--types", "shop.*,,mail"), "--types: a type pattern is empty"),
        (("create", "x", "--types", "shop.[ab]"), "may hold only letters, digits"),
        (("create", "x", "--types", "a" * 201), "at most 200 characters"),
        (("update", "nobody", "--types", "shop.*"), "no client named 'nobody'"),
        (("update", "x"), "give --types PATTERNS, or --default-types"),
    ],
)
def test_bad_types_are_one_line_and_a_non_zero_exit(
    settings: Settings, store: Store, arguments: tuple[str, ...], said: str
) -> None:
    result = cli(settings, "clients", *arguments)

    assert result.returncode == 1
    assert said in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stderr


async def test_a_non_admin_cannot_list_the_clients(api: httpx.AsyncClient, store: Store) -> None:
    token = await make_client(store, "plain")
    response = await api.get("/v1/admin/clients", headers=auth(token))
    assert response.status_code == 403
