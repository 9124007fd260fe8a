"""Flow control on the submission side (SPEC §16, docs/flow-control.md), against real
PostgreSQL: priority (the type's default, or the submission's), concurrency and unique keys, in
the fingerprint and the job view; unique jobs under concurrent submissions; the same rules for
batch items, ``jobrelay.enqueue``, the client and ``jobrelay submit``. Each test fails on the
code before flow control, which refused these fields (422) or had no such columns."""

from __future__ import annotations

import asyncio
import hashlib
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from pydantic import BaseModel
from sqlalchemy import text

import jobrelay
from jobrelay import AsyncClient
from jobrelay.core.fingerprint import canonical_json
from jobrelay.core.registry import Registry
from jobrelay.core.settings import Settings
from jobrelay.db.engine import libpq_url
from jobrelay.db.store import Store
from tests.conftest import auth

BASE_URL = "http://jobrelay.test"


class Account(BaseModel):
    account: str = "a"


def handler(context: Any, payload: Any) -> dict[str, Any]:
    return {}


def flow_registry() -> Registry:
    registry = Registry()
    registry.job("flow.plain", Account)(handler)
    registry.job("flow.urgent", Account, priority=50)(handler)
    registry.job(
        "flow.sync",
        Account,
        concurrency=1,
        concurrency_key=lambda payload: payload.account,
        unique=lambda payload: f"sync-{payload.account}",
    )(handler)
    registry.job("flow.broken", Account, unique=lambda payload: {"no": 1}[payload.account])(handler)
    registry.job("flow.numbered", Account, concurrency_key=lambda payload: 7)(handler)  # type: ignore[arg-type,return-value]
    return registry


@asynccontextmanager
async def flow_app(settings: Settings, store: Store) -> AsyncIterator[httpx.AsyncClient]:
    from jobrelay.api.app import create_app

    app = create_app(
        settings.model_copy(update={"api_max_concurrency": 0}),
        store=store,
        registry=flow_registry(),
    )
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as client:
        yield client


@pytest.fixture
async def api(settings: Settings, store: Store) -> AsyncIterator[httpx.AsyncClient]:
    async with flow_app(settings, store) as client:
        yield client


async def rows(store: Store, sql: str, **params: Any) -> list[Any]:
    async with store.transaction() as connection:
        result = await connection.execute(text(sql), params)
        return list(result) if result.returns_rows else []


async def finish(store: Store, job_id: str) -> None:
    """The job succeeded (as its consumer would leave it)."""
    await rows(
        store,
        "UPDATE jobrelay.jobs SET state = 'succeeded', finished_at = now() WHERE id = :id",
        id=uuid.UUID(job_id),
    )


def submit(type: str = "flow.plain", **fields: Any) -> dict[str, Any]:
    return {"type": type, "payload": {"account": "a"}, **fields}


# --- priority ------------------------------------------------------------------------------


