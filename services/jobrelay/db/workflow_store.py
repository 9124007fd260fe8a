"""Workflows in the database (docs/workflows.md): the accept of a whole graph, its view, its
cancel.

The accept is written once as the statements it runs (``accept_workflow_steps``, a generator
like ``db/accept.py``'s), so ``WorkflowStore.accept`` on the pool and
``jobrelay.enqueue_workflow`` on the caller's connection drive the same algorithm.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from jobrelay.core.fingerprint import canonical_json
from jobrelay.core.idempotency import KeyDecision, decide
from jobrelay.core.ids import new_id
from jobrelay.core.states import JobState
from jobrelay.core.workflows import (
    OnFailure,
    WorkflowJob,
    WorkflowState,
    WorkflowStep,
    WorkflowSummary,
    WorkflowView,
    check_workflow,
    job_key,
    workflow_fingerprint,
)
from jobrelay.db import queries as q
from jobrelay.db.accept import Steps, drive_async
from jobrelay.db.store import Store

# Passes of a workflow's cancel over rows other statements held at the time (each pass waits
# a moment): a finish or a claim holds a row for milliseconds.
CANCEL_PASSES = 200
_CANCEL_PAUSE_SECONDS = 0.01


@dataclass(frozen=True)
class WorkflowSubmission:
    """A checked workflow: its key, policy and jobs (in the order given)."""

    idempotency_key: str
    on_failure: OnFailure
    steps: tuple[WorkflowStep, ...]
    traceparent: str | None = None

    def __post_init__(self) -> None:
        check_workflow([(step.ref, step.after) for step in self.steps])

    @property
    def fingerprint(self) -> str:
        return workflow_fingerprint(self.on_failure, self.steps)


@dataclass(frozen=True)
class WorkflowAccepted:
    workflow_id: uuid.UUID
    created: bool  # False: the key was used before, ``workflow_id`` is that workflow
    conflict: bool  # the key was used for another workflow


def accept_workflow_steps(
    client_id: uuid.UUID, submission: WorkflowSubmission
) -> Steps[WorkflowAccepted]:
    """One statement writes the workflow, its jobs, edges, outbox rows and events; when its key
    was used, a second reads the workflow that holds it (ON CONFLICT waited for it to commit)."""
    workflow_id = new_id()
    steps = submission.steps
    # Time-ordered and sorted, so that the ids keep the order the jobs were given in.
    ids = dict(zip((step.ref for step in steps), sorted(new_id() for _ in steps), strict=True))
    edges = [(ids[step.ref], ids[parent]) for step in steps for parent in step.after]
    fingerprint = submission.fingerprint
    inserted = yield (
        q.ACCEPT_WORKFLOW,
        {
            "id": workflow_id,
            "client_id": client_id,
            "idempotency_key": submission.idempotency_key,
            "request_hash": fingerprint,
            "on_failure": submission.on_failure.value,
            "traceparent": submission.traceparent,
            "job_ids": [ids[step.ref] for step in steps],
            "refs": [step.ref for step in steps],
            "job_keys": [job_key(workflow_id, step.ref) for step in steps],
            "types": [step.request.type for step in steps],
            "payloads": [canonical_json(step.request.payload) for step in steps],
            "max_attempts": [step.request.max_attempts for step in steps],
            "priorities": [step.request.priority for step in steps],
            "concurrency_keys": [step.request.job_flow.concurrency_key for step in steps],
            "waiting_for": [len(step.after) for step in steps],
            "child_ids": [child for child, _ in edges],
            "parent_ids": [parent for _, parent in edges],
        },
    )
    if inserted:
        return WorkflowAccepted(workflow_id, created=True, conflict=False)
    existing = yield (
        q.WORKFLOW_BY_KEY,
        {"client_id": client_id, "idempotency_key": submission.idempotency_key},
    )
    if not existing:  # not expected: workflows are never deleted
        raise RuntimeError("a workflow's key was taken, yet no workflow holds it")
    row = existing[0]
    decision = decide(row.request_hash, fingerprint)
    return WorkflowAccepted(row.id, created=False, conflict=decision is KeyDecision.CONFLICT)


def workflow_view(workflow: Any, jobs: Sequence[Any]) -> WorkflowView:
    """The view from WORKFLOW_BY_ID's row and WORKFLOW_JOBS' rows."""
    return WorkflowView(
        id=workflow.id,
        client_id=workflow.client_id,
        on_failure=OnFailure(workflow.on_failure),
        created_at=workflow.created_at,
        cancelled_at=workflow.cancelled_at,
        jobs=tuple(
            WorkflowJob(
                ref=job.ref,
                id=job.id,
                type=job.type,
                state=JobState(job.state),
                after=tuple(job.after),
                last_error_code=job.last_error_code,
                progress=job.progress,
            )
            for job in jobs
        ),
    )


class WorkflowStore:
    def __init__(self, store: Store) -> None:
        self.store = store

    async def accept(
        self, client_id: uuid.UUID, submission: WorkflowSubmission
    ) -> WorkflowAccepted:
        """Each statement of the accept is atomic on its own (``accept_workflow_steps``), as a
        single job's is (``Store.accept_job``): no transaction spans them."""

        async def execute(statement: Any, params: dict[str, Any]) -> list[Any]:
            return await self.store.fetch_all(statement, **params)

        return await drive_async(accept_workflow_steps(client_id, submission), execute)

    async def view(
        self, workflow_id: uuid.UUID, client_id: uuid.UUID | None = None
    ) -> WorkflowView | None:
        """The workflow (of ``client_id``; None: anyone's) with its jobs, read in one snapshot."""
        async with self.store.transaction() as connection:
            await connection.execute(q.ONE_SNAPSHOT)
            row = (
                await connection.execute(
                    q.WORKFLOW_BY_ID, {"id": workflow_id, "client_id": client_id}
                )
            ).first()
            if row is None:
                return None
            jobs = (await connection.execute(q.WORKFLOW_JOBS, {"id": workflow_id})).all()
        return workflow_view(row, jobs)

    async def list_workflows(
        self,
        *,
        client_id: uuid.UUID | None,
        limit: int,
        after: tuple[datetime, uuid.UUID] | None,
        state: WorkflowState | None = None,
    ) -> list[WorkflowSummary]:
        """A page of the workflows of ``client_id`` (None: every client's) in ``state`` (None:
        any), newest first."""
        rows = await self.store.fetch_all(
            q.LIST_WORKFLOWS,
            client_id=client_id,
            state=None if state is None else state.value,
            limit=limit,
            after_created_at=after[0] if after else None,
            after_id=after[1] if after else None,
        )
        return [
            WorkflowSummary(
                id=row.id,
                client_id=row.client_id,
                on_failure=OnFailure(row.on_failure),
                created_at=row.created_at,
                cancelled_at=row.cancelled_at,
                counts=dict(row.counts),
            )
            for row in rows
        ]

    async def cancel(
        self, workflow_id: uuid.UUID, client_id: uuid.UUID | None = None, *, detail: str
    ) -> WorkflowView | None:
        """Cancel every job of the workflow that has not finished (a running one is asked to
        stop, as ``POST /v1/jobs/{id}/cancel`` asks), and keep the workflow from starting
        anything again. None: no such workflow (of this client)."""
        marked = await self.store.fetch_one(
            q.MARK_WORKFLOW_CANCELLED, id=workflow_id, client_id=client_id
        )
        if marked is None:
            return None
        for _ in range(CANCEL_PASSES):
            row = await self.store.fetch_one(q.CANCEL_WORKFLOW_JOBS, id=workflow_id, detail=detail)
            if row is None or row.skipped == 0:
                break
            await asyncio.sleep(_CANCEL_PAUSE_SECONDS)
        return await self.view(workflow_id, client_id)
