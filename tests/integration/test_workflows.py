"""Workflows against real PostgreSQL (docs/workflows.md, docs/invariants.md): a job waits until
every parent succeeded and is released exactly once, in the statement that stores its last
parent's result; a failed parent cancels its dependents (or not, with ``continue``) and its
replay restores them; a cancelled workflow starts nothing new; the flow-control rules hold for
a workflow's jobs; a handler reads its parents' results and reports progress."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from pydantic import BaseModel
from sqlalchemy import text

from jobrelay.core.execution import Claimed, ClaimRules, Held, LeaseTerms, Refused
from jobrelay.core.flow import Limit
from jobrelay.core.jobs import Quarantine, Succeeded
from jobrelay.core.registry import JobContext, Registry
from jobrelay.core.settings import Settings
from jobrelay.core.workflows import OnFailure, WorkflowState, workflow_step
from jobrelay.db import queries as q
from jobrelay.db.execution_store import PgExecutionStore
from jobrelay.db.quarantine_store import QuarantineStore
from jobrelay.db.store import Store
from jobrelay.db.workflow_store import WorkflowStore, WorkflowSubmission
from tests.conftest import MakeSettings
from tests.support import factories
from tests.support.consumer_kit import StandInDelivery, new_client, registry, rows, scalar, worker

TYPE = "test.count"
Graph = dict[str, tuple[str, ...]]  # ref -> the refs it waits for
DIAMOND: Graph = {"a": (), "b": ("a",), "c": ("a",), "d": ("b", "c")}


async def submit_graph(
    store: Store,
    client_id: uuid.UUID,
    graph: Graph,
    *,
    on_failure: OnFailure = OnFailure.CANCEL_DEPENDENTS,
    job_type: str = TYPE,
    job_registry: Registry = registry,
) -> dict[str, uuid.UUID]:
    """The workflow written, and its jobs' ids by ref."""
    steps = tuple(
        workflow_step(
            job_registry,
            ref=ref,
            type=job_type,
            payload={"tag": ref},
            after=after,
            default_max_attempts=3,
        )
        for ref, after in graph.items()
    )
    accepted = await WorkflowStore(store).accept(
        client_id, WorkflowSubmission(uuid.uuid4().hex, on_failure, steps)
    )
    assert accepted.created
    found = await rows(
        store,
        "SELECT workflow_ref, id FROM jobrelay.jobs WHERE workflow_id = :w",
        w=accepted.workflow_id,
    )
    return {ref: job_id for ref, job_id in found}


async def states(store: Store, ids: dict[str, uuid.UUID]) -> dict[str, str]:
    found = await rows(
        store, "SELECT id, state FROM jobrelay.jobs WHERE id = ANY(:ids)", ids=list(ids.values())
    )
    by_id = dict(found)
    return {ref: by_id[job_id] for ref, job_id in ids.items()}


async def count_of(store: Store, sql: str, job_id: uuid.UUID) -> int:
    return int(await scalar(store, sql, id=job_id))


async def outbox_rows(store: Store, job_id: uuid.UUID) -> int:
    return await count_of(store, "SELECT count(*) FROM jobrelay.outbox WHERE job_id = :id", job_id)


async def releases(store: Store, job_id: uuid.UUID) -> int:
    sql = (
        "SELECT count(*) FROM jobrelay.job_journal "
        "WHERE job_id = :id AND event = 'parents_succeeded'"
    )
    return await count_of(store, sql, job_id)


async def claim(executions: PgExecutionStore, job_id: uuid.UUID, **rules: Any) -> Claimed:
    claimed = await executions.claim(job_id, LeaseTerms.fresh(30), rules=ClaimRules(**rules))
    assert isinstance(claimed, Claimed), claimed
    return claimed


async def succeed(executions: PgExecutionStore, claimed: Claimed, result: Any) -> None:
    job = claimed.job
    await executions.finish(
        job.id, lease_token=claimed.lease_token, attempt=job.attempts, outcome=Succeeded(result)
    )


def finish_params(claims: list[Claimed]) -> dict[str, Any]:
    """FINISH_JOBS' arrays for successes of ``claims``, in one statement."""
    return {
        "ids": [c.job.id for c in claims],
        "lease_tokens": [c.lease_token for c in claims],
        "targets": ["succeeded" for _ in claims],
        "results": ['{"ok": true}' for _ in claims],
        "retry_delays": [None for _ in claims],
        "error_codes": [None for _ in claims],
        "errors": [None for _ in claims],
        "failures": [None for _ in claims],
    }