async def test_priority_is_the_types_unless_the_submission_gives_one_and_reaches_the_outbox(
    api: httpx.AsyncClient, alice: str, store: Store
) -> None:
    plain = await api.post("/v1/jobs", json=submit(), headers=auth(alice, "p1"))
    urgent = await api.post("/v1/jobs", json=submit("flow.urgent"), headers=auth(alice, "p2"))
    lowered = await api.post(
        "/v1/jobs", json=submit("flow.urgent", priority=-5), headers=auth(alice, "p3")
    )
    assert [r.status_code for r in (plain, urgent, lowered)] == [202, 202, 202]
    assert [r.json()["priority"] for r in (plain, urgent, lowered)] == [0, 50, -5]
    # The view read back says the same, and the outbox row carries priority, client and type.
    read = await api.get(urgent.headers["location"], headers=auth(alice))
    assert read.json()["priority"] == 50
    assert read.json()["concurrency_key"] is None and read.json()["unique_key"] is None
    outbox = await rows(
        store,
        "SELECT o.priority, o.client_id = j.client_id AS same_client, o.type "
        "FROM jobrelay.outbox o JOIN jobrelay.jobs j ON j.id = o.job_id ORDER BY j.idempotency_key",
    )
    assert [(r.priority, r.same_client, r.type) for r in outbox] == [
        (0, True, "flow.plain"),
        (50, True, "flow.urgent"),
        (-5, True, "flow.urgent"),
    ]


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        ({"priority": 101}, "priority"),
        ({"priority": -101}, "priority"),
        ({"priority": "5"}, "priority"),
        ({"priority": 1.5}, "priority"),
        ({"priority": True}, "priority"),
        ({"concurrency_key": "k" * 201}, "concurrency_key"),
        ({"unique_key": "u" * 201}, "unique_key"),
        ({"unique_key": ""}, "unique_key"),
        ({"concurrency_key": 7}, "concurrency_key"),
    ],
)
async def test_a_priority_out_of_range_or_a_key_too_long_is_a_422_validation_error(
    api: httpx.AsyncClient, alice: str, store: Store, fields: dict[str, Any], where: str
) -> None:
    response = await api.post("/v1/jobs", json=submit(**fields), headers=auth(alice, "bad"))
    assert response.status_code == 422
    assert response.headers["content-type"].startswith("application/problem+json")
    problem = response.json()
    assert problem["code"] == "validation_error"
    assert [error["loc"] for error in problem["errors"]] == [["body", where]]
    batch = await api.post(
        "/v1/jobs/batch",
        json={"jobs": [{**submit(**fields), "idempotency_key": "bad"}]},
        headers=auth(alice),
    )
    assert batch.json()["results"][0]["status"] == 422
    assert batch.json()["results"][0]["error"]["code"] == "validation_error"
    assert await rows(store, "SELECT id FROM jobrelay.jobs") == []


async def test_priority_given_as_3_0_is_the_integer_3(api: httpx.AsyncClient, alice: str) -> None:
    response = await api.post("/v1/jobs", json=submit(priority=3.0), headers=auth(alice, "f"))
    assert (response.status_code, response.json()["priority"]) == (202, 3)


async def test_a_key_function_that_raises_or_gives_no_text_is_a_422_that_says_so(
    api: httpx.AsyncClient, alice: str, store: Store
) -> None:
    raised = await api.post("/v1/jobs", json=submit("flow.broken"), headers=auth(alice, "k1"))
    numbered = await api.post("/v1/jobs", json=submit("flow.numbered"), headers=auth(alice, "k2"))
    assert (raised.status_code, numbered.status_code) == (422, 422)
    assert raised.json()["code"] == "invalid_payload"
    assert "unique= function raised KeyError" in raised.json()["detail"]
    assert "concurrency_key= function gave int, not a text" in numbered.json()["detail"]
    # Given by the submission, the function is not called: the job is made.
    keyed = await api.post(
        "/v1/jobs", json=submit("flow.broken", unique_key="mine"), headers=auth(alice, "k3")
    )
    assert keyed.status_code == 202 and keyed.json()["unique_key"] == "mine"
    assert len(await rows(store, "SELECT id FROM jobrelay.jobs")) == 1


async def test_the_types_key_functions_give_the_jobs_keys_unless_the_submission_does(
    api: httpx.AsyncClient, alice: str
) -> None:
    derived = await api.post("/v1/jobs", json=submit("flow.sync"), headers=auth(alice, "s1"))
    given = await api.post(
        "/v1/jobs",
        json={**submit("flow.sync"), "concurrency_key": "own", "unique_key": "own-u"},
        headers=auth(alice, "s2"),
    )
    assert (derived.json()["concurrency_key"], derived.json()["unique_key"]) == ("a", "sync-a")
    assert (given.json()["concurrency_key"], given.json()["unique_key"]) == ("own", "own-u")


# --- the fingerprint -----------------------------------------------------------------------


def hash_before_flow_control(job_type: str, payload: dict[str, Any]) -> str:
    """The request hash as the code before flow control stored it."""
    document = canonical_json({"type": job_type, "payload": payload})
    return hashlib.sha256(document.encode()).hexdigest()


