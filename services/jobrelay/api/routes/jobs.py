"""``/v1/jobs``: submit, list, read, trace and cancel the caller's own jobs."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Coroutine
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Header, Path, Query, Request, Response
from pydantic import ValidationError
from starlette.convertors import Convertor, register_url_convertor

from jobrelay import telemetry
from jobrelay.api import openapi
from jobrelay.api.context import context_of
from jobrelay.api.deps import (
    CALLER,
    JOB_PROBLEMS,
    LOCATION_HEADER,
    V1_PROBLEMS,
    ClientDep,
    OwnJobDep,
    PageDep,
    StoreDep,
)
from jobrelay.api.openapi import declares_json, problem_responses
from jobrelay.api.problems import (
    problem_document,
    request_error_document,
    status_of,
    validation_errors,
)
from jobrelay.api.schemas import (
    CANCEL_REQUESTED,
    NO_NUL,
    BatchAnswer,
    BatchItem,
    BatchResult,
    DebouncedJobView,
    DeduplicatedJobView,
    EventList,
    EventView,
    JobPage,
    JobView,
    SignalView,
    SubmitBatch,
    SubmitJob,
    TraceView,
    job_location,
    submitted_view,
)
from jobrelay.api.shedding import overloaded
from jobrelay.api.submission import (
    accept_outcome,
    catalog_for,
    check_allowed,
    count_outcome,
    job_request,
    take_rate_limit,
)
from jobrelay.api.waiting import MAX_WAIT_SECONDS, TooManyWaiters
from jobrelay.core.bounds import SIGNAL_NAME_MAX, SIGNAL_VALUE_MAX_BYTES
from jobrelay.core.errors import (
    DuplicateJob,
    IdempotencyConflict,
    IdempotencyKeyInvalid,
    InvalidPayload,
    JobFinished,
    JobNotFound,
    NotCancellable,
    RequestError,
    SignalTooLarge,
    Throttled,
)
from jobrelay.core.flow import Throttle
from jobrelay.core.jobs import CancelAnswer, JobRequest, SignalAnswer, is_valid_idempotency_key
from jobrelay.core.jsonvalues import unstorable_json
from jobrelay.core.states import JobState
from jobrelay.core.trace import trace_document
from jobrelay.core.type_catalog import PayloadTypes
from jobrelay.db.store import AcceptResult, StepsShown

log = logging.getLogger("jobrelay.api")

# A route that reads a JSON body answers 415 to any other body (api/openapi.py).
router = APIRouter(route_class=openapi.JsonBodyRoute, responses=V1_PROBLEMS, tags=["jobs"])


SUBMIT_PATH = "/v1/jobs"
IDEMPOTENCY_HEADER_MAX = 1000  # what the Header declares below; the key itself is 1-200


class SubmitRoute(openapi.JsonBodyRoute):
    """``POST /v1/jobs``, answered without FastAPI's request handler when the request is well
    formed: its JSON body a valid ``SubmitJob``, an ``Idempotency-Key`` header within the
    declared length. Reading the body and solving the dependencies (``solve_dependencies``,
    the content type parsed again, the header and body fields) cost FastAPI more CPU per
    submission than the endpoint itself. Anything else, every error, goes through FastAPI's
    handler (the body read once, kept by the request), so every error answer, 415 and 422
    included, is FastAPI's own; what the direct path accepts FastAPI would have accepted the
    same way: the same JSON parser, the same model validated from Python, the same header, and
    the same caller dependency (``CALLER``) before the endpoint."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        through_fastapi = super().get_route_handler()

        async def handler(request: Request) -> Response:
            direct = await _submit_directly(request)
            return direct if direct is not None else await through_fastapi(request)

        return handler


async def _submit_directly(request: Request) -> Response | None:
    """The submission's answer, or None when FastAPI's handler must look at the request."""
    headers = request.headers
    key = headers.get("idempotency-key")
    if not key or len(key) > IDEMPOTENCY_HEADER_MAX:
        return None
    if not declares_json(headers.get("content-type")):
        return None  # FastAPI's handler answers 415 (openapi.JsonBodyRoute)
    try:
        body = SubmitJob.model_validate(json.loads(await request.body()))
    except Exception:  # every way a body fails is for FastAPI to answer
        return None
    return await submit_job(body, request, await CALLER(request), key)