@pytest.fixture
async def client_id(store: Store) -> uuid.UUID:
    return await new_client(store)


@pytest.fixture
def executions(store: Store) -> PgExecutionStore:
    return PgExecutionStore(store, queue=None)


async def test_a_child_waits_until_every_parent_succeeded(
    store: Store, client_id: uuid.UUID, executions: PgExecutionStore
) -> None:
    ids = await submit_graph(store, client_id, DIAMOND)
    assert await states(store, ids) == {
        "a": "queued",
        "b": "waiting",
        "c": "waiting",
        "d": "waiting",
    }
    assert [await outbox_rows(store, ids[ref]) for ref in "abcd"] == [1, 0, 0, 0]
    refused = await executions.claim(ids["b"], LeaseTerms.fresh(30))
    assert isinstance(refused, Refused)  # a waiting job is never claimed
    await succeed(executions, await claim(executions, ids["a"]), {"from": "a"})
    assert await states(store, ids) == {
        "a": "succeeded",
        "b": "queued",
        "c": "queued",
        "d": "waiting",
    }
    await succeed(executions, await claim(executions, ids["b"]), {"from": "b"})
    assert (await states(store, ids))["d"] == "waiting"
    assert await outbox_rows(store, ids["d"]) == 0
    await succeed(executions, await claim(executions, ids["c"]), {"from": "c"})
    assert (await states(store, ids))["d"] == "queued"
    assert (await outbox_rows(store, ids["d"]), await releases(store, ids["d"])) == (1, 1)


async def test_two_parents_finished_in_one_group_release_their_child_once(
    store: Store, client_id: uuid.UUID, executions: PgExecutionStore
) -> None:
    ids = await submit_graph(store, client_id, {"a": (), "b": (), "c": ("a", "b")})
    claims = [await claim(executions, ids["a"]), await claim(executions, ids["b"])]
    moved = await store.fetch_all(q.FINISH_JOBS, **finish_params(claims))
    assert len(moved) == 2
    assert (await states(store, ids))["c"] == "queued"
    assert (await outbox_rows(store, ids["c"]), await releases(store, ids["c"])) == (1, 1)


async def test_two_parents_finished_at_once_on_two_connections_release_their_child_once(
    store: Store, client_id: uuid.UUID, executions: PgExecutionStore
) -> None:
    ids = await submit_graph(store, client_id, {"a": (), "b": (), "c": ("a", "b")})
    first, second = await claim(executions, ids["a"]), await claim(executions, ids["b"])
    async with store.transaction() as one:
        await one.execute(q.FINISH_JOBS, finish_params([first]))

        async def other() -> None:  # waits for the child's row, then re-reads it
            async with store.transaction() as two:
                await two.execute(q.FINISH_JOBS, finish_params([second]))

        racing = asyncio.create_task(other())
        await asyncio.sleep(0.5)
        assert not racing.done()  # held by the first transaction's lock on the child
    await racing
    assert await states(store, ids) == {"a": "succeeded", "b": "succeeded", "c": "queued"}
    assert (await outbox_rows(store, ids["c"]), await releases(store, ids["c"])) == (1, 1)


async def test_a_quarantined_parent_cancels_its_dependents_and_its_replay_restores_them(
    store: Store, client_id: uuid.UUID, executions: PgExecutionStore
) -> None:
    ids = await submit_graph(store, client_id, {"a": (), "b": ("a",), "c": ("b",), "x": ()})
    claimed = await claim(executions, ids["a"])
    await executions.finish(
        ids["a"],
        lease_token=claimed.lease_token,
        attempt=1,
        outcome=Quarantine("permanent_error", "no"),
    )
    assert await states(store, ids) == {
        "a": "quarantined",
        "b": "cancelled",
        "c": "cancelled",
        "x": "queued",
    }
    codes = await rows(
        store,
        "SELECT last_error_code FROM jobrelay.jobs WHERE id = ANY(:ids)",
        ids=[ids["b"], ids["c"]],
    )
    assert {code for (code,) in codes} == {"dependency_failed"}
    await succeed(executions, await claim(executions, ids["x"]), {})
    workflows = WorkflowStore(store)
    workflow_id = await scalar(
        store, "SELECT workflow_id FROM jobrelay.jobs WHERE id = :id", id=ids["a"]
    )
    view = await workflows.view(workflow_id)
    assert view is not None and view.state is WorkflowState.FAILED

    assert await QuarantineStore(store).replay_job(ids["a"], budget=3, detail="test")
    assert await states(store, ids) == {
        "a": "queued",
        "b": "waiting",
        "c": "waiting",
        "x": "succeeded",
    }
    waiting_for = await rows(
        store,
        "SELECT waiting_for FROM jobrelay.jobs WHERE id = ANY(:ids)",
        ids=[ids["b"], ids["c"]],
    )
    assert sorted(n for (n,) in waiting_for) == [1, 1]
    view = await workflows.view(workflow_id)
    assert view is not None and view.state is WorkflowState.RUNNING
    await succeed(executions, await claim(executions, ids["a"]), {})
    assert (await states(store, ids))["b"] == "queued"