async def test_a_submission_without_the_new_fields_keeps_the_hash_it_had_before(
    api: httpx.AsyncClient, alice: str, store: Store
) -> None:
    # flow.urgent has a default priority and flow.sync key functions: what the type fills in
    # is not hashed either, so neither changes the hash of a request that names none.
    for job_type in ("flow.plain", "flow.urgent", "flow.sync"):
        response = await api.post("/v1/jobs", json=submit(job_type), headers=auth(alice, job_type))
        assert response.status_code == 202
        [stored] = await rows(
            store, "SELECT request_hash FROM jobrelay.jobs WHERE idempotency_key = :k", k=job_type
        )
        assert stored.request_hash == hash_before_flow_control(job_type, {"account": "a"})


async def test_priority_and_keys_are_part_of_the_fingerprint(
    api: httpx.AsyncClient, alice: str
) -> None:
    async def post(key: str, **fields: Any) -> int:
        response = await api.post("/v1/jobs", json=submit(**fields), headers=auth(alice, key))
        return response.status_code

    assert await post("p", priority=5) == 202
    assert await post("p", priority=5) == 200
    assert await post("p", priority=6) == 409
    assert await post("p") == 409  # given (5) and not given are two requests
    assert await post("zero", priority=0) == 202
    assert await post("zero") == 409  # an explicit 0 is hashed: see core/fingerprint.py
    assert await post("c", concurrency_key="x") == 202
    assert await post("c", concurrency_key="y") == 409
    assert await post("u", unique_key="x") == 202
    assert await post("u", unique_key="x") == 200
    assert await post("u", unique_key="y") == 409


# --- unique jobs ---------------------------------------------------------------------------


async def test_twenty_concurrent_unique_submissions_make_one_job_and_nineteen_deduplicated(
    api: httpx.AsyncClient, alice: str, store: Store
) -> None:
    responses = await asyncio.gather(
        *(
            api.post("/v1/jobs", json=submit(unique_key="nightly"), headers=auth(alice, f"n{i}"))
            for i in range(20)
        )
    )
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] * 19 + [202]
    made = next(r.json() for r in responses if r.status_code == 202)
    assert "deduplicated" not in made
    deduplicated = [r.json() for r in responses if r.status_code == 200]
    assert all(view["deduplicated"] is True for view in deduplicated)
    assert {view["id"] for view in deduplicated} == {made["id"]}
    assert all(view["idempotency_key"] == made["idempotency_key"] for view in deduplicated)
    assert len(await rows(store, "SELECT id FROM jobrelay.jobs")) == 1
    assert len(await rows(store, "SELECT id FROM jobrelay.outbox")) == 1
    assert len(await rows(store, "SELECT seq FROM jobrelay.job_journal")) == 1

    # Once it finished, the next submission makes a new job; and the deduplicated
    # submissions' keys were not kept: one of them, sent again, is new too.
    await finish(store, made["id"])
    loser = next(f"n{i}" for i in range(20) if f"n{i}" != made["idempotency_key"])
    again = await api.post(
        "/v1/jobs", json=submit(unique_key="nightly"), headers=auth(alice, loser)
    )
    assert again.status_code == 202 and again.json()["id"] != made["id"]
    assert "deduplicated" not in again.json()
    # Live again: deduplicated against the new one.
    third = await api.post("/v1/jobs", json=submit(unique_key="nightly"), headers=auth(alice, "z"))
    assert (third.status_code, third.json()["id"]) == (200, again.json()["id"])


async def test_a_quarantined_unique_job_is_not_replayed_while_another_holds_its_key(
    api: httpx.AsyncClient, alice: str, store: Store
) -> None:
    from jobrelay.db.quarantine_store import QuarantineStore

    first = await api.post("/v1/jobs", json=submit(unique_key="r"), headers=auth(alice, "r1"))
    await rows(
        store,
        "UPDATE jobrelay.jobs SET state = 'quarantined', finished_at = now() WHERE id = :id",
        id=uuid.UUID(first.json()["id"]),
    )
    second = await api.post("/v1/jobs", json=submit(unique_key="r"), headers=auth(alice, "r2"))
    assert second.status_code == 202
    keeper = QuarantineStore(store)
    # Before the guard, the replay's UPDATE broke ux_jobs_live_unique_key: a 500.
    assert await keeper.replay_job(uuid.UUID(first.json()["id"]), budget=1, detail="t") is False
    await finish(store, second.json()["id"])
    assert await keeper.replay_job(uuid.UUID(first.json()["id"]), budget=1, detail="t") is True