async def submit_job(
    body: SubmitJob,
    request: Request,
    client: ClientDep,
    idempotency_key: Annotated[
        str,
        Header(
            max_length=IDEMPOTENCY_HEADER_MAX,
            description="1–200 visible ASCII characters, scoped to the client; a missing "
            "or invalid key is answered 400 idempotency_key_missing / _invalid",
            # Documented as the key really is (docs/invariants.md, 5); a missing key becomes
            # the 400 problem in api/problems.py, an invalid one below.
            json_schema_extra={"minLength": 1, "maxLength": 200, "pattern": "^[!-~]+$"},
        ),
    ],
) -> Response:
    # The span of the accept (tracing on), or the submitter's trace context passed on (off).
    with telemetry.accepting(request.headers, SUBMIT_PATH) as accept:
        types = await catalog_for(request, (body.type,))
        check_allowed(client, types, (body.type,))
        asked = job_request(request, idempotency_key, body, types)
        await take_rate_limit(request, client)
        # From the app's context rather than a StoreDep: one dependency fewer to solve on the
        # hot path.
        context = context_of(request)
        accepted = await context.store.accept_job(
            client.id,
            asked,
            traceparent=accept.traceparent,
            throttle=types.throttle_for(body.type),
        )
        accept.accepted(accepted.job.id, body.type, client.name, accept_outcome(accepted))
        count_outcome(context.metrics, body.type, accepted)
        if log.isEnabledFor(logging.INFO):  # the line's context is not built for nothing
            log.info(_ACCEPT_LOG[accept_outcome(accepted)], extra=_accept_log_extra(accepted))
    # Serialized once here rather than re-validated through response_model: this is the
    # hot path, and the model above is still what the OpenAPI document describes.
    return Response(
        submitted_view(
            accepted.job,
            deduplicated=accepted.deduplicated,
            created=accepted.created,
            debounced=accepted.debounced,
        ).model_dump_json(),
        status_code=202 if accepted.created else 200,
        media_type="application/json",
        headers={"Location": job_location(accepted.job.id)},
    )


router.add_api_route(
    SUBMIT_PATH,
    submit_job,
    methods=["POST"],
    route_class_override=SubmitRoute,
    operation_id="submitJob",
    status_code=202,
    response_model=JobView,
    responses={
        202: {
            "description": "Accepted: recorded with its outbox row",
            "headers": LOCATION_HEADER,
        },
        200: {
            "model": DeduplicatedJobView | DebouncedJobView | JobView,
            "description": "The key was used before for the same request: that job, now. Or "
            "a job of yours of the same type and unique_key is queued, running or retrying "
            "(or ended within unique_for_seconds): that job, with deduplicated true. Or a "
            "debounce moved the key's queued job: that job, with debounced true (the key is "
            "not kept in either case)",
            "headers": LOCATION_HEADER,
        },
        **openapi.submission_problems(400, 409, 413, 422, 429),
    },
    summary="Submit a job (idempotent by Idempotency-Key)",
)


_ACCEPT_LOG = {
    "created": "job accepted",
    "existing": "job submitted again with the same key",
    "deduplicated": "job not made: a job of its unique key answers it",
    "debounced": "job not made: the queued job of its unique key took its payload",
}
_ACCEPT_EVENT = {
    "created": "received",
    "existing": "idempotent_repeat",
    "deduplicated": "deduplicated",
    "debounced": "debounced",
}


def _accept_log_extra(accepted: AcceptResult) -> dict[str, Any]:
    job = accepted.job
    return {
        "job_id": str(job.id),
        "type": job.type,
        "attempt": 0,
        "event": _ACCEPT_EVENT[accept_outcome(accepted)],
    }


BATCH_PATH = "/v1/jobs/batch"


@router.post(
    BATCH_PATH,
    operation_id="submitBatch",
    response_model=BatchAnswer,
    responses=openapi.submission_problems(400, 413, 422, 429),
    summary="Submit up to 1,000 jobs, each answered on its own, in order",
)
async def submit_batch(body: SubmitBatch, request: Request, client: ClientDep) -> BatchAnswer:
    """Each item has the rules of ``POST /v1/jobs`` (its key in ``idempotency_key``) and gets
    its own answer: 202 new, 200 the key's job, 409, 400 or 422 with the problem. The new jobs
    of one request are written in one transaction. The rate limit counts every valid item;
    over it, the whole batch is 429 and nothing is written. An item of a type the client may
    not submit refuses the whole batch (403 type_not_allowed), nothing written."""
    answers: list[BatchResult | None] = []
    asked: list[tuple[int, JobRequest]] = []
    # One span for the request; its new jobs share its trace context.
    with telemetry.accepting(request.headers, BATCH_PATH) as accept:
        # One lookup for the whole batch: at most one read of the registered types.
        named = _named_types(body.jobs)
        types = await catalog_for(request, named)
        check_allowed(client, types, named)
        for index, raw in enumerate(body.jobs):
            try:
                item = BatchItem.model_validate(raw)
                asked.append((index, job_request(request, item.idempotency_key, item, types)))
                answers.append(None)
            except ValidationError as error:
                answers.append(_item_problem(422, "validation_error", error))
            except RequestError as error:
                answers.append(
                    BatchResult(status=status_of(error), error=request_error_document(error))
                )
        await take_rate_limit(request, client, count=len(asked))
        store = context_of(request).store
        accepted = (
            await store.accept_jobs(
                client.id,
                [job for _, job in asked],
                traceparent=accept.traceparent,
                throttles=_throttles(types, {job.type for _, job in asked}),
            )
            if asked
            else []
        )
        for (index, job), result in zip(asked, accepted, strict=True):
            answers[index] = _item_answer(request, job, result)
        accept.batch(
            client.name,
            len(body.jobs),
            (accept_outcome(result) for result in accepted if isinstance(result, AcceptResult)),
            invalid=len(body.jobs) - len(asked),
        )
    return BatchAnswer(results=[answer for answer in answers if answer is not None])


