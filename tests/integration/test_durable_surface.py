"""What users and operators see and send of durable execution (SPEC section 21), against real
PostgreSQL: ``POST /v1/jobs/{id}/signals/{name}`` (kept once per key, 404 for another client's
job unless admin, 409 once finished, 413 over 64 KiB, the sleeping job woken with its outbox
row), the job view's ``wake_at`` / ``waiting_for`` / ``steps`` (values with ``?steps=values``),
the trace, the replay with and without ``reset_steps``, ``jobrelay jobs signal`` and the
async client. The steps and the sleeps are written with plain SQL here: the consumer's side is
tested where it is built."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import func, insert, select

from jobrelay.client import AsyncClient, JobFinished
from jobrelay.core.settings import Settings
from jobrelay.db import tables
from jobrelay.db.store import Store
from jobrelay.operations import Operations
from tests.conftest import MakeSettings, api_client, auth
from tests.support import factories
from tests.support.consumer_kit import registry
from tests.support.system import cli, submit_job

EXPORT = {"type": "catalog.export", "payload": {"course": "JavaScript"}}


async def sleep_on_signal(store: Store, job_id: str, name: str) -> None:
    """The job as a handler's wait leaves it: sleeping on the signal, no deadline."""
    await factories.set_job(
        store, job_id, state="sleeping", attempts=1, max_attempts=4, waiting_on={"signal": name}
    )


async def record_steps(store: Store, job_id: str, *steps: dict[str, Any]) -> None:
    async with store.transaction() as connection:
        for step in steps:
            await connection.execute(insert(tables.job_steps).values(job_id=job_id, **step))


async def signals_of(store: Store, job_id: str) -> list[tuple[str, Any, str | None]]:
    signals = tables.job_signals
    async with store.transaction() as connection:
        rows = await connection.execute(
            select(signals.c.name, signals.c.value, signals.c.taken_by)
            .where(signals.c.job_id == job_id)
            .order_by(signals.c.id)
        )
        return [tuple(row) for row in rows]  # type: ignore[misc]


async def outbox_rows(store: Store, job_id: str) -> int:
    async with store.transaction() as connection:
        count = select(func.count()).where(tables.outbox.c.job_id == job_id)
        return int((await connection.execute(count)).scalar_one())


async def events_of(store: Store, job_id: str) -> list[str]:
    return [event.event for event in await store.job_events(uuid.UUID(job_id))]


def signal_path(job_id: str, name: str) -> str:
    return f"/v1/jobs/{job_id}/signals/{name}"


# --- the signal endpoint ----------------------------------------------------------------------


async def test_a_signal_is_kept_once_per_key_and_answered_202(
    api: httpx.AsyncClient, alice: str, store: Store
) -> None:
    job_id = await submit_job(api, alice, EXPORT)

    sent = await api.post(
        signal_path(job_id, "approved"), json={"by": "ana"}, headers=auth(alice, "approve-1")
    )
    again = await api.post(
        signal_path(job_id, "approved"), json={"by": "bob"}, headers=auth(alice, "approve-1")
    )

    assert sent.status_code == 202, sent.text
    assert sent.json() == {"job_id": job_id, "name": "approved", "status": "sent"}
    assert (again.status_code, again.json()["status"]) == (202, "repeated")
    assert await signals_of(store, job_id) == [("approved", {"by": "ana"}, None)]
    assert (await events_of(store, job_id)).count("signalled") == 1
    # Kept for a later wait: the queued job is not moved.
    assert (await store.get_job(uuid.UUID(job_id))).state.value == "queued"  # type: ignore[union-attr]


async def test_signals_without_a_key_are_each_kept_and_any_json_value_is_one(
    api: httpx.AsyncClient, alice: str, store: Store
) -> None:
    job_id = await submit_job(api, alice, EXPORT)

    for value in (3, "yes", None, [1, {"a": True}]):
        response = await api.post(
            signal_path(job_id, "tick"),
            content=json.dumps(value),  # httpx sends no body for json=None
            headers={**auth(alice), "content-type": "application/json"},
        )
        assert (response.status_code, response.json()["status"]) == (202, "sent"), response.text

    assert [value for _, value, _ in await signals_of(store, job_id)] == [
        3,
        "yes",
        None,
        [1, {"a": True}],
    ]


