"""``Client.submit_workflow`` / ``get_workflow`` / ``cancel_workflow`` and their ``AsyncClient``
twins against the real API (a ``jobrelay api`` process on real PostgreSQL): the typed view, the
idempotency of a submission by key, the conflict, the cancel, and ``workflow_id`` on a job."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobrelay import ApiError, AsyncClient, Client, IdempotencyConflict, Workflow
from jobrelay.client import WorkflowJob, WorkflowView
from jobrelay.core.settings import Settings
from tests.support.processes import run_cli, running_api

TYPE = "demo.sleep"


def diamond(seconds: float = 0) -> Workflow:
    """a, then b and c, then d."""
    flow = Workflow()
    a = flow.add(TYPE, {"seconds": seconds}, ref="a")
    b = flow.add(TYPE, {"seconds": seconds}, ref="b", after=[a])
    c = flow.add(TYPE, {"seconds": seconds}, ref="c", after=[a])
    flow.add(TYPE, {"seconds": seconds}, ref="d", after=[b, c])
    return flow


class Api:
    def __init__(self, base: str, token: str) -> None:
        self.base = base
        self.token = token

    def client(self) -> Client:
        return Client(self.base, self.token)

    def async_client(self) -> AsyncClient:
        return AsyncClient(self.base, self.token)


@pytest.fixture
def api(settings: Settings, tmp_path: Path) -> Iterator[Api]:
    with running_api(settings, tmp_path) as (_, env, base):
        created = run_cli(env, "clients", "create", "shop", "--json")
        assert created.returncode == 0, created.stderr
        yield Api(base, str(json.loads(created.stdout)["token"]))


@pytest.fixture
def client(api: Api) -> Iterator[Client]:
    with api.client() as client:
        yield client


def test_a_submitted_workflow_comes_back_as_a_typed_view_of_its_graph(client: Client) -> None:
    view = client.submit_workflow(diamond(), key="nightly")

    assert isinstance(view, WorkflowView) and isinstance(view.id, uuid.UUID)
    assert (view.state, view.on_failure) == ("running", "cancel_dependents")
    assert list(view.jobs) == ["a", "b", "c", "d"]
    assert all(isinstance(job, WorkflowJob) for job in view.jobs.values())
    assert {ref: job.state for ref, job in view.jobs.items()} == {
        "a": "queued",
        "b": "waiting",
        "c": "waiting",
        "d": "waiting",
    }
    assert view.jobs["d"].after == ["b", "c"] and view.jobs["a"].after == []
    assert view.jobs["a"].type == TYPE and view.jobs["a"].progress is None
    assert view.counts == {"queued": 1, "waiting": 3}
    assert client.get_workflow(view.id).jobs == view.jobs
    job = client.get(view.jobs["b"].id)
    assert (job.workflow_id, job.state) == (view.id, "waiting")


def test_the_same_key_makes_one_workflow_another_workflow_under_it_conflicts(
    client: Client,
) -> None:
    first = client.submit_workflow(diamond(), key="nightly")
    again = client.submit_workflow(diamond(), key="nightly")
    without_key = [client.submit_workflow(diamond()) for _ in range(2)]

    assert again.id == first.id and again.jobs == first.jobs
    assert len({view.id for view in without_key} | {first.id}) == 3
    with pytest.raises(IdempotencyConflict) as raised:
        client.submit_workflow(diamond(seconds=1), key="nightly")
    assert raised.value.problem["workflow_id"] == str(first.id)
    with pytest.raises(IdempotencyConflict):
        client.submit_workflow(diamond(), key="nightly", on_failure="continue")


def test_a_cancelled_workflow_has_every_unfinished_job_cancelled(client: Client) -> None:
    view = client.submit_workflow(diamond(), on_failure="continue")

    cancelled = client.cancel_workflow(view.id)

    assert view.on_failure == "continue"
    assert cancelled.state == "cancelled" and cancelled.cancelled_at is not None
    assert {job.state for job in cancelled.jobs.values()} == {"cancelled"}
    assert client.cancel_workflow(str(view.id)).state == "cancelled"  # asked again: the same


def test_what_the_api_refuses_is_an_api_error(client: Client) -> None:
    with pytest.raises(ApiError) as empty:
        client.submit_workflow(Workflow())
    with pytest.raises(ApiError) as unknown:
        client.get_workflow(uuid.uuid4())
    with pytest.raises(ValueError):
        client.submit_workflow(diamond(), on_failure="give up")

    assert (empty.value.status, empty.value.code) == (422, "invalid_workflow")
    assert (unknown.value.status, unknown.value.code) == (404, "workflow_not_found")


async def test_the_async_client_submits_reads_and_cancels_the_same_way(api: Api) -> None:
    async with api.async_client() as client:
        view = await client.submit_workflow(diamond(), key="nightly")
        again = await client.submit_workflow(diamond(), key="nightly")
        read = await client.get_workflow(view.id)
        cancelled = await client.cancel_workflow(view.id)

    assert again.id == read.id == view.id and list(read.jobs) == ["a", "b", "c", "d"]
    assert cancelled.state == "cancelled"
