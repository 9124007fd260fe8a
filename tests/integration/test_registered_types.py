"""Job types registered by the consumers (SPEC section 20, docs/job-types.md), against real
PostgreSQL (and RabbitMQ where a real consumer starts): an API that does not load a type's
handlers validates its submissions against the schema a consumer registered, applies its
defaults, sees a type registered after it started, and lets its own handlers win."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from pydantic import BaseModel, Field
from sqlalchemy import text

from jobrelay import AsyncClient
from jobrelay.api.app import create_app
from jobrelay.api.notifications import ApiNotifications
from jobrelay.api.waiting import FinishWaiters
from jobrelay.auth import Authenticator
from jobrelay.consumer.service import register_types
from jobrelay.core.flow import Limit, Rate
from jobrelay.core.registry import JobContext, JobType, Registry
from jobrelay.core.settings import Settings
from jobrelay.core.type_catalog import RegisteredType, RegisteredTypes, registrable_types
from jobrelay.db.store import Store
from jobrelay.db.type_store import PgTypeStore
from jobrelay.handlers.loading import load_registry
from jobrelay_client.errors import ApiError
from tests.conftest import MakeSettings, auth
from tests.support.consumer_kit import running_consumer
from tests.support.system import cli
from tests.support.waiting import eventually


class Address(BaseModel):
    city: str


class Signup(BaseModel):
    email: str
    seats: int = Field(ge=1, le=10)
    address: Address


class Other(BaseModel):
    x: int


async def signup(context: JobContext, payload: Signup) -> dict[str, Any]:
    """Sign a customer up."""
    return {"seats": payload.seats}


def shop_registry() -> Registry:
    """What the consumers of the shop run and the API does not load."""
    registry = Registry()
    registry.register(
        JobType(
            "shop.signup",
            Signup,
            signup,
            max_attempts=7,
            priority=5,
            timeout_seconds=20.0,
            description="Sign a customer up.",
            limit=Limit(concurrency=3, rate=Rate(10, 1)),
        )
    )
    return registry


VALID = {"email": "a@example.com", "seats": 2, "address": {"city": "Lyon"}}
SECRET = "hunter2-do-not-echo"


@asynccontextmanager
async def api_with(
    settings: Settings, store: Store, registry: Registry
) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(settings, store=store, registry=registry)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://jobrelay.test") as client:
        yield client


async def register(store: Store, registry: Registry, by: str = "test:1") -> None:
    await PgTypeStore(store).register_types(registrable_types(registry, by=by))


async def submit(api: httpx.AsyncClient, token: str, key: str, **body: Any) -> httpx.Response:
    return await api.post("/v1/jobs", json=body, headers=auth(token, key))


async def test_a_consumer_registers_its_types_at_start_and_the_api_accepts_them(
    api: httpx.AsyncClient, alice: str, store: Store, make_settings: MakeSettings
) -> None:
    async with running_consumer(make_settings(), shop_registry()) as consumer:
        assert consumer.worker is not None
        name = consumer.worker.name

    row = (
        await store.fetch_all(text("SELECT * FROM jobrelay.job_types WHERE name = 'shop.signup'"))
    )[0]
    assert row.payload_schema == Signup.model_json_schema()
    assert (row.max_attempts, row.priority, row.timeout_seconds) == (7, 5, 20.0)
    assert (row.concurrency, row.rate_count, row.rate_period_seconds) == (3, 10, 1)
    assert (row.description, row.registered_by) == ("Sign a customer up.", name)

    answer = await submit(api, alice, "k1", type="shop.signup", payload=VALID)

    assert answer.status_code == 202, answer.text
    assert (answer.json()["max_attempts"], answer.json()["priority"]) == (7, 5)


async def test_a_bad_payload_is_invalid_payload_with_its_locations_and_without_its_values(
    api: httpx.AsyncClient, alice: str, store: Store
) -> None:
    await register(store, shop_registry())
    bad = {"email": SECRET, "seats": 0, "address": {"city": 31337}}

    answer = await submit(api, alice, "k1", type="shop.signup", payload=bad)

    assert answer.status_code == 422, answer.text
    problem = answer.json()
    assert problem["code"] == "invalid_payload"
    assert sorted(e["loc"] for e in problem["errors"]) == [["address", "city"], ["seats"]]
    assert all(set(e) == {"loc", "msg", "type"} for e in problem["errors"])
    assert "31337" not in answer.text
    assert (await store.fetch_all(text("SELECT id FROM jobrelay.jobs"))) == []


async def test_a_type_no_consumer_registered_is_unknown_job_type(
    api: httpx.AsyncClient, alice: str, store: Store
) -> None:
    await register(store, shop_registry())

    answer = await submit(api, alice, "k1", type="shop.refund", payload={})

    assert (answer.status_code, answer.json()["code"]) == (422, "unknown_job_type")


async def test_a_type_registered_after_the_api_started_is_accepted_soon_after(
    api: httpx.AsyncClient, alice: str, store: Store
) -> None:
    before = await submit(api, alice, "k1", type="shop.signup", payload=VALID)
    assert before.json()["code"] == "unknown_job_type"

    await register(store, shop_registry())

    async def accepted() -> bool:
        answer = await submit(api, alice, "k1", type="shop.signup", payload=VALID)
        return answer.status_code == 202

    # A miss reads the types again at most once a second (core/type_catalog.py).
    await eventually(accepted, within=5, interval=0.2, what="the new type to be accepted")


async def test_a_registration_notifies_the_api_which_reads_the_types_again_without_a_miss(
    store: Store, direct_database_url: str
) -> None:
    # A miss never reloads here: only the notification can make the type known.
    types = RegisteredTypes(PgTypeStore(store), Registry(), miss_reload_seconds=3600)
    assert "shop.signup" not in await types.catalog_for(["shop.signup"])
    auth_cache = Authenticator(store)
    notifications = ApiNotifications(auth_cache, FinishWaiters(), types)
    listening = asyncio.create_task(notifications.listen(direct_database_url))
    try:
        await eventually(lambda: _true(auth_cache.listening), what="the listener")
        # (Re)connecting marks the catalog stale in case something was missed: read it now,
        # so that only the registration's own notification can make the type known below.
        assert "shop.signup" not in await types.catalog_for(["shop.signup"])
        await register(store, shop_registry())

        async def known() -> bool:
            return "shop.signup" in await types.catalog_for(["shop.signup"])

        await eventually(known, within=5, what="the notified registration")
    finally:
        listening.cancel()
        with pytest.raises(asyncio.CancelledError):
            await listening


async def _true(value: object) -> bool:
    return bool(value)


async def test_the_handlers_the_api_loads_win_over_a_registered_schema(
    settings: Settings, store: Store, alice: str
) -> None:
    await register(store, shop_registry())
    loaded = load_registry(builtins=True)
    loaded.register(JobType("shop.signup", Other, max_attempts=2))

    async with api_with(settings, store, loaded) as api:
        ours = await submit(api, alice, "k1", type="shop.signup", payload={"x": 1})
        theirs = await submit(api, alice, "k2", type="shop.signup", payload=VALID)

    assert (ours.status_code, ours.json()["max_attempts"]) == (202, 2)
    assert (theirs.status_code, theirs.json()["code"]) == (422, "invalid_payload")


async def test_a_batch_checks_each_item_of_a_registered_type_against_its_schema(
    api: httpx.AsyncClient, alice: str, store: Store
) -> None:
    await register(store, shop_registry())
    jobs = [
        {"type": "shop.signup", "payload": VALID, "idempotency_key": "a"},
        {"type": "shop.signup", "payload": {**VALID, "seats": 99}, "idempotency_key": "b"},
        {"type": "shop.refund", "payload": {}, "idempotency_key": "c"},
    ]

    answer = await api.post("/v1/jobs/batch", json={"jobs": jobs}, headers=auth(alice))

    results = answer.json()["results"]
    assert [r["status"] for r in results] == [202, 422, 422]
    assert results[0]["job"]["priority"] == 5
    assert results[1]["error"]["code"] == "invalid_payload"
    assert results[1]["error"]["errors"][0]["loc"] == ["seats"]
    assert results[2]["error"]["code"] == "unknown_job_type"


async def test_a_workflow_of_registered_types_is_checked_job_by_job(
    api: httpx.AsyncClient, alice: str, store: Store
) -> None:
    await register(store, shop_registry())
    jobs = [
        {"ref": "one", "type": "shop.signup", "payload": VALID},
        {"ref": "two", "type": "shop.signup", "payload": {}, "after": ["one"]},
    ]

    bad = await api.post("/v1/workflows", json={"jobs": jobs}, headers=auth(alice, "w1"))
    good = await api.post("/v1/workflows", json={"jobs": jobs[:1]}, headers=auth(alice, "w2"))

    assert (bad.status_code, bad.json()["code"]) == (422, "invalid_payload")
    assert "'two'" in bad.json()["detail"]
    assert good.status_code == 202, good.text


async def test_the_last_consumer_to_register_a_type_wins_and_none_deletes_one(
    store: Store,
) -> None:
    old = shop_registry()
    old.register(JobType("shop.legacy", Other))
    new = Registry()
    new.register(JobType("shop.signup", Other, priority=-3))
    types = PgTypeStore(store)

    await register(store, old, by="old:1")
    await register(store, new, by="new:2")
    kept = {t.name: t for t in await types.registered_types()}

    assert sorted(kept) == ["shop.legacy", "shop.signup"]
    assert kept["shop.signup"] == RegisteredType(
        "shop.signup",
        Other.model_json_schema(),
        priority=-3,
        registered_by="new:2",
        registered_at=kept["shop.signup"].registered_at,
    )
    assert kept["shop.legacy"].registered_by == "old:1"


async def test_an_operator_sees_each_type_with_what_the_api_validates_it_by(
    api: httpx.AsyncClient, admin: str, alice: str, store: Store
) -> None:
    await register(store, shop_registry(), by="shop-consumer:7")

    answer = await api.get("/v1/admin/types", headers=auth(admin))
    refused = await api.get("/v1/admin/types", headers=auth(alice))

    assert answer.status_code == 200, answer.text
    types = {t["name"]: t for t in answer.json()["types"]}
    assert sorted(types) == ["catalog.export", "demo.fail", "demo.sleep", "shop.signup"]
    signup = types["shop.signup"]
    assert (signup["source"], signup["registered_by"]) == ("registered", "shop-consumer:7")
    assert (signup["max_attempts"], signup["priority"]) == (7, 5)
    assert (signup["concurrency"], signup["rate"], signup["per_key"]) == (3, "10/s", False)
    assert signup["payload_schema"] == Signup.model_json_schema()
    assert (types["demo.sleep"]["source"], types["demo.sleep"]["registered_by"]) == ("loaded", None)
    assert refused.status_code == 403


async def test_an_operator_sets_and_clears_a_runtime_limit_on_a_registered_type(
    api: httpx.AsyncClient, admin: str, store: Store
) -> None:
    await register(store, shop_registry())
    path = "/v1/admin/limits/shop.signup"

    code = await api.get(path, headers=auth(admin))
    put = await api.put(path, json={"concurrency": 1, "rate": None}, headers=auth(admin))
    listed = await api.get("/v1/admin/limits", headers=auth(admin))
    cleared = await api.delete(path, headers=auth(admin))
    unknown = await api.put(
        "/v1/admin/limits/shop.nothing", json={"concurrency": 1}, headers=auth(admin)
    )

    # The limit the consumer registered is the code's; a runtime one replaces it until cleared.
    assert code.status_code == 200, code.text
    assert (code.json()["concurrency"], code.json()["rate"], code.json()["source"]) == (
        3,
        "10/s",
        "code",
    )
    assert put.status_code == 200, put.text
    assert (put.json()["concurrency"], put.json()["rate"], put.json()["source"]) == (
        1,
        None,
        "runtime",
    )
    assert [limit["type"] for limit in listed.json()["limits"]] == ["shop.signup"]
    assert cleared.status_code == 204
    assert (unknown.status_code, unknown.json()["code"]) == (404, "job_type_not_found")


async def test_the_cli_sets_a_limit_on_a_type_only_a_consumer_registered(
    settings: Settings, store: Store
) -> None:
    await register(store, shop_registry())

    done = await asyncio.to_thread(cli, settings, "limits", "set", "shop.signup", "--rate", "2/s")
    unknown = await asyncio.to_thread(cli, settings, "limits", "set", "shop.none", "--rate", "2/s")

    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("shop.signup  rate=2/s  (runtime)")
    assert unknown.returncode != 0
    assert unknown.stderr.strip() == (
        "jobrelay: unknown job type 'shop.none': not in the registry of JOBRELAY_HANDLERS "
        "(or --handlers) nor registered by a consumer"
    )


async def test_the_client_gets_the_same_answers_for_a_registered_type(
    settings: Settings, store: Store, alice: str
) -> None:
    await register(store, shop_registry())
    app = create_app(settings, store=store, registry=load_registry(builtins=True))
    transport = httpx.ASGITransport(app=app)

    async with AsyncClient("http://jobrelay.test", alice, transport=transport) as client:
        made = await client.submit("shop.signup", VALID)
        with pytest.raises(ApiError) as refused:
            await client.submit("shop.signup", {**VALID, "seats": 0})
        [item] = await client.submit_many([{"type": "shop.signup", "payload": {}}])

    assert (made.max_attempts, made.priority) == (7, 5)
    assert (refused.value.status, refused.value.code) == (422, "invalid_payload")
    assert isinstance(item, ApiError) and item.code == "invalid_payload"


async def test_a_database_without_the_table_yet_turns_registered_types_off_not_submissions(
    api: httpx.AsyncClient, alice: str, store: Store
) -> None:
    async with store.transaction() as connection:
        await connection.execute(text("DROP TABLE jobrelay.job_types"))

    await register(store, shop_registry())  # skipped, with a warning
    unknown = await submit(api, alice, "k1", type="shop.signup", payload=VALID)
    loaded = await submit(api, alice, "k2", type="demo.sleep", payload={"seconds": 0})

    assert (unknown.status_code, unknown.json()["code"]) == (422, "unknown_job_type")
    assert loaded.status_code == 202


async def test_rows_written_by_hand_that_no_consumer_writes_fail_no_submission(
    api: httpx.AsyncClient, alice: str, store: Store
) -> None:
    await register(store, shop_registry())
    async with store.transaction() as connection:
        await connection.execute(
            text(
                "INSERT INTO jobrelay.job_types (name, payload_schema, timeout_seconds, "
                "rate_count, "
                "rate_period_seconds, registered_by) VALUES "
                "('shop.odd_rate', '{}', 1, 10, 5, 'hand'), ('shop.true', 'true', 1, NULL, NULL, "
                "'hand')"
            )
        )

    signup = await submit(api, alice, "k1", type="shop.signup", payload=VALID)
    odd_rate = await submit(api, alice, "k2", type="shop.odd_rate", payload={})
    not_an_object = await submit(api, alice, "k3", type="shop.true", payload={})

    assert signup.status_code == 202, signup.text
    assert odd_rate.status_code == 202, odd_rate.text  # its limit left out, with a warning
    assert (not_an_object.status_code, not_an_object.json()["code"]) == (422, "unknown_job_type")


async def test_a_model_whose_schema_postgresql_cannot_store_leaves_the_others_registered(
    store: Store,
) -> None:
    class Unbounded(BaseModel):
        ceiling: float = math.inf  # its schema's default is Infinity: no jsonb for it

    registry = shop_registry()
    registry.register(JobType("shop.unbounded", Unbounded))

    await register_types(PgTypeStore(store), registry, "host:1")  # the consumer's start

    assert [t.name for t in await PgTypeStore(store).registered_types()] == ["shop.signup"]
