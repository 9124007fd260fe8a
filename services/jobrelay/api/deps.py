"""What the routes share: their dependencies (the store, the caller's client, an admin, the
operations) and the responses several of them declare."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from jobrelay.api.auth import BearerClient
from jobrelay.api.openapi import problem_responses
from jobrelay.db.store import Client, Store
from jobrelay.operations import Operations

# Each operation lists the problems it can answer (api/openapi.py): every /v1 call can be 401
# and 503 (the token is looked up in the database), admin calls 403, a path with a job id 404
# and 422, a POST 413 (the body limit applies to any body).
OWN_JOB_PROBLEMS = problem_responses(401, 404, 422, 503)
ADMIN_PROBLEM_RESPONSES = problem_responses(401, 403, 503)
ADMIN_JOB_PROBLEMS = problem_responses(401, 403, 404, 422, 503)
LOCATION_HEADER = {
    "Location": {"description": "the job's URL, /v1/jobs/{id}", "schema": {"type": "string"}}
}
# Query text reaches SQL parameters, and PostgreSQL text cannot hold a NUL character.
NO_NUL = r"^[^\x00]*$"


async def _store(request: Request) -> Store:
    store: Store = request.app.state.store
    return store


async def _operations(request: Request) -> Operations:
    return Operations(
        request.app.state.store, request.app.state.settings, request.app.state.registry
    )


StoreDep = Annotated[Store, Depends(_store)]
OpsDep = Annotated[Operations, Depends(_operations)]
# The document's bearer security scheme and the token lookup, in one dependency (api/auth.py).
ClientDep = Annotated[Client, Depends(BearerClient())]
AdminDep = Annotated[Client, Depends(BearerClient(admin=True))]