async def test_continue_keeps_the_dependents_of_a_failed_job_waiting_while_the_rest_runs(
    store: Store, client_id: uuid.UUID, executions: PgExecutionStore
) -> None:
    ids = await submit_graph(
        store, client_id, {"a": (), "b": ("a",), "x": ()}, on_failure=OnFailure.CONTINUE
    )
    claimed = await claim(executions, ids["a"])
    await executions.finish(
        ids["a"], lease_token=claimed.lease_token, attempt=1, outcome=Quarantine("bad", "no")
    )
    assert await states(store, ids) == {"a": "quarantined", "b": "waiting", "x": "queued"}
    await succeed(executions, await claim(executions, ids["x"]), {})
    workflow_id = await scalar(
        store, "SELECT workflow_id FROM jobrelay.jobs WHERE id = :id", id=ids["a"]
    )
    view = await WorkflowStore(store).view(workflow_id)
    assert view is not None and view.state is WorkflowState.FAILED  # nothing else can run


async def test_a_cancelled_workflow_starts_nothing_new(
    store: Store, client_id: uuid.UUID, executions: PgExecutionStore
) -> None:
    ids = await submit_graph(store, client_id, {"a": (), "b": ("a",), "x": (), "y": ()})
    running = await claim(executions, ids["a"])
    workflow_id = await scalar(
        store, "SELECT workflow_id FROM jobrelay.jobs WHERE id = :id", id=ids["a"]
    )
    view = await WorkflowStore(store).cancel(workflow_id, client_id, detail="test")
    assert view is not None and view.state is WorkflowState.CANCELLED
    assert await states(store, ids) == {
        "a": "running",
        "b": "cancelled",
        "x": "cancelled",
        "y": "cancelled",
    }
    requested = await scalar(
        store,
        "SELECT cancel_requested_at IS NOT NULL FROM jobrelay.jobs WHERE id = :id",
        id=ids["a"],
    )
    assert requested
    await succeed(executions, running, {})  # the running job finished anyway: nothing follows it
    assert (await states(store, ids))["b"] == "cancelled"
    assert await outbox_rows(store, ids["b"]) == 0
    # A job of it still queued (as if released just before the cancel) is not claimed.
    await rows(
        store,
        "UPDATE jobrelay.jobs SET state = 'queued', finished_at = NULL WHERE id = :id RETURNING id",
        id=ids["y"],
    )
    assert isinstance(await executions.claim(ids["y"], LeaseTerms.fresh(30)), Refused)
    assert isinstance(
        await executions.claim(ids["y"], LeaseTerms.fresh(30), rules=ClaimRules(limited=True)),
        Refused,
    )


async def test_a_quarantined_job_of_a_cancelled_workflow_is_not_replayed(
    store: Store, client_id: uuid.UUID, executions: PgExecutionStore
) -> None:
    ids = await submit_graph(store, client_id, {"a": (), "b": ("a",)})
    claimed = await claim(executions, ids["a"])
    await executions.finish(
        ids["a"], lease_token=claimed.lease_token, attempt=1, outcome=Quarantine("bad", "no")
    )
    workflow_id = await scalar(
        store, "SELECT workflow_id FROM jobrelay.jobs WHERE id = :id", id=ids["a"]
    )
    await WorkflowStore(store).cancel(workflow_id, client_id, detail="test")
    assert not await QuarantineStore(store).replay_job(ids["a"], budget=3, detail="test")
    assert await states(store, ids) == {"a": "quarantined", "b": "cancelled"}


async def test_workflow_jobs_obey_a_concurrency_limit(
    store: Store, client_id: uuid.UUID, executions: PgExecutionStore
) -> None:
    ids = await submit_graph(store, client_id, {"root": (), "p": ("root",), "q": ("root",)})
    await succeed(executions, await claim(executions, ids["root"]), {})
    limit = Limit(concurrency=1)
    await claim(executions, ids["p"], limited=True, code_limit=limit)
    held = await executions.claim(
        ids["q"], LeaseTerms.fresh(30), rules=ClaimRules(limited=True, code_limit=limit)
    )
    assert isinstance(held, Held)


