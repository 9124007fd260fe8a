"""``jobrelay.enqueue_workflow`` / ``enqueue_workflow_async`` inside the caller's transaction,
against real PostgreSQL: committed, the workflow and all its jobs exist (the roots queued with
their outbox rows, the others waiting); rolled back, nothing; the same key and workflow again,
the same id; another workflow under the key, ``IdempotencyConflict`` and nothing written."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from pydantic import BaseModel

import jobrelay
from jobrelay.core.bounds import DEFAULT_MAX_ATTEMPTS
from jobrelay.core.errors import UnknownJobType
from jobrelay.core.registry import JobType, Registry
from jobrelay.core.workflows import InvalidWorkflow, WorkflowState
from jobrelay.db.engine import libpq_url
from jobrelay.db.store import Store
from jobrelay.db.workflow_store import WorkflowStore
from tests.support import factories

TYPE = "demo.sleep"


def diamond(seconds: int = 0) -> jobrelay.Workflow:
    """a, then b and c, then d."""
    flow = jobrelay.Workflow()
    a = flow.add(TYPE, {"seconds": seconds}, ref="a")
    b = flow.add(TYPE, {"seconds": seconds}, ref="b", after=[a])
    c = flow.add(TYPE, {"seconds": seconds}, ref="c", after=[a], priority=5)
    flow.add(TYPE, {"seconds": seconds}, ref="d", after=[b, c], max_attempts=7)
    return flow


@pytest.fixture
def connection(database_url: str) -> Iterator[psycopg.Connection[object]]:
    with psycopg.connect(libpq_url(database_url)) as raw:
        yield raw


async def counts(store: Store) -> dict[str, int]:
    return {
        name: await factories.count(store, factories.table_named(name))
        for name in ("workflows", "jobs", "outbox")
    }


async def test_a_committed_workflow_has_every_job_the_roots_queued_the_others_waiting(
    connection: psycopg.Connection[object], store: Store, alice: str
) -> None:
    workflow_id = jobrelay.enqueue_workflow(connection, diamond(), client="alice", key="w-1")
    connection.commit()

    view = await WorkflowStore(store).view(workflow_id)
    assert view is not None
    assert [job.ref for job in view.jobs] == ["a", "b", "c", "d"]
    assert {job.ref: job.state.value for job in view.jobs} == {
        "a": "queued",
        "b": "waiting",
        "c": "waiting",
        "d": "waiting",
    }
    assert {job.ref: job.after for job in view.jobs}["d"] == ("b", "c")
    assert view.state is WorkflowState.RUNNING and view.on_failure.value == "cancel_dependents"
    assert await counts(store) == {"workflows": 1, "jobs": 4, "outbox": 1}
    by_ref = {job.ref: await store.get_job(job.id) for job in view.jobs}
    assert by_ref["c"] is not None and by_ref["c"].priority == 5
    assert by_ref["d"] is not None and by_ref["d"].max_attempts == 7
    assert by_ref["a"] is not None and by_ref["a"].max_attempts == DEFAULT_MAX_ATTEMPTS


async def test_a_rolled_back_workflow_leaves_nothing(
    connection: psycopg.Connection[object], store: Store, alice: str
) -> None:
    workflow_id = jobrelay.enqueue_workflow(connection, diamond(), client="alice", key="w-1")
    connection.rollback()

    assert await WorkflowStore(store).view(workflow_id) is None
    assert await counts(store) == {"workflows": 0, "jobs": 0, "outbox": 0}


async def test_the_same_key_and_workflow_again_is_the_same_workflow(
    connection: psycopg.Connection[object], store: Store, alice: str
) -> None:
    first = jobrelay.enqueue_workflow(connection, diamond(), client="alice", key="w-1")
    in_the_same_transaction = jobrelay.enqueue_workflow(
        connection, diamond(), client="alice", key="w-1"
    )
    connection.commit()
    after_commit = jobrelay.enqueue_workflow(connection, diamond(), client="alice", key="w-1")
    connection.commit()

    assert first == in_the_same_transaction == after_commit
    assert await counts(store) == {"workflows": 1, "jobs": 4, "outbox": 1}


def just_a() -> jobrelay.Workflow:
    flow = jobrelay.Workflow()
    flow.add(TYPE, {"seconds": 0}, ref="a")
    return flow


@pytest.mark.parametrize(
    "other",
    [
        pytest.param(diamond(seconds=1), id="another payload"),
        pytest.param(just_a(), id="other jobs"),
    ],
)
async def test_another_workflow_under_the_key_conflicts_and_writes_nothing(
    connection: psycopg.Connection[object], store: Store, alice: str, other: jobrelay.Workflow
) -> None:
    held = jobrelay.enqueue_workflow(connection, diamond(), client="alice", key="w-1")
    connection.commit()

    with pytest.raises(jobrelay.IdempotencyConflict) as raised:
        jobrelay.enqueue_workflow(connection, other, client="alice", key="w-1")
    with pytest.raises(jobrelay.IdempotencyConflict):
        jobrelay.enqueue_workflow(
            connection, diamond(), client="alice", key="w-1", on_failure="continue"
        )
    connection.commit()  # the transaction is still usable

    assert raised.value.status == 409 and raised.value.code == "idempotency_conflict"
    assert raised.value.problem["workflow_id"] == str(held)
    assert await counts(store) == {"workflows": 1, "jobs": 4, "outbox": 1}


async def test_the_async_twin_writes_in_the_callers_async_transaction(
    database_url: str, store: Store, alice: str
) -> None:
    async with await psycopg.AsyncConnection.connect(libpq_url(database_url)) as raw:
        workflow_id = await jobrelay.enqueue_workflow_async(
            raw, diamond(), client="alice", key="w-1", on_failure="continue"
        )
        await raw.commit()

    view = await WorkflowStore(store).view(workflow_id)
    assert view is not None and view.on_failure.value == "continue" and len(view.jobs) == 4


class Sleep(BaseModel):
    seconds: float


def sleep_registry() -> Registry:
    registry = Registry()
    registry.register(JobType(TYPE, Sleep, max_attempts=5))
    return registry


async def test_with_a_registry_each_job_is_checked_and_gets_its_types_defaults(
    connection: psycopg.Connection[object], store: Store, alice: str
) -> None:
    unknown = jobrelay.Workflow()
    unknown.add("shop.nothing", {}, ref="x")
    with pytest.raises(UnknownJobType, match="job 'x'"):
        jobrelay.enqueue_workflow(
            connection, unknown, client="alice", key="w-0", registry=sleep_registry()
        )

    workflow_id = jobrelay.enqueue_workflow(
        connection, diamond(), client="alice", key="w-1", registry=sleep_registry()
    )
    connection.commit()

    view = await WorkflowStore(store).view(workflow_id)
    assert view is not None
    jobs = {job.ref: await store.get_job(job.id) for job in view.jobs}
    assert {ref: job.max_attempts for ref, job in jobs.items() if job is not None} == {
        "a": 5,
        "b": 5,
        "c": 5,
        "d": 7,
    }


async def test_bad_arguments_raise_before_any_statement(
    connection: psycopg.Connection[object], store: Store, alice: str
) -> None:
    with pytest.raises(ValueError, match="key"):
        jobrelay.enqueue_workflow(connection, diamond(), client="alice", key="")
    with pytest.raises(ValueError, match="is not a valid OnFailure"):
        jobrelay.enqueue_workflow(connection, diamond(), client="alice", key="w", on_failure="x")
    with pytest.raises(InvalidWorkflow):
        jobrelay.enqueue_workflow(connection, jobrelay.Workflow(), client="alice", key="w")
    nan = jobrelay.Workflow()
    nan.add(TYPE, {"seconds": float("nan")})
    with pytest.raises(ValueError, match="cannot be stored"):
        jobrelay.enqueue_workflow(connection, nan, client="alice", key="w")
    with pytest.raises(jobrelay.UnknownClient):
        jobrelay.enqueue_workflow(connection, diamond(), client="nobody", key="w")
    connection.commit()

    assert await counts(store) == {"workflows": 0, "jobs": 0, "outbox": 0}
