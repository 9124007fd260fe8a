"""``Client``: the API from synchronous code."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, TypeVar, Unpack

import httpx

from jobrelay_client import _calls
from jobrelay_client._calls import Attempts, Call, ClientBase, JobId, Outcome, Wait, WorkflowId
from jobrelay_client.errors import ApiError
from jobrelay_client.flow import Flow, PolicyOptions
from jobrelay_client.models import Job, Signal, WorkflowView
from jobrelay_client.workflows import OnFailure, Workflow

T = TypeVar("T")


class Client(ClientBase[httpx.Client, httpx.BaseTransport]):
    """The jobrelay API at ``base_url`` as the client whose bearer token is ``token``.

    ``timeout`` bounds each try (seconds); ``retries`` is how many times a request is sent
    again after a connection error, a timeout, 429, 502, 503 or 504 (waiting as long as the
    server's ``Retry-After`` says, else a jittered exponential backoff); ``transport`` is an
    ``httpx.BaseTransport`` to send through instead of the network (``httpx.MockTransport``
    in tests). Use it as a context manager, or call ``close()``.
    """

    def _open(self, transport: httpx.BaseTransport | None, **options: Any) -> httpx.Client:
        return httpx.Client(transport=transport, **options)

    _sleep: Callable[[float], Any] = staticmethod(time.sleep)

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def submit(
        self,
        type: str,
        payload: dict[str, Any],
        *,
        key: str | None = None,
        max_attempts: int | None = None,
        run_at: datetime | None = None,
        delay: float | timedelta | None = None,
        priority: int | None = None,
        concurrency_key: str | None = None,
        unique_key: str | None = None,
        **policies: Unpack[PolicyOptions],
    ) -> Job:
        """Submits a job (``POST /v1/jobs``) and returns it: new (``queued``), or the one
        this ``key`` made before with the same type, payload and due time. Without a key a
        random one is used; every retry sends the same key, so a retried submission makes one
        job. ``run_at`` (an aware datetime) or ``delay`` (seconds or a timedelta): not run
        before then. ``priority`` (-100 to 100, higher first; by default the type's),
        ``concurrency_key`` and ``unique_key`` (docs/flow-control.md) are part of the request.
        A ``unique_key`` a live job of the type already holds makes no job: that job comes
        back with ``deduplicated`` true. The order and submission policies
        (docs/flow-control.md): ``sequence_key``; ``unique_for_seconds`` and ``on_duplicate``
        (``"return_existing"``, ``"reject"``); ``debounce_seconds`` and
        ``debounce_max_seconds`` (the key's queued job comes back with ``debounced`` true);
        ``throttle_key``. The key was used for another request: ``IdempotencyConflict``; a
        duplicate refused: ``DuplicateJobError`` (``job_id``); over the type's throttle:
        ``ThrottledError`` (``retry_after``; not retried); policies that do not go together:
        ``ApiError`` 422 ``invalid_policy``; another error answer: ``ApiError``; the API
        unreachable after the retries: the last ``httpx.TransportError``."""
        call = _calls.submit(
            type,
            payload,
            key=key,
            max_attempts=max_attempts,
            run_at=run_at,
            delay=delay,
            flow=Flow(priority, concurrency_key, unique_key, **policies),
        )
        return self._run(call)

    def submit_many(self, jobs: Iterable[Mapping[str, Any]]) -> list[Job | ApiError]:
        """Submits up to 1,000 jobs in one request (``POST /v1/jobs/batch``); each job is a
        mapping of ``type`` and ``submit``'s keyword arguments. One answer per job, in
        order: its ``Job``, or the ``ApiError`` it alone got (409, 422...). Retried as a
        whole, with the same keys."""
        return self._run(_calls.submit_many(jobs))

    def wait(self, id: JobId, timeout: float) -> Job:
        """The job once it has finished (succeeded, quarantined or cancelled), woken by the
        API as it finishes (``?wait=``); ``TimeoutError`` if it has not after ``timeout``
        seconds."""
        deadline = time.monotonic() + timeout
        while True:
            job = self._run(_calls.wait_step(id, deadline))
            if (done := _calls.waited(job, deadline, id)) is not None:
                return done

    def get(self, id: JobId, *, steps: str | None = None) -> Job:
        """The job now (``GET /v1/jobs/{id}``) with its recorded ``steps`` (their values too
        with ``steps="values"``); another client's or no job: ApiError 404."""
        return self._run(_calls.get(id, steps=steps))

    def signal(
        self, id: JobId, name: str, value: Any, *, idempotency_key: str | None = None
    ) -> Signal:
        """Sends the job a signal (``POST /v1/jobs/{id}/signals/{name}``): kept for the
        job's ``context.wait_for_signal(name)``, which returns ``value`` (any JSON value,
        at most 64 KiB); a job asleep waiting for it is woken. Every retry sends the same
        ``idempotency_key`` (a random one when none is given), so the job keeps one signal;
        a key used before for this job answers ``status`` ``repeated``. A job that has
        finished: ``JobFinished`` (409); another client's or none: ApiError 404."""
        return self._run(_calls.signal(id, name, value, key=idempotency_key))

    def cancel(self, id: JobId) -> Job:
        """Cancels a queued or retrying job and returns it (``cancelled``); a running job is
        returned still ``running`` and ends ``cancelled`` once its consumer stopped the handler
        (202; asked again, the same answer); a job that has ended: ApiError 409
        ``not_cancellable``. Sent again only when the API surely did not act
        on it (refused connection, 429, 503)."""
        return self._run(_calls.cancel(id))

    def jobs(
        self, state: str | None = None, type: str | None = None, *, page_size: int | None = None
    ) -> Iterator[Job]:
        """Every job of this client, newest first, optionally of one state and one type,
        fetched a page at a time (``page_size``, 1 to 500; the API's default is 50)."""
        cursor: str | None = None
        while True:
            page = self._run(_calls.page(state, type, page_size, cursor))
            yield from page.items
            if (cursor := page.next_cursor) is None:
                return

    def submit_workflow(
        self,
        workflow: Workflow,
        *,
        key: str | None = None,
        on_failure: OnFailure | str = OnFailure.CANCEL_DEPENDENTS,
    ) -> WorkflowView:
        """Submits the jobs of ``workflow`` as one graph (``POST /v1/workflows``) and returns
        its view: new, or the one this ``key`` made before with the same jobs and policy.
        Without a key a random one is used; every retry sends the same key, so a retried
        submission makes one workflow. ``on_failure``: ``cancel_dependents`` (a quarantined
        job cancels every job that depends on it) or ``continue`` (they stay waiting).
        A graph the API refuses: ``ApiError`` 422 ``invalid_workflow``; the key used for
        another workflow: ``IdempotencyConflict``."""
        return self._run(_calls.submit_workflow(workflow, key=key, on_failure=on_failure))

    def get_workflow(self, id: WorkflowId) -> WorkflowView:
        """The workflow now (``GET /v1/workflows/{id}``); another client's or none: 404."""
        return self._run(_calls.get_workflow(id))

    def cancel_workflow(self, id: WorkflowId) -> WorkflowView:
        """Cancels every job of the workflow that has not finished (a running one is asked to
        stop, as ``cancel`` asks) and returns the view; asked again, the same answer."""
        return self._run(_calls.cancel_workflow(id))

    def _run(self, call: Call[T]) -> T:
        attempts = Attempts(call, self._policy)
        while True:
            settled = attempts.settle(self._send(call))
            if not isinstance(settled, Wait):
                return settled
            self._sleep(settled.seconds)

    def _send(self, call: Call[Any]) -> Outcome:
        try:
            return self._http.send(call.request(self._http))
        except httpx.TransportError as error:
            return error
