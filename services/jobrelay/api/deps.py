"""What the routes share: their dependencies (the store, the caller's client, an admin, the
operations) and the responses several of them declare. The app's context they are made from is
read through ``api/context.py``'s ``context_of`` (which ``auth.py``, imported here, uses too)."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import Depends, Query, Request

from jobrelay.api.auth import BearerClient
from jobrelay.api.context import context_of
from jobrelay.api.openapi import problem_responses
from jobrelay.api.schemas import NO_NUL
from jobrelay.core.clients import Client
from jobrelay.core.errors import JobNotFound
from jobrelay.core.jobs import Job
from jobrelay.core.pages import Page, decode_cursor
from jobrelay.db.store import Store
from jobrelay.operations import Operations

# Each operation lists the problems it can answer (api/openapi.py). Every /v1 call can be 401
# and 503 (the token is looked up in the database), and every admin call 403: their routers
# declare those; an operation adds its own: 404 and 422 for a path with a job id
# (``JOB_PROBLEMS``), 413 for a POST (the body limit applies to any body).
V1_PROBLEMS = problem_responses(401, 503)
ADMIN_PROBLEMS = problem_responses(401, 403, 503)
JOB_PROBLEMS = problem_responses(404, 422)
LOCATION_HEADER = {
    "Location": {"description": "the job's URL, /v1/jobs/{id}", "schema": {"type": "string"}}
}


async def _store(request: Request) -> Store:
    return context_of(request).store


async def _operations(request: Request) -> Operations:
    context = context_of(request)
    return Operations(context.store, context.settings, context.registry)


StoreDep = Annotated[Store, Depends(_store)]
OpsDep = Annotated[Operations, Depends(_operations)]
# The document's bearer security scheme and the token lookup, in one dependency (api/auth.py);
# ``CALLER`` by name too, for the submission's direct path (routes/jobs.py).
CALLER = BearerClient()
ClientDep = Annotated[Client, Depends(CALLER)]
AdminDep = Annotated[Client, Depends(BearerClient(admin=True))]


async def _own_job(job_id: uuid.UUID, client: ClientDep, store: StoreDep) -> Job:
    """The caller's job; another client's job is as unknown as a missing one (404, not 403)."""
    job = await store.get_job(job_id, client_id=client.id)
    if job is None:
        raise JobNotFound()
    return job


OwnJobDep = Annotated[Job, Depends(_own_job)]


def _page(
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[str | None, Query(max_length=200, pattern=NO_NUL)] = None,
) -> Page:
    return Page(limit, decode_cursor(cursor) if cursor else None)


PageDep = Annotated[Page, Depends(_page)]
