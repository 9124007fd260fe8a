"""``jobrelay workflows show``: an operator's view of one workflow of any client, read from
PostgreSQL: its jobs as a graph, one line a job in the order they were submitted, with the refs
each waits for, then the workflow's state and counts."""

from __future__ import annotations

import json
import uuid
from typing import Any

import psycopg

import jobrelay
from jobrelay.core.settings import Settings
from jobrelay.db.engine import libpq_url
from jobrelay.db.store import Store
from jobrelay.db.workflow_store import WorkflowStore
from tests.support import factories
from tests.support.processes import run_cli, service_env

TYPE = "demo.sleep"


async def a_diamond(settings: Settings, store: Store) -> uuid.UUID:
    """shop's workflow: a, then b and c, then d."""
    await factories.client(store, name="shop")
    flow = jobrelay.Workflow()
    a = flow.add(TYPE, {"seconds": 0}, ref="a")
    b = flow.add(TYPE, {"seconds": 0}, ref="b", after=[a])
    c = flow.add(TYPE, {"seconds": 0}, ref="c", after=[a])
    flow.add(TYPE, {"seconds": 0}, ref="d", after=[b, c])
    with psycopg.connect(libpq_url(settings.database_url)) as connection:
        return jobrelay.enqueue_workflow(connection, flow, client="shop", key="nightly")


def shown(settings: Settings, *args: str) -> dict[str, Any]:
    result = run_cli(service_env(settings), "workflows", "show", *args, "--json")
    assert result.returncode == 0, result.stderr
    document: dict[str, Any] = json.loads(result.stdout)
    return document


async def test_the_graph_is_drawn_one_line_a_job_with_its_parents_then_the_state(
    settings: Settings, store: Store
) -> None:
    workflow_id = await a_diamond(settings, store)
    view = await WorkflowStore(store).view(workflow_id)
    assert view is not None
    ids = {job.ref: str(job.id) for job in view.jobs}

    result = run_cli(service_env(settings), "workflows", "show", str(workflow_id))

    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert str(workflow_id) in lines[0]
    assert [line.split() for line in lines[1:-1]] == [
        ["a", "queued", TYPE, ids["a"]],
        ["b", "waiting", TYPE, ids["b"]],
        ["after:", "a"],
        ["c", "waiting", TYPE, ids["c"]],
        ["after:", "a"],
        ["d", "waiting", TYPE, ids["d"]],
        ["after:", "b,", "c"],
    ]
    assert lines[-1].split() == ["state", "running", "queued=1", "waiting=3"]


async def test_under_json_it_is_the_workflows_view(settings: Settings, store: Store) -> None:
    workflow_id = await a_diamond(settings, store)

    document = shown(settings, str(workflow_id))

    assert document["id"] == str(workflow_id)
    assert (document["state"], document["on_failure"]) == ("running", "cancel_dependents")
    assert list(document["jobs"]) == ["a", "b", "c", "d"]
    assert document["jobs"]["d"]["after"] == ["b", "c"]
    assert document["jobs"]["a"]["type"] == TYPE
    assert document["counts"] == {"queued": 1, "waiting": 3}


async def test_a_cancelled_workflow_shows_its_cancelled_jobs(
    settings: Settings, store: Store
) -> None:
    workflow_id = await a_diamond(settings, store)
    await WorkflowStore(store).cancel(workflow_id, detail="by the test")

    document = shown(settings, str(workflow_id))

    assert document["state"] == "cancelled"
    assert document["counts"] == {"cancelled": 4}


async def test_an_unknown_workflow_is_one_line_and_status_1(settings: Settings) -> None:
    missing = uuid.uuid4()

    unknown = run_cli(service_env(settings), "workflows", "show", str(missing))
    malformed = run_cli(service_env(settings), "workflows", "show", "not-an-id")

    assert (unknown.returncode, unknown.stdout) == (1, "")
    assert unknown.stderr.strip().splitlines() == [f"jobrelay: no workflow {missing}"]
    assert malformed.returncode == 1
    assert len(malformed.stderr.strip().splitlines()) == 1