async def test_another_clients_job_is_404_unless_the_caller_is_admin(
    api: httpx.AsyncClient, alice: str, bob: str, admin: str, store: Store
) -> None:
    job_id = await submit_job(api, alice, EXPORT)

    other = await api.post(signal_path(job_id, "go"), json=1, headers=auth(bob))
    unknown = await api.post(signal_path(str(uuid.uuid4()), "go"), json=1, headers=auth(alice))
    by_admin = await api.post(signal_path(job_id, "go"), json=1, headers=auth(admin))

    assert (other.status_code, other.json()["code"]) == (404, "job_not_found")
    assert (unknown.status_code, unknown.json()["code"]) == (404, "job_not_found")
    assert (by_admin.status_code, by_admin.json()["status"]) == (202, "sent")
    assert await signals_of(store, job_id) == [("go", 1, None)]


async def test_a_finished_job_answers_409_job_finished_and_keeps_nothing(
    api: httpx.AsyncClient, alice: str, store: Store
) -> None:
    job_id = await submit_job(api, alice, EXPORT)
    await factories.set_job(store, job_id, state="succeeded")

    response = await api.post(signal_path(job_id, "go"), json=1, headers=auth(alice))

    assert response.status_code == 409
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["code"] == "job_finished"
    assert await signals_of(store, job_id) == []


async def test_bad_signals_are_refused_before_anything_is_written(
    api: httpx.AsyncClient, alice: str, store: Store
) -> None:
    job_id = await submit_job(api, alice, EXPORT)
    big = {"blob": "x" * (64 * 1024)}

    too_large = await api.post(signal_path(job_id, "go"), json=big, headers=auth(alice))
    long_name = await api.post(signal_path(job_id, "n" * 201), json=1, headers=auth(alice))
    nul = await api.post(signal_path(job_id, "go"), json={"a": "\x00"}, headers=auth(alice))
    bad_key = await api.post(signal_path(job_id, "go"), json=1, headers=auth(alice, "a b"))
    not_json = await api.post(
        signal_path(job_id, "go"),
        content=b"{",
        headers={**auth(alice), "content-type": "application/json"},
    )

    assert (too_large.status_code, too_large.json()["code"]) == (413, "payload_too_large")
    assert (long_name.status_code, long_name.json()["code"]) == (422, "validation_error")
    assert (nul.status_code, nul.json()["code"]) == (422, "invalid_payload")
    assert (bad_key.status_code, bad_key.json()["code"]) == (400, "idempotency_key_invalid")
    assert (not_json.status_code, not_json.json()["code"]) == (400, "malformed_json")
    assert await signals_of(store, job_id) == []


async def test_the_signal_wakes_a_job_sleeping_on_it_with_an_outbox_row(
    api: httpx.AsyncClient, alice: str, store: Store
) -> None:
    job_id = await submit_job(api, alice, EXPORT)
    await sleep_on_signal(store, job_id, "approved")
    before = await outbox_rows(store, job_id)

    other = await api.post(signal_path(job_id, "rejected"), json=1, headers=auth(alice))
    assert (await store.get_job(uuid.UUID(job_id))).state.value == "sleeping"  # type: ignore[union-attr]
    response = await api.post(signal_path(job_id, "approved"), json=True, headers=auth(alice))

    assert (other.status_code, response.status_code) == (202, 202)
    job = await store.get_job(uuid.UUID(job_id))
    assert job is not None
    assert (job.state.value, job.waiting_for, job.wake_at) == ("queued", None, None)
    assert await outbox_rows(store, job_id) == before + 1
    assert (await events_of(store, job_id))[-3:] == ["signalled", "signalled", "woke"]


# --- the job view ---------------------------------------------------------------------------