def _named_types(items: list[dict[str, Any]]) -> set[str]:
    """The types a batch's items name (an item without one is answered by its validation)."""
    return {item["type"] for item in items if isinstance(item.get("type"), str)}


def _request_problem(error: RequestError) -> BatchResult:
    return BatchResult(status=status_of(error), error=request_error_document(error))


def _item_problem(status: int, code: str, error: ValidationError) -> BatchResult:
    document = problem_document(
        status, code, "The job is not valid", errors=validation_errors(error)
    )
    return BatchResult(status=status, error=document)


def _throttles(types: PayloadTypes, names: set[str]) -> dict[str, Throttle]:
    """The throttles of the types ``names`` that have one."""
    found = {name: types.throttle_for(name) for name in names}
    return {name: throttle for name, throttle in found.items() if throttle is not None}


def _item_answer(
    request: Request, job: JobRequest, accepted: AcceptResult | Throttled
) -> BatchResult:
    if isinstance(accepted, Throttled):
        return _request_problem(accepted)
    try:
        count_outcome(context_of(request).metrics, job.type, accepted)
    except (IdempotencyConflict, DuplicateJob) as error:
        return _request_problem(error)
    view = submitted_view(
        accepted.job,
        deduplicated=accepted.deduplicated,
        created=accepted.created,
        debounced=accepted.debounced,
    )
    return BatchResult(status=202 if accepted.created else 200, job=view)


@router.get(
    "/v1/jobs",
    operation_id="listJobs",
    response_model=JobPage,
    responses=problem_responses(400, 422),
    summary="List your own jobs, newest first",
)
async def list_jobs(
    client: ClientDep,
    store: StoreDep,
    page: PageDep,
    state: JobState | None = None,
    type: Annotated[str | None, Query(max_length=200, pattern=NO_NUL)] = None,
) -> JobPage:
    jobs = await store.list_jobs(
        client_id=client.id,
        state=state.value if state else None,
        job_type=type,
        limit=page.limit,
        after=page.after,
    )
    return JobPage(items=[JobView.of(job) for job in jobs], next_cursor=page.next_cursor(jobs))


class JobIdConvertor(Convertor[str]):
    """A job id in a path: any one segment but ``batch``, so that ``GET /v1/jobs/batch`` is the
    batch route's 405 (``Allow: POST``), not a read of the job "batch". The route still checks
    the id as a UUID (a malformed one is ``422 validation_error``)."""

    regex = "(?!batch$)[^/]+"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("job_id", JobIdConvertor())
# The job read; the document and the metrics name it by its template, /v1/jobs/{job_id}.
JOB_PATH = "/v1/jobs/{job_id:job_id}"


@router.get(
    JOB_PATH,
    operation_id="getJob",
    response_model=JobView,
    responses=JOB_PROBLEMS,
    summary="One of your jobs, with its result once succeeded",
)
async def get_job(
    job_id: uuid.UUID,
    client: ClientDep,
    request: Request,
    store: StoreDep,
    steps: Annotated[
        Literal["values"] | None,
        Query(
            description="values: each recorded step with its value (without: names, kinds, "
            "times and attempts only)"
        ),
    ] = None,
    wait: Annotated[
        float | None,
        Query(
            gt=0,
            le=MAX_WAIT_SECONDS,
            description="Answer once the job is finished, or after this many seconds with "
            "its current view",
        ),
    ] = None,
) -> Any:
    # Its steps come with the job, in one statement (no read of its own for a job with none).
    shown: StepsShown = "values" if steps == "values" else "names"
    job = await store.get_job(job_id, client_id=client.id, steps=shown)
    if job is None:
        raise JobNotFound()  # another client's job is as unknown as a missing one
    if wait is not None:
        waiters = context_of(request).waiters
        read = job
        try:
            job = await waiters.wait(
                read, wait, lambda: store.get_job(read.id, client_id=read.client_id, steps=shown)
            )
        except TooManyWaiters:
            return overloaded(f"this process holds {waiters.max_waiters} waiting requests")
    return JobView.of(job, step_values=steps == "values")


