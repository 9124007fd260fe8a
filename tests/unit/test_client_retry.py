"""The Python client without a server: its retry policy (which failures are tried again, how
long it waits, what Retry-After means), and both clients over ``httpx.MockTransport``, with
their sleep replaced by a recorder."""

from __future__ import annotations

import inspect
import json
import random
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import httpx
import pytest

import jobrelay
from jobrelay import ApiError, AsyncClient, Client, Job
from jobrelay.client import DuplicateJobError, IdempotencyConflict, ThrottledError
from jobrelay_client._retry import Failure, RetryPolicy, parse_retry_after, status_failure

BASE = "http://jobrelay.test"
TOKEN = "jr_secret-token-value-1234567890"
NOW = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)

Handler = Callable[[httpx.Request], httpx.Response]


# --- the policy ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "seconds"),
    [("1", 1.0), ("0", 0.0), (" 120 ", 120.0), ("86400", 86400.0)],
)
def test_retry_after_in_seconds_is_read_as_seconds(header: str, seconds: float) -> None:
    assert parse_retry_after(header, now=NOW) == seconds


def test_retry_after_as_an_http_date_is_the_time_until_then() -> None:
    assert parse_retry_after("Wed, 01 Jan 2025 12:00:30 GMT", now=NOW) == 30.0
    later = format_datetime(NOW + timedelta(minutes=2), usegmt=True)
    assert parse_retry_after(later, now=NOW) == 120.0


def test_retry_after_as_a_date_in_the_past_means_now() -> None:
    assert parse_retry_after("Tue, 31 Dec 2024 23:59:59 GMT", now=NOW) == 0.0


@pytest.mark.parametrize("header", [None, "", "soon", "-5", "1.5", "1e3", "٣", "Wed, 99 Foo"])
def test_a_missing_or_unreadable_retry_after_is_none(header: str | None) -> None:
    assert parse_retry_after(header, now=NOW) is None


def test_backoff_grows_with_jitter_between_half_and_the_whole_ceiling_up_to_the_cap() -> None:
    policy = RetryPolicy()
    rng = random.Random(7)
    for retry in range(1, 10):
        ceiling = min(policy.backoff_max, policy.backoff_base * 2 ** (retry - 1))
        waits = [policy.backoff(retry, rng) for _ in range(200)]
        assert all(ceiling / 2 <= wait <= ceiling for wait in waits), retry
        assert max(waits) - min(waits) > ceiling / 4  # jittered, not one fixed value
    assert policy.backoff(1, rng) <= 0.5
    assert policy.backoff(30, rng) <= 8.0


@pytest.mark.parametrize("status", [429, 502, 503, 504])
def test_overload_and_gateway_statuses_are_retried(status: int) -> None:
    assert status_failure(status) is not None
    assert RetryPolicy().wait(1, status_failure(status), repeatable=True) is not None


@pytest.mark.parametrize("status", [200, 400, 401, 403, 404, 409, 413, 415, 422, 500, 501])
def test_other_statuses_are_final(status: int) -> None:
    assert status_failure(status) is None
    assert RetryPolicy().wait(1, None, repeatable=True) is None


def test_only_the_unsent_failures_are_retried_for_a_request_that_is_not_repeatable() -> None:
    policy = RetryPolicy()
    assert status_failure(429) is status_failure(503) is Failure.UNSENT
    assert status_failure(502) is status_failure(504) is Failure.AMBIGUOUS
    assert policy.wait(1, Failure.UNSENT, repeatable=False) is not None
    assert policy.wait(1, Failure.AMBIGUOUS, repeatable=False) is None
    assert policy.wait(1, Failure.AMBIGUOUS, repeatable=True) is not None


def test_retries_are_bounded() -> None:
    policy = RetryPolicy(retries=3)
    assert policy.wait(3, Failure.UNSENT, repeatable=True) is not None
    assert policy.wait(4, Failure.UNSENT, repeatable=True) is None
    assert RetryPolicy(retries=0).wait(1, Failure.UNSENT, repeatable=True) is None
    with pytest.raises(ValueError):
        RetryPolicy(retries=-1)


def test_retry_after_replaces_the_backoff_and_is_capped_at_a_minute() -> None:
    policy = RetryPolicy()
    assert policy.wait(5, Failure.UNSENT, repeatable=True, retry_after=1.0) == 1.0
    assert policy.wait(1, Failure.UNSENT, repeatable=True, retry_after=3600.0) == 60.0
    assert policy.wait(6, Failure.UNSENT, repeatable=True, retry_after=1.0) is None