async def test_the_job_view_shows_the_sleep_and_the_steps_and_their_values_when_asked(
    api: httpx.AsyncClient, alice: str, store: Store
) -> None:
    job_id = await submit_job(api, alice, EXPORT)
    child = uuid.uuid4()
    await sleep_on_signal(store, job_id, "approved")
    await record_steps(
        store,
        job_id,
        {"name": "charge", "kind": "step", "attempt": 1, "value": {"charged": 12}},
        {
            "name": "child:catalog.export",
            "kind": "child",
            "attempt": 1,
            "child_id": child,
            "value": {"ok": 1},
        },
        {"name": "signal:approved", "kind": "signal", "attempt": 1, "status": "waiting"},
    )

    plain = (await api.get(f"/v1/jobs/{job_id}", headers=auth(alice))).json()
    valued = (await api.get(f"/v1/jobs/{job_id}?steps=values", headers=auth(alice))).json()
    bad = await api.get(f"/v1/jobs/{job_id}?steps=all", headers=auth(alice))

    assert (plain["state"], plain["waiting_for"], plain["wake_at"]) == (
        "sleeping",
        {"signal": "approved"},
        None,
    )
    assert plain["parent_job_id"] is None
    assert [(s["name"], s["kind"], s["status"], s["attempt"]) for s in plain["steps"]] == [
        ("charge", "step", "done", 1),
        ("child:catalog.export", "child", "done", 1),
        ("signal:approved", "signal", "waiting", 1),
    ]
    assert all("value" not in step for step in plain["steps"])
    assert plain["steps"][1]["child_id"] == str(child)
    assert [step["value"] for step in valued["steps"]] == [{"charged": 12}, {"ok": 1}, None]
    assert (bad.status_code, bad.json()["code"]) == (422, "validation_error")


async def test_a_timed_sleeper_shows_its_wake_time_and_lists_show_no_steps(
    api: httpx.AsyncClient, alice: str, store: Store
) -> None:
    job_id = await submit_job(api, alice, EXPORT)
    parent = await submit_job(api, alice, EXPORT)
    wake = datetime.now(UTC) + timedelta(hours=1)
    await factories.set_job(
        store, job_id, state="sleeping", wake_at=wake, available_at=wake, parent_job_id=parent
    )
    await record_steps(
        store, job_id, {"name": "sleep", "kind": "sleep", "attempt": 1, "wake_at": wake}
    )

    view = (await api.get(f"/v1/jobs/{job_id}", headers=auth(alice))).json()
    listed = (await api.get("/v1/jobs?state=sleeping", headers=auth(alice))).json()["items"]

    assert datetime.fromisoformat(view["wake_at"]) == wake
    assert (view["waiting_for"], view["parent_job_id"]) == (None, parent)
    assert datetime.fromisoformat(view["steps"][0]["wake_at"]) == wake
    assert [(item["id"], item["steps"]) for item in listed] == [(job_id, None)]
    assert datetime.fromisoformat(listed[0]["wake_at"]) == wake


async def test_a_plain_jobs_view_has_no_steps_and_nothing_asleep(
    api: httpx.AsyncClient, alice: str
) -> None:
    made = await api.post("/v1/jobs", json=EXPORT, headers=auth(alice, "plain-1"))
    again = await api.post("/v1/jobs", json=EXPORT, headers=auth(alice, "plain-1"))
    job_id = made.json()["id"]

    view = (await api.get(f"/v1/jobs/{job_id}", headers=auth(alice))).json()

    assert (view["steps"], view["wake_at"], view["waiting_for"]) == ([], None, None)
    assert made.json()["steps"] == []  # the job made now has recorded nothing, as read
    assert (again.status_code, again.json()["steps"]) == (200, None)  # not read


async def test_the_trace_shows_steps_and_signals_among_the_journal(
    api: httpx.AsyncClient, alice: str, admin: str, store: Store, settings: Settings
) -> None:
    job_id = await submit_job(api, alice, EXPORT)
    await sleep_on_signal(store, job_id, "approved")
    await record_steps(
        store,
        job_id,
        {"name": "charge", "kind": "step", "attempt": 1, "value": {"secret": "card"}},
        {"name": "signal:approved", "kind": "signal", "attempt": 1, "status": "waiting"},
    )
    await api.post(signal_path(job_id, "approved"), json=1, headers=auth(alice))

    trace = (await api.get(f"/v1/jobs/{job_id}/trace", headers=auth(alice))).json()
    shown = cli(settings, "jobs", "trace", job_id)

    assert [step["name"] for step in trace["steps"]] == ["charge", "signal:approved"]
    assert "value" not in trace["steps"][0]
    assert [(s["name"], s["taken_by"]) for s in trace["signals"]] == [("approved", None)]
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    step = next(i for i, line in enumerate(lines) if "step 'charge' done" in line)
    signal = next(i for i, line in enumerate(lines) if "signal 'approved' sent" in line)
    woke = next(i for i, line in enumerate(lines) if " woke " in line)
    assert step < signal < woke  # in time order, among the journal's entries
    assert "card" not in shown.stdout


