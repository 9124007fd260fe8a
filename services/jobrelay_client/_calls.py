"""What ``Client`` and ``AsyncClient`` share: each API call as a value (``Call``), and the
decision after each try of one (``Attempts``). The two clients only send and sleep, each its
own way."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx

from jobrelay_client._retry import Failure, RetryPolicy, parse_retry_after, status_failure
from jobrelay_client.bounds import SIGNAL_NAME_MAX
from jobrelay_client.errors import ApiError, ThrottledError
from jobrelay_client.flow import Flow, is_valid_idempotency_key
from jobrelay_client.models import BatchAnswer, Job, JobPage, Signal, WorkflowView, read_answer
from jobrelay_client.workflows import OnFailure, Workflow

T = TypeVar("T")
Http = TypeVar("Http", bound=httpx.Client | httpx.AsyncClient)
Transport = TypeVar("Transport", bound=httpx.BaseTransport | httpx.AsyncBaseTransport)
Answer = TypeVar("Answer")

JobId = uuid.UUID | str
WorkflowId = uuid.UUID | str
MAX_BATCH = 1000
MAX_WAIT_SECONDS = 60.0
Outcome = httpx.Response | httpx.TransportError


class ClientBase(Generic[Http, Transport]):
    """What both clients keep: the retry policy and an httpx client (``_open``) that sends
    the token with every request."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 10.0,
        retries: int = 5,
        transport: Transport | None = None,
    ) -> None:
        if not token:
            raise ValueError("token is empty")
        self._policy = RetryPolicy(retries=retries)
        self._http = self._open(
            transport,
            base_url=base_url,
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
            timeout=timeout,
        )

    def _open(self, transport: Transport | None, **options: Any) -> Http:
        raise NotImplementedError

    def __repr__(self) -> str:  # the base URL only, never the token
        return f"{type(self).__name__}({str(self._http.base_url)!r})"


@dataclass(frozen=True)
class Call(Generic[T]):
    """One API call: the request, how a success is read, and whether it may be sent again
    when it is unknown whether the server acted on it (``_retry.Failure.AMBIGUOUS``)."""

    method: str
    path: str
    read: Callable[[httpx.Response], T]
    repeatable: bool = True
    params: dict[str, str] = field(default_factory=dict)
    json: dict[str, Any] | None = None
    content: bytes | None = None  # a body that is not an object (a signal's JSON value)
    headers: dict[str, str] = field(default_factory=dict)
    extra_time: float = 0.0  # seconds the server may take on purpose (a ?wait)

    def request(self, http: httpx.Client | httpx.AsyncClient) -> httpx.Request:
        extensions: dict[str, Any] = {}
        if self.extra_time:
            timeout = http.timeout.as_dict()
            if timeout["read"] is not None:
                timeout["read"] += self.extra_time
            extensions["timeout"] = timeout
        return http.build_request(
            self.method,
            self.path,
            params=self.params,
            json=self.json,
            content=self.content,
            headers=self.headers,
            extensions=extensions,
        )


def submit(
    type: str,
    payload: dict[str, Any],
    *,
    key: str | None,
    max_attempts: int | None,
    run_at: datetime | None = None,
    delay: float | timedelta | None = None,
    flow: Flow | None = None,
) -> Call[Job]:
    """``POST /v1/jobs``. Every try carries the same key: the API makes one job of them all."""
    key = _key(key)
    body = job_body(type, payload, max_attempts=max_attempts, run_at=run_at, delay=delay, flow=flow)
    return Call("POST", "/v1/jobs", _reader(Job), json=body, headers={"Idempotency-Key": key})


def submit_many(jobs: Iterable[Mapping[str, Any]]) -> Call[list[Job | ApiError]]:
    """``POST /v1/jobs/batch``: each job a mapping with ``type`` and the keyword arguments of
    ``submit`` (``payload``, ``key``, ``max_attempts``, ``run_at``, ``delay`` and
    ``FLOW_FIELDS``). A job without a key gets a random one here, so every try of the batch
    carries the same keys."""
    items = []
    for job in jobs:
        unknown = set(job) - BATCH_JOB_FIELDS
        if unknown:
            raise ValueError(f"unknown fields for a job: {', '.join(sorted(unknown))}")
        body = job_body(
            job["type"],
            job.get("payload", {}),
            max_attempts=job.get("max_attempts"),
            run_at=job.get("run_at"),
            delay=job.get("delay"),
            flow=Flow(**{name: job[name] for name in FLOW_FIELDS if name in job}),
        )
        items.append({"idempotency_key": _key(job.get("key")), **body})
    if not 1 <= len(items) <= MAX_BATCH:
        raise ValueError(f"a batch is 1 to {MAX_BATCH} jobs")
    return Call("POST", "/v1/jobs/batch", _batch_results, json={"jobs": items})


