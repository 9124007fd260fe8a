"""An operator cancels any client's job (SPEC section 25): ``POST /v1/admin/jobs/{id}/cancel``
and ``jobrelay jobs cancel ID``, with the owner's answers (cancelled at once when queued, by
request when running, 409 once finished), against real PostgreSQL. The journal says who
cancelled; the owner's ``POST /v1/jobs/{id}/cancel`` stays its own."""

from __future__ import annotations

import uuid

import httpx

from jobrelay.core.settings import Settings
from jobrelay.db.store import Store
from tests.conftest import auth
from tests.support import factories
from tests.support.system import cli, submit_job

EXPORT = {"type": "catalog.export", "payload": {"course": "JavaScript"}}


async def events_of(store: Store, job_id: str) -> list[tuple[str, str | None]]:
    return [(event.event, event.detail) for event in await store.job_events(uuid.UUID(job_id))]


async def test_an_admin_cancels_another_clients_queued_job(
    api: httpx.AsyncClient, alice: str, admin: str, store: Store
) -> None:
    job_id = await submit_job(api, alice, EXPORT)

    response = await api.post(f"/v1/admin/jobs/{job_id}/cancel", headers=auth(admin))

    assert response.status_code == 200, response.text
    assert (response.json()["id"], response.json()["state"]) == (job_id, "cancelled")
    assert (await events_of(store, job_id))[-1] == (
        "cancelled",
        "by an operator through the admin API (client ops)",
    )
    trace = await api.get(f"/v1/admin/jobs/{job_id}/trace", headers=auth(admin))
    assert trace.json()["why"] == "cancelled by an operator through the admin API (client ops)"
    # The owner's own cancel stays: it now finds the job finished.
    again = await api.post(f"/v1/jobs/{job_id}/cancel", headers=auth(alice))
    assert (again.status_code, again.json()["code"]) == (409, "not_cancellable")


async def test_an_admin_asks_a_running_job_to_stop(
    api: httpx.AsyncClient, alice: str, admin: str, store: Store
) -> None:
    job_id = await submit_job(api, alice, EXPORT)
    await factories.set_job(store, job_id, state="running")

    response = await api.post(f"/v1/admin/jobs/{job_id}/cancel", headers=auth(admin))

    assert response.status_code == 202, response.text
    assert response.json()["state"] == "running"
    assert (await events_of(store, job_id))[-1][0] == "cancel_requested"
    job = await store.get_job(uuid.UUID(job_id))
    assert job is not None and job.cancel_requested_at is not None


async def test_the_admin_cancel_answers_404_409_and_403_as_documented(
    api: httpx.AsyncClient, alice: str, admin: str, store: Store
) -> None:
    unknown = await api.post(f"/v1/admin/jobs/{uuid.uuid4()}/cancel", headers=auth(admin))
    assert (unknown.status_code, unknown.json()["code"]) == (404, "job_not_found")

    job_id = await submit_job(api, alice, EXPORT)
    refused = await api.post(f"/v1/admin/jobs/{job_id}/cancel", headers=auth(alice))
    assert (refused.status_code, refused.json()["code"]) == (403, "forbidden")
    assert (await store.get_job(uuid.UUID(job_id))).state.value == "queued"  # type: ignore[union-attr]

    await factories.set_job(store, job_id, state="succeeded")
    finished = await api.post(f"/v1/admin/jobs/{job_id}/cancel", headers=auth(admin))
    assert (finished.status_code, finished.json()["code"]) == (409, "not_cancellable")
    assert finished.json()["state"] == "succeeded"


async def test_the_cli_cancels_any_clients_job_in_one_line(
    api: httpx.AsyncClient, alice: str, settings: Settings, store: Store
) -> None:
    job_id = await submit_job(api, alice, EXPORT)

    result = cli(settings, "jobs", "cancel", job_id)

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"job {job_id} (catalog.export): cancelled"
    assert (await events_of(store, job_id))[-1] == (
        "cancelled",
        "by an operator with jobrelay jobs cancel",
    )

    owners = await api.get(f"/v1/jobs/{job_id}/trace", headers=auth(alice))
    assert owners.json()["why"] == "cancelled by an operator with jobrelay jobs cancel"

    finished = cli(settings, "jobs", "cancel", job_id)
    assert finished.returncode == 1
    assert finished.stderr.strip().endswith(f"job {job_id} not cancelled: the job is cancelled")
    assert len(finished.stderr.strip().splitlines()) == 1

    missing_id = uuid.uuid4()
    missing = cli(settings, "jobs", "cancel", str(missing_id))
    assert missing.returncode == 1
    assert missing.stderr.strip().endswith(f"no job {missing_id}")
    assert len(missing.stderr.strip().splitlines()) == 1

    malformed = cli(settings, "jobs", "cancel", "not-an-id")
    assert malformed.returncode == 1 and "is not a job id" in malformed.stderr


async def test_the_cli_asks_a_running_job_to_stop(
    api: httpx.AsyncClient, alice: str, settings: Settings, store: Store
) -> None:
    job_id = await submit_job(api, alice, EXPORT)
    await factories.set_job(store, job_id, state="running")

    result = cli(settings, "jobs", "cancel", job_id)

    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"job {job_id} (catalog.export): cancel requested")
    assert (await events_of(store, job_id))[-1] == (
        "cancel_requested",
        "by an operator with jobrelay jobs cancel",
    )