# --- replay ---------------------------------------------------------------------------------


@pytest.fixture
def ops(make_settings: MakeSettings, store: Store) -> Operations:
    return Operations(store, make_settings(), registry)


async def quarantined_with_steps(api: httpx.AsyncClient, alice: str, store: Store) -> str:
    job_id = await submit_job(api, alice, EXPORT)
    await record_steps(
        store,
        job_id,
        {"name": "charge", "kind": "step", "attempt": 1, "value": 12},
        {"name": "signal:approved", "kind": "signal", "attempt": 1, "value": "yes"},
    )
    async with store.transaction() as connection:
        await connection.execute(
            insert(tables.job_signals).values(
                job_id=job_id,
                name="approved",
                value="yes",
                taken_by="signal:approved",
                taken_at=func.now(),
            )
        )
    await factories.set_job(store, job_id, state="quarantined")
    return job_id


async def test_a_replay_keeps_the_recorded_steps(
    api: httpx.AsyncClient, alice: str, store: Store, ops: Operations
) -> None:
    job_id = await quarantined_with_steps(api, alice, store)

    [outcome] = await ops.replay([uuid.UUID(job_id)])

    assert outcome.status == "replayed"
    assert [s.name for s in await store.steps_of(uuid.UUID(job_id))] == [
        "charge",
        "signal:approved",
    ]
    assert await signals_of(store, job_id) == [("approved", "yes", "signal:approved")]


async def test_a_replay_with_reset_steps_forgets_them_and_unties_the_signals(
    api: httpx.AsyncClient, alice: str, store: Store, ops: Operations
) -> None:
    job_id = await quarantined_with_steps(api, alice, store)

    [outcome] = await ops.replay([uuid.UUID(job_id)], reset_steps=True)

    assert outcome.status == "replayed"
    assert await store.steps_of(uuid.UUID(job_id)) == ()
    assert await signals_of(store, job_id) == [("approved", "yes", None)]
    [replayed] = [e for e in await store.job_events(uuid.UUID(job_id)) if e.event == "replayed"]
    assert "its steps reset" in (replayed.detail or "")


async def test_the_admin_replay_resets_the_steps_only_when_asked(
    api: httpx.AsyncClient, alice: str, admin: str, store: Store, make_settings: MakeSettings
) -> None:
    kept = await quarantined_with_steps(api, alice, store)
    reset = await quarantined_with_steps(api, alice, store)

    async with api_client(make_settings(), store) as with_broker:  # a replay holds the queue
        plain = await with_broker.post(f"/v1/admin/jobs/{kept}/replay", headers=auth(admin))
        asked = await with_broker.post(
            f"/v1/admin/jobs/{reset}/replay?reset_steps=true", headers=auth(admin)
        )
        view = await with_broker.get(f"/v1/jobs/{reset}", headers=auth(alice))

    assert (plain.status_code, asked.status_code) == (200, 200), (plain.text, asked.text)
    assert len(await store.steps_of(uuid.UUID(kept))) == 2
    assert (view.json()["state"], view.json()["steps"]) == ("queued", [])


async def test_a_job_that_is_not_quarantined_keeps_its_steps_under_reset_steps(
    api: httpx.AsyncClient, alice: str, store: Store, ops: Operations
) -> None:
    job_id = await quarantined_with_steps(api, alice, store)
    await factories.set_job(store, job_id, state="retrying", finished_at=None)

    [outcome] = await ops.replay([uuid.UUID(job_id)], reset_steps=True)

    assert outcome.status == "not_quarantined"
    assert len(await store.steps_of(uuid.UUID(job_id))) == 2