async def test_a_unique_key_is_per_client_and_type(
    api: httpx.AsyncClient, alice: str, bob: str
) -> None:
    first = await api.post("/v1/jobs", json=submit(unique_key="u"), headers=auth(alice, "1"))
    other_type = await api.post(
        "/v1/jobs", json=submit("flow.urgent", unique_key="u"), headers=auth(alice, "2")
    )
    other_client = await api.post("/v1/jobs", json=submit(unique_key="u"), headers=auth(bob, "1"))
    assert [r.status_code for r in (first, other_type, other_client)] == [202, 202, 202]


async def test_a_batch_follows_the_unique_rules_item_by_item(
    api: httpx.AsyncClient, alice: str, store: Store
) -> None:
    def item(key: str, **fields: Any) -> dict[str, Any]:
        return {**submit(**fields), "idempotency_key": key}

    first = await api.post(
        "/v1/jobs/batch",
        json={"jobs": [item("b1", unique_key="u"), item("b2", unique_key="u"), item("b3")]},
        headers=auth(alice),
    )
    results = first.json()["results"]
    assert [r["status"] for r in results] == [202, 200, 202]
    assert results[1]["job"]["deduplicated"] is True
    assert results[1]["job"]["id"] == results[0]["job"]["id"]
    assert "deduplicated" not in results[0]["job"] and "deduplicated" not in results[2]["job"]
    later = await api.post(
        "/v1/jobs/batch", json={"jobs": [item("b4", unique_key="u")]}, headers=auth(alice)
    )
    assert later.json()["results"][0]["job"]["id"] == results[0]["job"]["id"]
    assert later.json()["results"][0]["job"]["deduplicated"] is True
    keys = await rows(store, "SELECT idempotency_key FROM jobrelay.jobs ORDER BY idempotency_key")
    assert [r.idempotency_key for r in keys] == ["b1", "b3"]  # b2 and b4 were not kept


async def test_enqueue_returns_the_live_job_of_the_unique_key_and_a_new_one_after_it(
    database_url: str, store: Store, alice: str
) -> None:
    options: dict[str, Any] = {"client": "alice", "type": "flow.sync", "payload": {"account": "b"}}
    registry = flow_registry()
    with psycopg.connect(libpq_url(database_url), autocommit=True) as connection:
        made = jobrelay.enqueue(connection, key="e1", registry=registry, priority=9, **options)
        same = jobrelay.enqueue(connection, key="e2", registry=registry, **options)
        assert (made.priority, made.concurrency_key, made.unique_key) == (9, "b", "sync-b")
        assert same.id == made.id
        assert same.idempotency_key == "e1" != "e2"  # how a caller tells it was deduplicated
        with pytest.raises(ValueError, match="priority must be from -100 to 100"):
            jobrelay.enqueue(connection, key="e3", priority=101, **options)
        with pytest.raises(ValueError, match="unique_key is a text of 1 to 200"):
            jobrelay.enqueue(connection, key="e3", unique_key="u" * 201, **options)
        await finish(store, str(made.id))
        after = jobrelay.enqueue(connection, key="e2", registry=registry, **options)
        assert after.id != made.id and after.idempotency_key == "e2"