# Submit's flow control and policy arguments: ``Flow``'s fields, sent under their names.
FLOW_FIELDS = tuple(Flow.__dataclass_fields__)

# The keys of a job of submit_many: submit's arguments.
BATCH_JOB_FIELDS = frozenset(
    {"type", "payload", "key", "max_attempts", "run_at", "delay", *FLOW_FIELDS}
)


def job_body(
    type: str,
    payload: dict[str, Any],
    *,
    max_attempts: int | None,
    run_at: datetime | None,
    delay: float | timedelta | None,
    flow: Flow | None = None,
) -> dict[str, Any]:
    """The submission's JSON; ``flow``'s fields only when given (the API fingerprints what
    it is sent, so a submission without them is the request it always was)."""
    body: dict[str, Any] = {"type": type, "payload": payload}
    if flow is not None:
        body.update(flow.given())
    if max_attempts is not None:
        body["max_attempts"] = max_attempts
    if run_at is not None and delay is not None:
        raise ValueError("give run_at or delay, not both")
    if run_at is not None:
        if run_at.utcoffset() is None:
            raise ValueError("run_at needs a time zone (datetime.now(UTC), not datetime.now())")
        body["run_at"] = run_at.isoformat()
    if delay is not None:
        body["delay_seconds"] = delay.total_seconds() if isinstance(delay, timedelta) else delay
    return body


def _key(key: str | None) -> str:
    if key is None:
        return uuid.uuid4().hex
    if not is_valid_idempotency_key(key):
        raise ValueError("key must be 1 to 200 visible ASCII characters")
    return key


def _batch_results(response: httpx.Response) -> list[Job | ApiError]:
    answer = _reader(BatchAnswer)(response)
    return [
        item.job
        if item.job is not None
        else ApiError.from_answer(item.status, json.dumps(item.error or {}).encode(), reason="")
        for item in answer.results
    ]


def wait_step(id: JobId, deadline: float) -> Call[Job]:
    """The next read of a ``wait``: ``GET /v1/jobs/{id}?wait=`` for what is left of the
    time (at most the API's 60 s), a plain read when nothing is left. Each try's own timeout
    covers the wait."""
    left = deadline - time.monotonic()
    if left <= 0:
        return get(id)
    seconds = min(left, MAX_WAIT_SECONDS)
    return Call(
        "GET", _job_path(id), _reader(Job), params={"wait": f"{seconds:.3f}"}, extra_time=seconds
    )


def waited(job: Job, deadline: float, id: JobId) -> Job | None:
    """The job when the wait is over; None to read again; ``TimeoutError`` past the time."""
    if job.finished:
        return job
    if time.monotonic() >= deadline:
        raise TimeoutError(f"job {id} is still {job.state}")
    return None


def get(id: JobId, *, steps: str | None = None) -> Call[Job]:
    """``GET /v1/jobs/{id}``; ``steps="values"``: its recorded steps with their values."""
    params = {} if steps is None else {"steps": steps}
    return Call("GET", _job_path(id), _reader(Job), params=params)


def signal(id: JobId, name: str, value: Any, *, key: str | None) -> Call[Signal]:
    """``POST /v1/jobs/{id}/signals/{name}``, the value as the JSON body. Every try carries the
    same key (a random one when none is given), so a retried signal is kept once."""
    if not 1 <= len(name) <= SIGNAL_NAME_MAX:
        raise ValueError(f"a signal's name is 1 to {SIGNAL_NAME_MAX} characters")
    return Call(
        "POST",
        f"{_job_path(id)}/signals/{quote(name, safe='')}",
        _reader(Signal),
        content=json.dumps(value, allow_nan=False).encode(),
        headers={"Idempotency-Key": _key(key), "Content-Type": "application/json"},
    )