def test_importing_jobrelay_does_not_import_httpx() -> None:
    code = (
        "import sys, jobrelay\n"
        "assert 'httpx' not in sys.modules, 'httpx imported'\n"
        "assert 'jobrelay.client' not in sys.modules\n"
        "jobrelay.Client\n"
        "assert 'httpx' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_the_client_is_exported_from_the_top() -> None:
    assert {"Client", "AsyncClient", "ApiError", "IdempotencyConflict", "Job"} <= set(dir(jobrelay))
    assert jobrelay.Client is Client and jobrelay.Job is Job
    assert jobrelay.IdempotencyConflict is IdempotencyConflict
    assert issubclass(IdempotencyConflict, jobrelay.ApiError)
    with pytest.raises(AttributeError):
        jobrelay.NoSuchThing  # noqa: B018


# --- the clients over a mock transport ----------------------------------------------------------


def job_view(key: str, *, state: str = "queued", job_id: uuid.UUID | None = None) -> dict[str, Any]:
    job_id = job_id or uuid.uuid5(uuid.NAMESPACE_URL, key)
    at = "2025-01-01T12:00:00.123456Z"
    return {
        "id": str(job_id),
        "type": "catalog.export",
        "state": state,
        "idempotency_key": key,
        "payload": {"course": "JavaScript"},
        "attempts": 0,
        "max_attempts": 3,
        "created_at": at,
        "updated_at": at,
        "available_at": at,
        "finished_at": None,
        "lease_until": None,
        "last_error_code": None,
        "last_error": None,
        "result": None,
        "links": {"self": f"/v1/jobs/{job_id}", "events": f"/v1/jobs/{job_id}/events"},
        "a_field_of_a_newer_api": True,
    }


def accepted(request: httpx.Request) -> httpx.Response:
    return httpx.Response(202, json=job_view(request.headers["Idempotency-Key"]))


def problem(status: int, code: str, retry_after: str | None = None, **extra: Any) -> httpx.Response:
    headers = {"Content-Type": "application/problem+json"}
    if retry_after is not None:
        headers["Retry-After"] = retry_after
    body = {"type": f"https://jobrelay.dev/problems/{code}", "title": code, "status": status}
    return httpx.Response(status, headers=headers, json=body | {"code": code, **extra})


class Server:
    """Answers requests from a script, one handler a request (the last one repeats), and
    keeps what it was sent."""

    def __init__(self, *script: Handler | httpx.Response) -> None:
        self.script = list(script)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        step = self.script[min(len(self.requests), len(self.script)) - 1]
        return step if isinstance(step, httpx.Response) else step(request)

    def sent_keys(self) -> list[str]:
        return [request.headers["Idempotency-Key"] for request in self.requests]


def refuse(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("[Errno 111] Connection refused", request=request)


def time_out(request: httpx.Request) -> httpx.Response:
    raise httpx.ReadTimeout("timed out", request=request)


class Api:
    """One client, sync or async, over a ``Server``, called the same way from a test; its
    sleep records the waits instead of waiting."""

    def __init__(self, kind: str, server: Server, monkeypatch: pytest.MonkeyPatch, **options: Any):
        self.server = server
        self.sleeps: list[float] = []
        transport = httpx.MockTransport(server)
        self.client: Client | AsyncClient
        if kind == "sync":
            self.client = Client(BASE, TOKEN, transport=transport, **options)
            monkeypatch.setattr(self.client, "_sleep", self.sleeps.append)
        else:
            self.client = AsyncClient(BASE, TOKEN, transport=transport, **options)

            async def sleep(seconds: float) -> None:
                self.sleeps.append(seconds)

            monkeypatch.setattr(self.client, "_sleep", sleep)

    async def __call__(self, method: str, *args: Any, **kwargs: Any) -> Any:
        result = getattr(self.client, method)(*args, **kwargs)
        return await result if inspect.isawaitable(result) else result

    async def jobs(self, **kwargs: Any) -> list[Job]:
        found = self.client.jobs(**kwargs)
        if isinstance(found, AsyncIterator):
            return [job async for job in found]
        return list(found)


@pytest.fixture(params=["sync", "async"])
def make_api(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Api]:
    def make(*script: Handler | httpx.Response, **options: Any) -> Api:
        return Api(request.param, Server(*script), monkeypatch, **options)

    return make


async def test_a_503_with_retry_after_is_sent_again_with_the_same_key_after_that_wait(
    make_api: Callable[..., Api],
) -> None:
    api = make_api(problem(503, "overloaded", retry_after="1"), accepted)

    job = await api("submit", "catalog.export", {"course": "JavaScript"}, key="export-js")

    assert api.server.sent_keys() == ["export-js", "export-js"]
    assert api.sleeps == [1.0]
    assert isinstance(job, Job) and job.state == "queued" and job.idempotency_key == "export-js"
    assert isinstance(job.id, uuid.UUID) and job.created_at.tzinfo is not None
    sent = json.loads(api.server.requests[-1].content)
    assert sent == {"type": "catalog.export", "payload": {"course": "JavaScript"}}
    assert api.server.requests[-1].headers["Authorization"] == f"Bearer {TOKEN}"


async def test_a_429_waits_as_long_as_its_retry_after_says_in_seconds_or_as_a_date(
    make_api: Callable[..., Api],
) -> None:
    soon = format_datetime(datetime.now(UTC) + timedelta(seconds=3), usegmt=True)
    api = make_api(
        problem(429, "rate_limited", retry_after="2"),
        problem(429, "rate_limited", retry_after=soon),
        accepted,
    )

    job = await api("submit", "catalog.export", {"course": "JavaScript"})

    assert len(api.server.requests) == 3 and len(set(api.server.sent_keys())) == 1
    assert api.sleeps[0] == 2.0
    assert 1.0 <= api.sleeps[1] <= 3.0  # the date has whole seconds
    assert job.idempotency_key == api.server.sent_keys()[0]


async def test_without_a_key_each_submission_has_its_own_random_key(
    make_api: Callable[..., Api],
) -> None:
    api = make_api(accepted)
    first = await api("submit", "catalog.export", {})
    second = await api("submit", "catalog.export", {}, max_attempts=5)

    assert first.idempotency_key != second.idempotency_key
    assert all(len(key) == 32 for key in api.server.sent_keys())
    assert json.loads(api.server.requests[1].content)["max_attempts"] == 5


async def test_connection_errors_and_timeouts_are_retried_with_backoff_and_the_same_key(
    make_api: Callable[..., Api],
) -> None:
    api = make_api(refuse, time_out, problem(502, "http_502"), accepted)

    job = await api("submit", "catalog.export", {"course": "JavaScript"}, key="k1")

    assert api.server.sent_keys() == ["k1"] * 4
    assert job.idempotency_key == "k1"
    ceilings = [0.5, 1.0, 2.0]
    assert all(c / 2 <= wait <= c for wait, c in zip(api.sleeps, ceilings, strict=True))


async def test_a_conflict_raises_at_once_with_its_code_and_is_not_retried(
    make_api: Callable[..., Api],
) -> None:
    holder = uuid.uuid4()
    api = make_api(
        problem(
            409,
            "idempotency_conflict",
            detail="the key was used for another type or payload",
            job_id=str(holder),
        )
    )

    with pytest.raises(ApiError) as raised:
        await api("submit", "catalog.export", {"course": "Markdown"}, key="export-js")

    error = raised.value
    assert (error.status, error.code) == (409, "idempotency_conflict")
    assert error.detail == "the key was used for another type or payload"
    assert isinstance(error, IdempotencyConflict)
    assert error.job_id == holder and error.retry_after is None
    assert len(api.server.requests) == 1 and api.sleeps == []


async def test_a_throttle_raises_at_once_with_its_retry_after_and_is_not_retried(
    make_api: Callable[..., Api],
) -> None:
    api = make_api(problem(429, "throttled", retry_after="7", detail="the throttle is 5/m"))

    with pytest.raises(ThrottledError) as raised:
        await api("submit", "mail.send", {}, throttle_key="tenant-1")

    assert (raised.value.status, raised.value.retry_after) == (429, 7.0)
    assert len(api.server.requests) == 1 and api.sleeps == []
    assert json.loads(api.server.requests[0].content)["throttle_key"] == "tenant-1"


async def test_a_refused_duplicate_raises_duplicate_job_error_naming_the_job(
    make_api: Callable[..., Api],
) -> None:
    holder = uuid.uuid4()
    api = make_api(problem(409, "duplicate_job", job_id=str(holder)))

    with pytest.raises(DuplicateJobError) as raised:
        await api("submit", "t", {}, unique_key="u", on_duplicate="reject")

    assert raised.value.job_id == holder and len(api.server.requests) == 1


async def test_the_policies_are_sent_under_the_apis_names_and_only_when_given(
    make_api: Callable[..., Api],
) -> None:
    def debounced(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/batch"):
            jobs = json.loads(request.content)["jobs"]
            views = [job_view(job["idempotency_key"]) for job in jobs]
            return httpx.Response(
                200, json={"results": [{"status": 202, "job": view} for view in views]}
            )
        view = job_view(request.headers["Idempotency-Key"])
        return httpx.Response(200, json=view | {"debounced": True, "sequence_key": "s"})

    api = make_api(debounced)
    policies = {
        "sequence_key": "s",
        "unique_for_seconds": 60,
        "on_duplicate": "return_existing",
        "debounce_seconds": 5,
        "debounce_max_seconds": 50.5,
        "throttle_key": "t",
    }
    job = await api("submit", "t", {}, unique_key="u", **policies)
    await api("submit_many", [{"type": "t", "unique_key": "u", **policies}, {"type": "t"}])

    assert job.debounced and job.sequence_key == "s" and not job.deduplicated
    single, batch = (json.loads(request.content) for request in api.server.requests)
    assert single == {"type": "t", "payload": {}, "unique_key": "u", **policies}
    first, plain = batch["jobs"]
    assert {name: first[name] for name in policies} == policies
    assert set(plain) == {"idempotency_key", "type", "payload"}


def test_a_policy_out_of_range_is_refused_before_anything_is_sent() -> None:
    with Client(BASE, TOKEN, transport=httpx.MockTransport(Server(accepted))) as client:
        with pytest.raises(ValueError, match="on_duplicate"):
            client.submit("t", {}, unique_key="u", on_duplicate="ignore")
        with pytest.raises(ValueError, match="debounce_seconds"):
            client.submit("t", {}, unique_key="u", debounce_seconds=0)


@pytest.mark.parametrize(
    ("status", "code"),
    [(400, "idempotency_key_invalid"), (401, "unauthorized"), (413, "payload_too_large"),
     (422, "unknown_job_type"), (500, "internal_error")],
)  # fmt: skip
async def test_other_error_answers_are_raised_without_a_retry(
    make_api: Callable[..., Api], status: int, code: str
) -> None:
    api = make_api(problem(status, code, retry_after="1"))

    with pytest.raises(ApiError) as raised:
        await api("submit", "catalog.export", {})

    assert (raised.value.status, raised.value.code) == (status, code)
    assert len(api.server.requests) == 1 and api.sleeps == []


async def test_retries_are_bounded_and_the_last_error_is_raised(
    make_api: Callable[..., Api],
) -> None:
    api = make_api(problem(503, "overloaded", retry_after="1"), retries=3)
    with pytest.raises(ApiError) as raised:
        await api("submit", "catalog.export", {}, key="k")
    assert raised.value.code == "overloaded" and raised.value.retry_after == 1.0
    assert api.server.sent_keys() == ["k"] * 4 and api.sleeps == [1.0] * 3

    down = make_api(refuse, retries=2)
    with pytest.raises(httpx.ConnectError):
        await down("submit", "catalog.export", {}, key="k")
    assert len(down.server.requests) == 3 and len(down.sleeps) == 2


async def test_a_retry_after_of_an_hour_waits_a_minute(make_api: Callable[..., Api]) -> None:
    api = make_api(problem(503, "database_unavailable", retry_after="3600"), accepted)
    await api("submit", "catalog.export", {})
    assert api.sleeps == [60.0]


async def test_the_token_is_in_no_error_and_no_repr(make_api: Callable[..., Api]) -> None:
    errors: list[BaseException] = []
    for answer in (problem(401, "unauthorized"), problem(503, "overloaded"), refuse):
        api = make_api(answer, retries=1)
        with pytest.raises(Exception) as raised:  # any error: checked below
            await api("submit", "catalog.export", {})
        errors.append(raised.value)
        assert TOKEN not in repr(api.client) and BASE in repr(api.client)

    assert [type(error) for error in errors] == [ApiError, ApiError, httpx.ConnectError]
    for error in errors:
        assert TOKEN not in str(error) and TOKEN not in repr(error)
        assert "secret" not in str(error)


async def test_an_answer_that_is_not_a_problem_still_gives_a_status_and_a_code(
    make_api: Callable[..., Api],
) -> None:
    page = httpx.Response(502, text="<html>Bad Gateway</html>")
    api = make_api(page, retries=1)
    with pytest.raises(ApiError) as raised:
        await api("get", uuid.uuid4())
    assert (raised.value.status, raised.value.code) == (502, "http_502")
    assert raised.value.detail == "Bad Gateway"
    assert len(api.server.requests) == 2

    wrong = make_api(httpx.Response(200, text="<html>a web page</html>"))
    with pytest.raises(ApiError) as raised:
        await wrong("get", uuid.uuid4())
    assert raised.value.code == "unexpected_answer"


async def test_get_reads_the_job_and_is_retried_like_a_submission(
    make_api: Callable[..., Api],
) -> None:
    job_id = uuid.uuid4()
    api = make_api(
        time_out,
        problem(504, "http_504"),
        httpx.Response(200, json=job_view("k", state="succeeded", job_id=job_id) | {"result": {}}),
    )

    job = await api("get", str(job_id))

    assert job.id == job_id and job.state == "succeeded" and job.result == {}
    assert [request.url.path for request in api.server.requests] == [f"/v1/jobs/{job_id}"] * 3
    assert all(request.method == "GET" for request in api.server.requests)


async def test_a_job_id_that_is_not_a_uuid_never_reaches_the_url(
    make_api: Callable[..., Api],
) -> None:
    api = make_api(accepted)
    with pytest.raises(ValueError):
        await api("get", "../admin/stats")
    with pytest.raises(ValueError):
        await api("submit", "catalog.export", {}, key="not visible ascii ✓")
    assert api.server.requests == []


async def test_cancel_is_sent_again_only_where_the_api_surely_did_not_act(
    make_api: Callable[..., Api],
) -> None:
    job_id = uuid.uuid4()
    cancelled = httpx.Response(200, json=job_view("k", state="cancelled", job_id=job_id))
    api = make_api(refuse, problem(503, "overloaded"), problem(429, "rate_limited"), cancelled)
    job = await api("cancel", job_id)
    assert job.state == "cancelled"
    assert [r.url.path for r in api.server.requests] == [f"/v1/jobs/{job_id}/cancel"] * 4

    for ambiguous in (time_out, problem(502, "http_502"), problem(504, "http_504")):
        once = make_api(ambiguous, cancelled)
        with pytest.raises((ApiError, httpx.ReadTimeout)):
            await once("cancel", job_id)
        assert len(once.server.requests) == 1


async def test_jobs_follows_every_cursor_with_the_filters_on_each_page(
    make_api: Callable[..., Api],
) -> None:
    views = [job_view(f"key-{n}") for n in range(5)]

    def pages(request: httpx.Request) -> httpx.Response:
        start = int(request.url.params.get("cursor", "0"))
        end = start + int(request.url.params["limit"])
        cursor = str(end) if end < len(views) else None
        return httpx.Response(200, json={"items": views[start:end], "next_cursor": cursor})

    api = make_api(problem(503, "overloaded", retry_after="0"), pages)

    found = await api.jobs(state="queued", type="catalog.export", page_size=2)

    assert [job.idempotency_key for job in found] == [f"key-{n}" for n in range(5)]
    params = [dict(request.url.params) for request in api.server.requests]
    assert params == [
        {"state": "queued", "type": "catalog.export", "limit": "2"},
        {"state": "queued", "type": "catalog.export", "limit": "2"},
        {"state": "queued", "type": "catalog.export", "limit": "2", "cursor": "2"},
        {"state": "queued", "type": "catalog.export", "limit": "2", "cursor": "4"},
    ]
    assert api.sleeps == [0.0]


async def test_the_clients_close_as_context_managers() -> None:
    server = Server(accepted)
    with Client(BASE, TOKEN, transport=httpx.MockTransport(server)) as client:
        client.submit("catalog.export", {})
    assert client._http.is_closed
    async with AsyncClient(BASE, TOKEN, transport=httpx.MockTransport(server)) as aclient:
        await aclient.submit("catalog.export", {})
    assert aclient._http.is_closed
    with pytest.raises(ValueError, match="token"):
        Client(BASE, "")