# --- the CLI and the client -------------------------------------------------------------------


async def test_the_cli_signals_any_clients_job_and_refuses_bad_json_in_one_line(
    api: httpx.AsyncClient, alice: str, store: Store, settings: Settings
) -> None:
    job_id = await submit_job(api, alice, EXPORT)
    await sleep_on_signal(store, job_id, "approved")

    bad = cli(settings, "jobs", "signal", job_id, "approved", "--value", "{nope")
    sent = cli(
        settings,
        "jobs",
        "signal",
        job_id,
        "approved",
        "--value",
        '{"by": "ana"}',
        "--key",
        "k1",
        "--json",
    )
    again = cli(settings, "jobs", "signal", job_id, "approved", "--value", "2", "--key", "k1")
    unknown = cli(settings, "jobs", "signal", str(uuid.uuid4()), "approved")

    assert bad.returncode == 1 and bad.stdout == ""
    assert bad.stderr.count("\n") == 1 and "--value is not valid JSON" in bad.stderr
    assert sent.returncode == 0, sent.stderr
    assert json.loads(sent.stdout) == {"job_id": job_id, "name": "approved", "status": "sent"}
    assert again.returncode == 0 and "not sent again" in again.stdout
    assert unknown.returncode == 1 and "no job" in unknown.stderr
    assert await signals_of(store, job_id) == [("approved", {"by": "ana"}, None)]
    assert (await store.get_job(uuid.UUID(job_id))).state.value == "queued"  # type: ignore[union-attr]


async def test_the_cli_shows_the_sleep_and_the_steps(
    api: httpx.AsyncClient, alice: str, store: Store, settings: Settings
) -> None:
    job_id = await submit_job(api, alice, EXPORT)
    await sleep_on_signal(store, job_id, "approved")
    await record_steps(
        store, job_id, {"name": "charge", "kind": "step", "attempt": 1, "value": {"n": 12}}
    )

    shown = cli(settings, "jobs", "show", job_id)
    valued = cli(settings, "jobs", "show", job_id, "--values")

    assert shown.returncode == 0, shown.stderr
    assert 'waiting_for      {"signal": "approved"}' in shown.stdout
    assert "step 'charge' done" in shown.stdout and '{"n": 12}' not in shown.stdout
    assert "step 'charge' done: {\"n\": 12}" in valued.stdout


async def test_the_async_client_signals_and_reads_steps(
    api: httpx.AsyncClient, alice: str, store: Store
) -> None:
    job_id = await submit_job(api, alice, EXPORT)
    await record_steps(store, job_id, {"name": "charge", "kind": "step", "attempt": 1, "value": 7})
    transport = api._transport  # the in-process app the api fixture talks to
    async with AsyncClient("http://jobrelay.test", alice, transport=transport) as client:
        sent = await client.signal(job_id, "approved", {"by": "ana"}, idempotency_key="k")
        again = await client.signal(job_id, "approved", 2, idempotency_key="k")
        job = await client.get(job_id, steps="values")
        await factories.set_job(store, job_id, state="cancelled")
        with pytest.raises(JobFinished) as finished:
            await client.signal(job_id, "approved", None)

    assert (sent.status, again.status) == ("sent", "repeated")
    assert job.steps is not None and [(s.name, s.value) for s in job.steps] == [("charge", 7)]
    assert (finished.value.status, finished.value.code) == (409, "job_finished")


@pytest.mark.timeout(30)
async def test_a_sleeping_job_is_cancelled_at_once_by_its_client(
    api: httpx.AsyncClient, alice: str, store: Store
) -> None:
    job_id = await submit_job(api, alice, EXPORT)
    await sleep_on_signal(store, job_id, "approved")

    response = await api.post(f"/v1/jobs/{job_id}/cancel", headers=auth(alice))

    assert (response.status_code, response.json()["state"]) == (200, "cancelled")
    job = await store.get_job(uuid.UUID(job_id))
    assert job is not None and (job.wake_at, job.waiting_for) == (None, None)
