"""``/v1/workflows``: submit a graph of jobs as one, read it, cancel it (docs/workflows.md)."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Header, Request, Response

from jobrelay import telemetry
from jobrelay.api import openapi
from jobrelay.api.context import context_of
from jobrelay.api.deps import LOCATION_HEADER, V1_PROBLEMS, ClientDep, StoreDep
from jobrelay.api.openapi import problem_responses
from jobrelay.api.schemas import SubmitWorkflow, WorkflowViewOut, workflow_location
from jobrelay.api.submission import catalog_for, check_allowed, take_rate_limit
from jobrelay.core.errors import IdempotencyConflict, IdempotencyKeyInvalid
from jobrelay.core.jobs import is_valid_idempotency_key
from jobrelay.core.type_catalog import PayloadTypes
from jobrelay.core.workflows import WorkflowNotFound, check_workflow, workflow_step
from jobrelay.db.workflow_store import WorkflowStore, WorkflowSubmission

router = APIRouter(route_class=openapi.JsonBodyRoute, responses=V1_PROBLEMS, tags=["workflows"])

SUBMIT_PATH = "/v1/workflows"
WORKFLOW_PROBLEMS = problem_responses(404, 422)


@router.post(
    SUBMIT_PATH,
    operation_id="submitWorkflow",
    status_code=202,
    response_model=WorkflowViewOut,
    responses={
        202: {
            "description": "Accepted: every job written in one transaction",
            "headers": LOCATION_HEADER,
        },
        200: {
            "model": WorkflowViewOut,
            "description": "The key was used before for the same workflow: that workflow, now",
            "headers": LOCATION_HEADER,
        },
        **openapi.submission_problems(400, 409, 413, 422, 429),
    },
    summary="Submit a workflow: jobs that wait for other jobs (idempotent by Idempotency-Key)",
)
async def submit_workflow(
    body: SubmitWorkflow,
    request: Request,
    client: ClientDep,
    store: StoreDep,
    idempotency_key: Annotated[
        str,
        Header(
            max_length=1000,
            description="1–200 visible ASCII characters, scoped to the client",
            json_schema_extra={"minLength": 1, "maxLength": 200, "pattern": "^[!-~]+$"},
        ),
    ],
) -> Response:
    if not is_valid_idempotency_key(idempotency_key):
        raise IdempotencyKeyInvalid()
    with telemetry.accepting(request.headers, SUBMIT_PATH) as accept:
        named = {job.type for job in body.jobs}
        types = await catalog_for(request, named)
        check_allowed(client, types, named)
        submission = _submission(request, idempotency_key, body, accept.traceparent, types)  # 422s
        await take_rate_limit(request, client, count=len(submission.steps))
        workflows = WorkflowStore(store)
        accepted = await workflows.accept(client.id, submission)
    if accepted.conflict:
        raise IdempotencyConflict(
            "the key was used for another workflow", workflow_id=str(accepted.workflow_id)
        )
    view = await workflows.view(accepted.workflow_id, client.id)
    assert view is not None, "a workflow just accepted is gone"  # workflows are never deleted
    return Response(
        WorkflowViewOut.of(view).model_dump_json(),
        status_code=202 if accepted.created else 200,
        media_type="application/json",
        headers={"Location": workflow_location(view.id)},
    )


def _submission(
    request: Request,
    key: str,
    body: SubmitWorkflow,
    traceparent: str | None,
    types: PayloadTypes,
) -> WorkflowSubmission:
    """The graph (``core/workflows.py::check_workflow``), then each job checked as a single
    submission is (its ref named in the problem)."""
    check_workflow([(job.ref, job.after) for job in body.jobs])  # before 1,000 payloads
    settings = context_of(request).settings
    steps = tuple(
        workflow_step(
            types,
            ref=job.ref,
            type=job.type,
            payload=job.payload,
            after=job.after,
            priority=job.priority,
            max_attempts=job.max_attempts,
            default_max_attempts=settings.max_attempts,
        )
        for job in body.jobs
    )
    return WorkflowSubmission(key, body.on_failure, steps, traceparent)


@router.get(
    "/v1/workflows/{workflow_id}",
    operation_id="getWorkflow",
    response_model=WorkflowViewOut,
    responses=WORKFLOW_PROBLEMS,
    summary="A workflow of yours: its state, and each job's by ref",
)
async def get_workflow(
    workflow_id: uuid.UUID, client: ClientDep, store: StoreDep
) -> WorkflowViewOut:
    view = await WorkflowStore(store).view(workflow_id, client.id)
    if view is None:
        raise WorkflowNotFound()
    return WorkflowViewOut.of(view)


@router.post(
    "/v1/workflows/{workflow_id}/cancel",
    operation_id="cancelWorkflow",
    response_model=WorkflowViewOut,
    responses=WORKFLOW_PROBLEMS,
    summary="Cancel every job of the workflow that has not finished (running ones by request)",
)
async def cancel_workflow(
    workflow_id: uuid.UUID, client: ClientDep, store: StoreDep
) -> WorkflowViewOut:
    view = await WorkflowStore(store).cancel(
        workflow_id, client.id, detail="its workflow was cancelled by its client"
    )
    if view is None:
        raise WorkflowNotFound()
    return WorkflowViewOut.of(view)