@router.get(
    "/v1/jobs/{job_id}/events",
    operation_id="listJobEvents",
    response_model=EventList,
    responses=JOB_PROBLEMS,
    summary="The job's transition journal",
)
async def job_events(job: OwnJobDep, store: StoreDep) -> EventList:
    events = await store.job_events(job.id)
    return EventList(
        job_id=job.id,
        events=[
            EventView(at=e.at, event=e.event, attempt=e.attempt, detail=e.detail) for e in events
        ],
    )


@router.get(
    "/v1/jobs/{job_id}/trace",
    operation_id="getJobTrace",
    response_model=TraceView,
    responses=JOB_PROBLEMS,
    summary="What happened to your job: intent, publishing, deliveries, attempts, result",
)
async def job_trace(job: OwnJobDep, store: StoreDep) -> dict[str, Any]:
    # The owner sees a failure's class and message; tracebacks are for operators.
    trace = await store.trace(job.id)
    if trace is None:
        raise JobNotFound()
    return trace_document(trace, tracebacks=False)


@router.post(
    "/v1/jobs/{job_id}/cancel",
    operation_id="cancelJob",
    response_model=JobView,
    responses={
        200: {"description": "Cancelled: the job was queued or retrying"},
        202: CANCEL_REQUESTED,
        **problem_responses(404, 409, 413, 422),
    },
    summary="Cancel a job: at once when queued or retrying, by request when running",
)
async def cancel_job(
    job_id: uuid.UUID, client: ClientDep, store: StoreDep, response: Response
) -> JobView:
    answer = await store.cancel_job(job_id, client_id=client.id, detail="by its client")
    job = await store.get_job(job_id, client_id=client.id)
    if job is None:
        raise JobNotFound()
    if answer is None:
        raise NotCancellable(f"the job is {job.state.value}", state=job.state.value)
    if answer is CancelAnswer.REQUESTED:
        response.status_code = 202
    return JobView.of(job)


SIGNAL_PATH = "/v1/jobs/{job_id}/signals/{name}"


@router.post(
    SIGNAL_PATH,
    operation_id="signalJob",
    status_code=202,
    response_model=SignalView,
    responses={
        202: {
            "description": "Kept (sent), or kept before under the same Idempotency-Key "
            "(repeated); a job asleep waiting for this signal is queued again"
        },
        **problem_responses(400, 404, 409, 413, 422),
    },
    summary="Send a signal to one of your jobs (context.wait_for_signal)",
)
async def signal_job(
    job_id: uuid.UUID,
    name: Annotated[str, Path(min_length=1, max_length=SIGNAL_NAME_MAX, pattern=NO_NUL)],
    value: Annotated[Any, Body(description="The signal's value: any JSON value")],
    request: Request,
    client: ClientDep,
    store: StoreDep,
    idempotency_key: Annotated[
        str | None,
        Header(
            max_length=IDEMPOTENCY_HEADER_MAX,
            description="Optional, 1–200 visible ASCII characters, scoped to the job: the "
            "same key again answers 202 repeated and keeps nothing new",
            json_schema_extra={"minLength": 1, "maxLength": 200, "pattern": "^[!-~]+$"},
        ),
    ] = None,
) -> SignalView:
    """The signal is kept for the job (a wait that comes later takes it at once); the
    transaction that keeps it wakes the job when it sleeps waiting for it. An admin may signal
    any client's job."""
    check_signal(len(await request.body()), value, idempotency_key)
    answer = await store.signal_job(
        job_id,
        name,
        value,
        client_id=None if client.is_admin else client.id,
        idempotency_key=idempotency_key,
    )
    if answer is SignalAnswer.UNKNOWN:
        raise JobNotFound()
    if answer is SignalAnswer.FINISHED:
        raise JobFinished("the job has finished; the signal was not kept")
    return SignalView(job_id=job_id, name=name, status=answer.value)


def check_signal(size: int, value: Any, idempotency_key: str | None) -> None:
    """What the endpoint refuses before it writes: a value over 64 KiB (413), one that jsonb
    cannot hold (422), a malformed key (400)."""
    if size > SIGNAL_VALUE_MAX_BYTES:
        raise SignalTooLarge(f"a signal's value is at most {SIGNAL_VALUE_MAX_BYTES} bytes")
    problem = unstorable_json(value)
    if problem is not None:
        raise InvalidPayload(f"the signal's value cannot be stored: {problem}")
    if idempotency_key is not None and not is_valid_idempotency_key(idempotency_key):
        raise IdempotencyKeyInvalid()