class ParentsPayload(BaseModel):
    tag: str = ""


def _parents_registry() -> Registry:
    parents = Registry()

    @parents.job("test.parents", ParentsPayload)
    async def read_parents(context: JobContext, payload: ParentsPayload) -> dict[str, Any]:
        for step in range(1000):  # reported far more often than it is written
            context.progress(step / 1000, f"step {step}")
        await asyncio.sleep(0.6)
        context.progress(1.0, "done")
        return {"tag": payload.tag, "parents": dict(context.parent_results)}

    return parents


async def test_a_handler_reads_its_parents_results_and_reports_progress(
    store: Store, client_id: uuid.UUID, executions: PgExecutionStore, make_settings: MakeSettings
) -> None:
    parents = _parents_registry()
    ids = await submit_graph(
        store,
        client_id,
        {"a": (), "b": (), "c": ("a", "b")},
        job_type="test.parents",
        job_registry=parents,
    )
    settings: Settings = make_settings()
    run = worker(store, settings, parents)
    for ref in ("a", "b", "c"):
        await run.process(StandInDelivery(ids[ref], "test.parents").body)
    result = await scalar(
        store, "SELECT result FROM jobrelay.job_results WHERE job_id = :id", id=ids["c"]
    )
    assert result["parents"] == {"a": {"tag": "a", "parents": {}}, "b": {"tag": "b", "parents": {}}}
    progress = await scalar(store, "SELECT progress FROM jobrelay.jobs WHERE id = :id", id=ids["c"])
    assert (progress["fraction"], progress["message"]) == (1.0, "done")
    # 3 jobs x 1,001 reports each, written a few times per job at most
    assert 3 <= run.progress.writes <= 3 * 6


async def test_a_parent_finished_beside_plain_jobs_in_one_group_still_releases_its_child(
    store: Store, client_id: uuid.UUID, executions: PgExecutionStore
) -> None:
    """The plain jobs alone would take FINISH_PLAIN_JOBS; the parent sends the whole group
    through FINISH_JOBS, and its child is released."""
    ids = await submit_graph(store, client_id, {"a": (), "b": ("a",)})
    plain = [job.id for job in await factories.jobs(store, 3, client_id=client_id)]
    parent = await claim(executions, ids["a"])
    claims = [await claim(executions, job_id) for job_id in plain]
    groups = executions._finishes.groups
    await asyncio.gather(
        *(
            executions.finish(
                c.job.id,
                lease_token=c.lease_token,
                attempt=1,
                outcome=Succeeded({}),
                related=c.job.workflow_id is not None,
            )
            for c in [*claims, parent]
        )
    )
    assert executions._finishes.groups == groups + 1  # one statement for the four
    assert await states(store, ids) == {"a": "succeeded", "b": "queued"}
    assert (await outbox_rows(store, ids["b"]), await releases(store, ids["b"])) == (1, 1)
    finished = await store.fetch_all(
        q.FINISH_PLAIN_JOBS, **finish_params([await claim(executions, ids["b"])])
    )
    assert [row.ends_as for row in finished] == ["succeeded"]  # the lean one ends a job alike


async def test_a_finish_that_also_cancels_dependents_counts_each_bucket_once_and_exactly(
    store: Store, client_id: uuid.UUID, executions: PgExecutionStore
) -> None:
    """FINISH_JOBS writes ``jobs`` in two CTEs (the finish and dependents_of): the statement
    triggers (migration 0017) fire once, their transition tables holding both."""
    ids = await submit_graph(store, client_id, {"a": (), "b": ("a",), "c": ("b",), "x": ()})
    async with store.transaction() as connection:
        await connection.execute(text("DELETE FROM jobrelay.job_count_deltas"))
    claimed = await claim(executions, ids["a"])
    await executions.finish(
        ids["a"],
        lease_token=claimed.lease_token,
        attempt=1,
        outcome=Quarantine("permanent_error", "no"),
    )
    deltas = await store.fetch_all(
        text("SELECT state, code, n FROM jobrelay.job_count_deltas ORDER BY 1")
    )
    assert [tuple(row) for row in deltas] == [
        ("cancelled", "dependency_failed", 2),
        ("quarantined", "permanent_error", 1),
    ]
