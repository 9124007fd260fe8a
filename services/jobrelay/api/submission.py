"""What a single submission and each item of a batch share: the types they may name (the
loaded registry, then the types the consumers registered: ``core/type_catalog.py``), whether
the client may submit them (``check_allowed``), the checks that make a request of a body, the
client's rate limit, and the counting of outcomes (``routes/jobs.py``)."""

from __future__ import annotations

from collections.abc import Iterable

from fastapi import Request

from jobrelay.api.context import context_of
from jobrelay.api.metrics import ApiMetrics
from jobrelay.api.schemas import SubmitJob
from jobrelay.core.clients import Client, may_submit
from jobrelay.core.errors import (
    DuplicateJob,
    IdempotencyConflict,
    IdempotencyKeyInvalid,
    InvalidPolicy,
    RateLimited,
    TypeNotAllowed,
)
from jobrelay.core.jobs import JobRequest, is_valid_idempotency_key
from jobrelay.core.type_catalog import PayloadTypes, TypeCatalog
from jobrelay.db.client_store import ClientStore
from jobrelay.db.store import AcceptResult


async def catalog_for(request: Request, names: Iterable[str]) -> TypeCatalog:
    """The types submissions of ``names`` are checked against: from memory, read again only
    when one of them is neither loaded nor known yet (``RegisteredTypes.catalog_for``)."""
    return await context_of(request).types.catalog_for(names)


def check_allowed(client: Client, types: TypeCatalog, names: Iterable[str]) -> None:
    """``TypeNotAllowed`` when the client may submit one of ``names`` (a submission's type, a
    batch's or a workflow's types) neither by its type patterns nor by the default rule
    (``core/clients.py``, ``may_submit``). Called before anything is read or written for the
    submission: a refused one leaves no trace. The client and the catalog are both in memory."""
    for name in sorted(set(names)):
        if not may_submit(client, name, open_to_api=types.open_to_api(name)):
            why = (
                "its type patterns do not name it"
                if client.type_patterns is not None
                else "the type is closed to HTTP (a Django task or api=False) unless the "
                "client's type patterns name it"
            )
            raise TypeNotAllowed(
                f"client {client.name!r} may not submit type {name[:100]!r}: {why}",
                job_type=name[:200],
            )


def job_request(
    request: Request, idempotency_key: str, body: SubmitJob, types: PayloadTypes
) -> JobRequest:
    """The request for the store, or the ``RequestError`` that says what is wrong with it."""
    if not is_valid_idempotency_key(idempotency_key):
        raise IdempotencyKeyInvalid()
    payload = types.validate_payload(body.type, body.payload)
    settings = context_of(request).settings
    max_attempts = body.max_attempts or types.max_attempts_for(body.type, settings.max_attempts)
    # The type's defaults first: the policies' rules hold on the job's flow, which a type's
    # unique= may complete (on_duplicate with the type's unique key).
    defaults = types.flow_defaults(body.type, payload, body.flow)
    try:  # a ValueError here is of the policies' rules (Flow.check_policies)
        return body.as_request(idempotency_key, max_attempts, defaults=defaults)
    except ValueError as error:
        raise InvalidPolicy(str(error)) from None


async def take_rate_limit(request: Request, client: Client, count: int = 1) -> None:
    """Count ``count`` submissions against the client's limit; ``RateLimited`` past it. Called
    before anything is written: a limited submission leaves no trace."""
    context = context_of(request)
    limit = client.rate_limit or context.rate_limit
    if limit is None or count == 0:
        return
    wait = await ClientStore(context.store).take_rate_token(client.id, limit, count)
    if wait is not None:
        raise RateLimited(wait, limit.describe())


def accept_outcome(accepted: AcceptResult) -> str:
    """What a submission came to, as the metrics and the accept span name it."""
    if accepted.conflict:
        return "conflict"
    if accepted.debounced:
        return "debounced"  # the queued job of its unique key took its payload
    if accepted.deduplicated:
        return "deduplicated"  # a job of its unique key answered it
    return "created" if accepted.created else "existing"


def count_outcome(metrics: ApiMetrics, job_type: str, accepted: AcceptResult) -> None:
    """Count the submission; ``IdempotencyConflict`` when the key was used for another one,
    ``DuplicateJob`` when a job of its unique key answered it and it asked to be refused."""
    if accepted.conflict:
        metrics.submissions(job_type, "conflict").inc()
        raise IdempotencyConflict(
            "the key was used for another type, payload or due time", job_id=str(accepted.job.id)
        )
    if accepted.rejected:
        metrics.submissions(job_type, "rejected").inc()
        raise DuplicateJob(
            f"job {accepted.job.id} holds the unique key", job_id=str(accepted.job.id)
        )
    metrics.submissions(job_type, accept_outcome(accepted)).inc()
