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


# --- jobrelay workflows list (issue 37 item 8.3) ----------------------------------------------


def listed(settings: Settings, *args: str) -> dict[str, Any]:
    result = run_cli(service_env(settings), "workflows", "list", *args, "--json")
    assert result.returncode == 0, result.stderr
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def one_job_workflow(settings: Settings, client: str, key: str) -> uuid.UUID:
    flow = jobrelay.Workflow()
    flow.add(TYPE, {"seconds": 0}, ref="only")
    with psycopg.connect(libpq_url(settings.database_url)) as connection:
        return jobrelay.enqueue_workflow(connection, flow, client=client, key=key)


async def test_the_workflows_are_listed_newest_first_a_page_at_a_time_and_by_client(
    settings: Settings, store: Store
) -> None:
    diamond = await a_diamond(settings, store)  # shop's, the oldest
    await factories.client(store, name="lab")
    lab_first = one_job_workflow(settings, "lab", "first")
    shop_second = one_job_workflow(settings, "shop", "second")

    everyone = listed(settings)
    assert [w["id"] for w in everyone["workflows"]] == [
        str(shop_second),
        str(lab_first),
        str(diamond),
    ]
    assert everyone["next_cursor"] is None
    oldest = everyone["workflows"][-1]
    assert oldest["client"] == "shop" and oldest["state"] == "running"
    assert oldest["jobs"] == 4 and oldest["counts"] == {"queued": 1, "waiting": 3}

    first_page = listed(settings, "--limit", "2")
    assert [w["id"] for w in first_page["workflows"]] == [str(shop_second), str(lab_first)]
    rest = listed(settings, "--limit", "2", "--cursor", first_page["next_cursor"])
    assert [w["id"] for w in rest["workflows"]] == [str(diamond)]

    shops = listed(settings, "--client", "shop")
    assert [w["id"] for w in shops["workflows"]] == [str(shop_second), str(diamond)]

    readable = run_cli(service_env(settings), "workflows", "list", "--client", "lab")
    assert readable.returncode == 0, readable.stderr
    assert readable.stdout.split()[:3] == [str(lab_first), "running", "lab"]
    assert "jobs 1 (queued=1)" in readable.stdout


async def test_a_workflow_listing_asked_wrong_says_so_in_one_line(
    settings: Settings, store: Store
) -> None:
    env = service_env(settings)
    for args, says in [
        (("--client", "nobody"), "no client named 'nobody'"),
        (("--limit", "0"), "--limit must be 1 to 1000"),
        (("--cursor", "not-a-cursor"), "is not one this command printed"),
    ]:
        result = run_cli(env, "workflows", "list", *args)
        assert result.returncode != 0, args
        assert says in result.stderr and "Traceback" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr


async def test_the_workflows_of_one_state_are_listed_as_their_view_derives_it(
    settings: Settings, store: Store
) -> None:
    """LIST_WORKFLOWS derives a workflow's state in SQL; the view, in Python: the two agree."""
    diamond = await a_diamond(settings, store)  # its first job quarantined, the rest waiting
    running = one_job_workflow(settings, "shop", "running")
    succeeded = one_job_workflow(settings, "shop", "succeeded")
    cancelled = one_job_workflow(settings, "shop", "cancelled")
    with psycopg.connect(libpq_url(settings.database_url), autocommit=True) as connection:
        connection.execute(
            "UPDATE jobrelay.jobs SET state = 'succeeded', finished_at = now() "
            "WHERE workflow_id = %s",
            (succeeded,),
        )
        connection.execute(
            "UPDATE jobrelay.jobs SET state = 'quarantined', finished_at = now(), "
            "last_error_code = 'permanent_error' WHERE workflow_id = %s AND workflow_ref = 'a'",
            (diamond,),
        )
    await WorkflowStore(store).cancel(cancelled, detail="by the test")
    expected = {"running": running, "succeeded": succeeded, "failed": diamond}
    expected["cancelled"] = cancelled

    for state, workflow_id in expected.items():
        found = listed(settings, "--state", state)["workflows"]
        assert [w["id"] for w in found] == [str(workflow_id)], state
        assert found[0]["state"] == state
        view = await WorkflowStore(store).view(workflow_id)
        assert view is not None and view.state.value == state
    wrong = run_cli(service_env(settings), "workflows", "list", "--state", "lost")
    assert wrong.returncode == 1 and "invalid choice: 'lost'" in wrong.stderr
