"""The console's workflow page and a job's progress, through HTTP against the app on real
PostgreSQL: the graph with every job's ref and state and an SVG line per edge, the Cancel
button (with CSRF), an unknown workflow as the 404 page, and a job page's progress bar and
link to its workflow."""

from __future__ import annotations

import html
import json
import re
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest

from jobrelay.console.jobs import PAGE_SIZE
from jobrelay.core.settings import DEFAULT_MAX_ATTEMPTS
from jobrelay.core.states import JobState
from jobrelay.core.workflows import OnFailure, WorkflowView, workflow_step
from jobrelay.db.client_store import ClientStore
from jobrelay.db.store import Store
from jobrelay.db.workflow_store import WorkflowStore, WorkflowSubmission
from jobrelay.handlers.builtin import registry
from tests.conftest import MakeSettings
from tests.integration.test_console import (
    HOSTILE,
    assert_html_page,
    console_client,
    flash_of,
    signed_in,
)
from tests.support import factories
from tests.support.consumer_kit import rows

WORKFLOW_LINK = re.compile(r'<a class="mono" href="/ui/workflows/([0-9a-f-]{36})">')
NEXT_LINK = re.compile(r'<a href="([^"]+)" rel="next">')
PREVIOUS_LINK = re.compile(r'<a href="([^"]+)" rel="prev">')

# A diamond: "fetch" first, "left" and "right" after it, "merge" after both (4 edges).
DIAMOND = {"fetch": (), "left": ("fetch",), "right": ("fetch",), "merge": ("left", "right")}


@pytest.fixture
async def console(make_settings: MakeSettings, store: Store) -> AsyncIterator[httpx.AsyncClient]:
    async with console_client(make_settings(), store) as client:
        yield client


async def diamond(store: Store) -> WorkflowView:
    """The diamond, accepted for a client of its own (not the operator's)."""
    client = await factories.client(store)
    steps = tuple(
        workflow_step(
            registry,
            ref=ref,
            type="demo.sleep",
            payload={"seconds": 0},
            after=after,
            default_max_attempts=DEFAULT_MAX_ATTEMPTS,
        )
        for ref, after in DIAMOND.items()
    )
    workflows = WorkflowStore(store)
    submission = WorkflowSubmission(uuid.uuid4().hex, OnFailure.CANCEL_DEPENDENTS, steps)
    accepted = await workflows.accept(client.id, submission)
    view = await workflows.view(accepted.workflow_id)
    assert view is not None
    return view


def edges_of(page: httpx.Response) -> int:
    return page.text.count('<line class="edge"')


async def states_of(store: Store, workflow_id: uuid.UUID) -> set[JobState]:
    view = await WorkflowStore(store).view(workflow_id)
    assert view is not None
    return {job.state for job in view.jobs}


async def test_the_workflow_page_draws_every_job_in_its_state_with_a_line_per_edge(
    console: httpx.AsyncClient, store: Store, admin: str
) -> None:
    view = await diamond(store)
    await signed_in(console, admin)

    page = await console.get(f"/ui/workflows/{view.id}")

    assert_html_page(page, 200)
    assert '<span class="state state-running">running</span>' in page.text
    assert "<code>cancel_dependents</code>" in page.text
    assert edges_of(page) == 4
    assert "<title>merge waits for left</title>" in page.text
    for job in view.jobs:
        expected = JobState.QUEUED if job.ref == "fetch" else JobState.WAITING
        assert job.state == expected
        assert f'<a href="/ui/jobs/{job.id}" class="node state-{expected}">' in page.text
        assert f"<td><code>{job.ref}</code></td>" in page.text
    counts = page.text.split('class="counts"')[1].split("</dd>")[0]
    assert "4:" in counts
    assert '<span class="state state-queued">queued</span> 1' in counts
    assert '<span class="state state-waiting">waiting</span> 3' in counts
    assert f'action="/ui/workflows/{view.id}/cancel"' in page.text


async def test_the_cancel_button_cancels_every_job_not_finished(
    console: httpx.AsyncClient, store: Store, admin: str
) -> None:
    view = await diamond(store)
    csrf = await signed_in(console, admin)

    refused = await console.post(f"/ui/workflows/{view.id}/cancel", data={"csrf": "wrong"})
    assert_html_page(refused, 403)
    assert await states_of(store, view.id) == {JobState.QUEUED, JobState.WAITING}

    answer = await console.post(f"/ui/workflows/{view.id}/cancel", data={"csrf": csrf})

    assert answer.status_code == 303
    assert answer.headers["location"] == f"/ui/workflows/{view.id}"
    assert await states_of(store, view.id) == {JobState.CANCELLED}
    (event,) = await rows(
        store,
        "SELECT detail FROM jobrelay.job_journal WHERE job_id = :id AND event = 'cancelled'",
        id=view.jobs[0].id,
    )
    assert event.detail.startswith("by an operator in the console")
    page = await console.get(f"/ui/workflows/{view.id}")
    assert (flash_of(page) or "").startswith("Workflow cancelled:")
    assert '<span class="state state-cancelled">cancelled</span>' in page.text
    assert "/cancel" not in page.text  # nothing left to cancel: no button
    assert edges_of(page) == 4