def cancel(id: JobId) -> Call[Job]:
    # Not repeatable: a cancel the server did act on answers 409 not_cancellable when repeated.
    return Call("POST", f"{_job_path(id)}/cancel", _reader(Job), repeatable=False)


def page(
    state: str | None, type: str | None, page_size: int | None, cursor: str | None
) -> Call[JobPage]:
    """One page of ``GET /v1/jobs``, newest first."""
    wanted = {"state": state, "type": type, "cursor": cursor}
    params = {name: value for name, value in wanted.items() if value is not None}
    if page_size is not None:
        params["limit"] = str(page_size)
    return Call("GET", "/v1/jobs", _reader(JobPage), params=params)


def submit_workflow(
    workflow: Workflow, *, key: str | None, on_failure: OnFailure | str
) -> Call[WorkflowView]:
    """``POST /v1/workflows``: every try carries the same key, so the API makes one workflow
    of them all. The graph is checked by the API (``422 invalid_workflow``), not here."""
    body = workflow.body(on_failure)  # ValueError: not a policy
    return Call(
        "POST",
        "/v1/workflows",
        _reader(WorkflowView),
        json=body,
        headers={"Idempotency-Key": _key(key)},
    )


def get_workflow(id: WorkflowId) -> Call[WorkflowView]:
    return Call("GET", _workflow_path(id), _reader(WorkflowView))


def cancel_workflow(id: WorkflowId) -> Call[WorkflowView]:
    # Repeatable, unlike a job's cancel: cancelling a cancelled workflow answers its view again.
    return Call("POST", f"{_workflow_path(id)}/cancel", _reader(WorkflowView))


def _job_path(id: JobId) -> str:
    return f"/v1/jobs/{_uuid(id)}"


def _workflow_path(id: WorkflowId) -> str:
    return f"/v1/workflows/{_uuid(id)}"


def _uuid(id: uuid.UUID | str) -> uuid.UUID:
    # Parsed here, so that no other text can reach the URL's path.
    return id if isinstance(id, uuid.UUID) else uuid.UUID(id)


def _reader(model: type[Answer]) -> Callable[[httpx.Response], Answer]:
    def read(response: httpx.Response) -> Answer:
        try:
            return read_answer(model, json.loads(response.content))
        except ValueError:  # not JSON, or not the view (models.UnexpectedAnswer)
            raise ApiError(
                response.status_code,
                "unexpected_answer",
                f"the answer is not a {model.__name__} (is base_url the jobrelay API?)",
            ) from None

    return read


def transport_failure(error: httpx.TransportError) -> Failure | None:
    """The kind of failure a transport error is, or None when trying again cannot help (a
    malformed URL, a protocol error on our side)."""
    if isinstance(error, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout):
        return Failure.UNSENT
    if isinstance(error, httpx.NetworkError | httpx.TimeoutException | httpx.RemoteProtocolError):
        return Failure.AMBIGUOUS
    return None


@dataclass(frozen=True)
class Wait:
    seconds: float


class Attempts(Generic[T]):
    """The tries of one call: after each, ``settle`` gives the call's result, or how long to
    wait before the next try, or raises the error that ends the call."""

    def __init__(self, call: Call[T], policy: RetryPolicy) -> None:
        self.call = call
        self.policy = policy
        self.retries = 0

    def settle(self, outcome: Outcome) -> T | Wait:
        if isinstance(outcome, httpx.TransportError):
            error: Exception = outcome
            failure, retry_after = transport_failure(outcome), None
        elif outcome.is_success:
            return self.call.read(outcome)
        else:
            retry_after = parse_retry_after(outcome.headers.get("Retry-After"))
            error = ApiError.from_answer(
                outcome.status_code,
                outcome.content,
                reason=outcome.reason_phrase,
                retry_after=retry_after,
            )
            # A throttle's refusal is the type's answer, not the server's trouble: sent again
            # at once it is refused again; the caller decides when (``error.retry_after``).
            status = outcome.status_code
            failure = None if isinstance(error, ThrottledError) else status_failure(status)
        seconds = self.policy.wait(
            self.retries + 1, failure, repeatable=self.call.repeatable, retry_after=retry_after
        )
        if seconds is None:
            raise error
        self.retries += 1
        return Wait(seconds)