async def test_the_async_client_sends_priority_and_keys_and_reads_deduplicated(
    settings: Settings, store: Store, alice: str
) -> None:
    from jobrelay.api.app import create_app

    app = create_app(settings, store=store, registry=flow_registry())
    transport = httpx.ASGITransport(app=app)
    async with AsyncClient(BASE_URL, alice, transport=transport) as client:
        made = await client.submit(
            "flow.plain", {"account": "c"}, priority=-3, concurrency_key="c", unique_key="u"
        )
        again = await client.submit("flow.plain", {"account": "c"}, unique_key="u")
        [batch] = await client.submit_many(
            [{"type": "flow.plain", "payload": {"account": "c"}, "unique_key": "u"}]
        )
        with pytest.raises(ValueError, match="priority"):
            await client.submit("flow.plain", {}, priority=500)
    assert (made.priority, made.concurrency_key, made.unique_key) == (-3, "c", "u")
    assert made.deduplicated is False
    assert again.id == made.id and again.deduplicated is True
    assert isinstance(batch, jobrelay.Job) and batch.id == made.id and batch.deduplicated


def test_submit_on_the_command_line_takes_priority_and_keys(
    settings: Settings, alice: str, tmp_path: Path
) -> None:
    from tests.support.processes import run_cli, running_api

    seconds = ("--payload", '{"seconds": 0}')
    flow = ("--priority", "7", "--concurrency-key", "c1", "--unique-key", "u1")
    with running_api(settings, tmp_path) as (_, env, _):
        env = env | {"JOBRELAY_TOKEN": alice}
        made = run_cli(env, "submit", "demo.sleep", *seconds, *flow, "--key", "c1", "--json")
        assert made.returncode == 0, made.stderr
        shown = json.loads(made.stdout)
        assert (shown["priority"], shown["concurrency_key"], shown["unique_key"]) == (7, "c1", "u1")
        again = run_cli(env, "submit", "demo.sleep", *seconds, *flow, "--key", "c2")
        assert again.returncode == 0, again.stderr
        assert again.stdout.startswith(f"deduplicated: job {shown['id']} ")
        for args, message in [
            (("--priority", "101"), "priority must be from -100 to 100, not 101"),
            (("--priority", "high"), "--priority"),
            (("--unique-key", "u" * 201), "unique_key is a text of 1 to 200"),
        ]:
            refused = run_cli(env, "submit", "demo.sleep", *seconds, *args)
            assert refused.returncode == 1, refused.stderr
            assert message in refused.stderr
            assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr


def test_submit_on_the_command_line_takes_the_policies_and_says_each_refusal_in_a_line(
    settings: Settings, alice: str, tmp_path: Path
) -> None:
    from tests.support.processes import run_cli, running_api

    def submit(*args: str) -> Any:
        return run_cli(env, "submit", "demo.sleep", *args)

    with running_api(settings, tmp_path) as (_, env, _):
        env = env | {"JOBRELAY_TOKEN": alice}
        made = submit("--payload", '{"seconds": 0}', "--sequence-key", "s1", "--json")
        assert made.returncode == 0, made.stderr
        assert json.loads(made.stdout)["sequence_key"] == "s1"
        debounce = ("--unique-key", "d1", "--debounce", "30", "--debounce-max", "300")
        first = json.loads(submit("--payload", '{"seconds": 0}', *debounce, "--json").stdout)
        moved = submit("--payload", '{"seconds": 1}', *debounce)
        assert moved.returncode == 0, moved.stderr
        assert moved.stdout.startswith(f"debounced: job {first['id']} (demo.sleep) took the")
        reject = ("--unique-key", "r1", "--on-duplicate", "reject", "--unique-for", "60")
        kept = json.loads(submit("--payload", '{"seconds": 0}', *reject, "--json").stdout)
        for args, message in [
            (reject, f"409 duplicate_job: job {kept['id']} holds the unique key"),
            (("--unique-for", "60"), "422 invalid_policy: unique_for_seconds needs a unique_key"),
            (("--unique-key", "x", "--debounce", "0"), "debounce_seconds is a number of seconds"),
            (("--unique-key", "x", "--debounce", "nan"), "debounce_seconds is a number of seconds"),
        ]:
            refused = submit("--payload", '{"seconds": 0}', *args)
            assert refused.returncode == 1, refused.stderr
            assert message in refused.stderr
            assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
        unknown = submit("--on-duplicate", "maybe")
        assert unknown.returncode != 0 and "--on-duplicate" in unknown.stderr