@pytest.mark.parametrize("wanted", [str(uuid.uuid4()), "not-a-uuid"])
async def test_an_unknown_workflow_is_the_404_page(
    console: httpx.AsyncClient, admin: str, wanted: str
) -> None:
    await signed_in(console, admin)
    page = await console.get(f"/ui/workflows/{wanted}")
    assert_html_page(page, 404)
    assert "No such workflow" in page.text


async def test_a_jobs_page_shows_its_progress_and_links_to_its_workflow(
    console: httpx.AsyncClient, store: Store, admin: str
) -> None:
    view = await diamond(store)
    fetch = view.jobs[0]
    progress = {"fraction": 0.42, "message": HOSTILE, "at": "2030-06-01T12:00:00.123456+00:00"}
    await rows(
        store,
        "UPDATE jobrelay.jobs SET progress = CAST(:progress AS jsonb) WHERE id = :id RETURNING id",
        id=fetch.id,
        progress=json.dumps(progress),
    )
    await signed_in(console, admin)

    page = await console.get(f"/ui/jobs/{fetch.id}")

    assert_html_page(page, 200)
    assert '<progress id="progress" max="1" value="0.42">42%</progress>' in page.text
    assert html.escape(HOSTILE) in page.text and HOSTILE not in page.text
    assert "reported 2030-06-01 12:00:00.123 UTC" in page.text
    assert f'href="/ui/workflows/{view.id}">{view.id}</a>, as <code>fetch</code>' in page.text
    graph = await console.get(f"/ui/workflows/{view.id}")
    assert "queued · 42%" in graph.text and 'class="bar-done"' in graph.text


async def test_a_waiting_job_has_its_badge_and_a_job_outside_a_workflow_no_link(
    console: httpx.AsyncClient, store: Store, admin: str
) -> None:
    waiting = (await diamond(store)).jobs[-1]
    alone = await factories.job(store)
    await signed_in(console, admin)

    page = await console.get(f"/ui/jobs/{waiting.id}")
    assert '<span class="state state-waiting">waiting</span>' in page.text
    assert 'id="progress"' not in page.text
    listing = await console.get("/ui/jobs", params={"state": "waiting"})
    assert_html_page(listing, 200)
    assert '<option value="waiting" selected>' in listing.text
    assert f"/ui/jobs/{waiting.id}" in listing.text and f"/ui/jobs/{alone.id}" not in listing.text
    assert "/ui/workflows/" not in (await console.get(f"/ui/jobs/{alone.id}")).text


# Issue 37 item 8.3: the console had a page per workflow but no way to find one.
async def test_the_workflows_page_lists_them_newest_first_each_linked_and_by_client(
    console: httpx.AsyncClient, store: Store, admin: str
) -> None:
    older = await diamond(store)
    newer = await diamond(store)
    names = {c.id: c.name for c in await ClientStore(store).list_clients()}
    await signed_in(console, admin)

    page = await console.get("/ui/workflows")

    assert_html_page(page, 200)
    links = WORKFLOW_LINK.findall(page.text)
    assert links == [str(newer.id), str(older.id)]
    assert 'href="/ui/workflows"' in page.text  # the navigation has it
    assert page.text.count(">running<") >= 2

    one = await console.get("/ui/workflows", params={"client": names[newer.client_id]})
    assert WORKFLOW_LINK.findall(one.text) == [str(newer.id)]
    unknown = await console.get("/ui/workflows", params={"client": "nobody"})
    assert_html_page(unknown, 200)
    assert WORKFLOW_LINK.findall(unknown.text) == []
    assert "There is no client named nobody." in unknown.text
    bad = await console.get("/ui/workflows", params={"cursor": "nonsense"})
    assert_html_page(bad, 400)
    assert WORKFLOW_LINK.findall(
        (await console.get("/ui/workflows", params={"state": "running"})).text
    ) == [str(newer.id), str(older.id)]
    assert (
        WORKFLOW_LINK.findall((await console.get("/ui/workflows", params={"state": "failed"})).text)
        == []
    )
    assert_html_page(await console.get("/ui/workflows", params={"state": "lost"}), 400)


async def test_the_workflows_page_goes_through_its_pages_both_ways(
    console: httpx.AsyncClient, store: Store, admin: str
) -> None:
    made = [await diamond(store) for _ in range(PAGE_SIZE + 1)]
    await signed_in(console, admin)

    first = await console.get("/ui/workflows")
    next_link = html.unescape(NEXT_LINK.search(first.text).group(1))  # type: ignore[union-attr]
    second = await console.get(next_link)
    back_link = html.unescape(PREVIOUS_LINK.search(second.text).group(1))  # type: ignore[union-attr]
    back = await console.get(back_link)

    newest_first = [str(w.id) for w in reversed(made)]
    assert WORKFLOW_LINK.findall(first.text) == newest_first[:PAGE_SIZE]
    assert WORKFLOW_LINK.findall(second.text) == newest_first[PAGE_SIZE:]
    assert WORKFLOW_LINK.findall(back.text) == newest_first[:PAGE_SIZE]
