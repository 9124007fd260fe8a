"""``jobrelay.testing``: test your handlers, and the code that enqueues jobs, without servers
(docs/testing-handlers.md).

- ``make_context(...)``: a ``JobContext`` for calling a handler yourself, which keeps the
  progress the handler reports (``context.reports``).
- ``run_job(charge, payload)`` / ``await run_job_async(...)``: run a handler as a consumer
  would, and get its ``Verdict``: the payload checked against the type's model, the type's
  timeout enforced, a plain ``def`` run in a thread, the result checked, and the outcome decided
  by the consumer's own code (``consumer/handler_call.py``, ``core/jobs.py::decide_outcome``):
  succeeded, retrying after a delay, or quarantined, with the error code and message the job
  would show.
- ``Recorder``: an in-memory stand-in for ``jobrelay.configure``'s client and for
  ``jobrelay.enqueue`` / ``enqueue_async``. ``with recorder.install():`` every enqueue (a
  definition's, with or without ``connection=``, and ``jobrelay.enqueue(...)``) is recorded and
  answered as jobrelay would: a fresh job, the same job again for the same key and request,
  ``jobrelay.IdempotencyConflict`` for another request under a used key.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import tempfile
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple, overload

from pydantic import BaseModel

import jobrelay
from jobrelay.consumer.handler_call import call_handler, handler_logger, refusal_failure
from jobrelay.core.errors import InvalidPayload, PermanentError
from jobrelay.core.failures import Failure
from jobrelay.core.fingerprint import canonical_json
from jobrelay.core.ids import new_id
from jobrelay.core.jobs import (
    Flow,
    JobRequest,
    Outcome,
    Quarantine,
    RetryLater,
    Succeeded,
    decide_outcome,
)
from jobrelay.core.jsonvalues import unstorable_json
from jobrelay.core.limits import DEFAULT_MAX_ATTEMPTS
from jobrelay.core.masking import Masker
from jobrelay.core.registry import (
    EnqueueRequest,
    JobContext,
    JobDefinition,
    JobType,
    Registry,
    configured_enqueuer,
    install_enqueuer,
    override_enqueuer,
    payload_document,
)
from jobrelay.core.retry import RetryPolicy
from jobrelay.core.states import JobState
from jobrelay.db.accept import Submission

__all__ = [
    "AsyncRecorder",
    "Progress",
    "RecordedJob",
    "Recorder",
    "RecordingContext",
    "Verdict",
    "make_context",
    "recording",
    "run_job",
    "run_job_async",
]

Target = Registry | JobDefinition[Any, Any, Any]


# --- a context -------------------------------------------------------------------------------


class Progress(NamedTuple):
    """One ``context.progress(fraction, message)`` the handler reported."""

    fraction: float
    message: str | None


@dataclass(frozen=True)
class RecordingContext(JobContext):
    """A ``JobContext`` that keeps every progress report, in order, in ``reports``."""

    reports: list[Progress] = field(default_factory=list, repr=False, compare=False)


def make_context(
    job_type: str | JobDefinition[Any, Any, Any] = "test.job",
    *,
    attempt: int = 1,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    job_id: uuid.UUID | None = None,
    results_dir: Path | None = None,
    parent_results: Mapping[str, Any] | None = None,
) -> RecordingContext:
    """The context a consumer would give attempt ``attempt`` of ``max_attempts`` of a job of
    ``job_type`` (a name or a definition): a fresh job id unless given, a new temporary
    folder as ``results_dir`` unless given (removed when the test process exits; pass
    pytest's ``tmp_path`` to keep it), the ``jobrelay.handler`` logger, and in a workflow its
    parents' ``parent_results`` by ref. Its progress reports are kept in ``context.reports``.
    ``ValueError`` for an attempt no consumer runs (below 1, or past ``max_attempts``)."""
    name = job_type.name if isinstance(job_type, JobDefinition) else job_type
    _check_attempt(attempt, max_attempts)
    job_id = job_id or uuid.uuid4()
    reports: list[Progress] = []
    return RecordingContext(
        job_id=job_id,
        job_type=name,
        attempt=attempt,
        max_attempts=max_attempts,
        results_dir=results_dir or _temporary_results_dir(),
        logger=handler_logger(job_id, name, attempt),
        parent_results=dict(parent_results or {}),
        progress_sink=lambda fraction, message: reports.append(Progress(fraction, message)),
        reports=reports,
    )


def _check_attempt(attempt: int, max_attempts: int) -> None:
    for option, value in (("attempt", attempt), ("max_attempts", max_attempts)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{option} is a whole number of at least 1, not {value!r}")
    if attempt > max_attempts:
        raise ValueError(
            f"attempt {attempt} of {max_attempts}: a consumer never runs an attempt past the limit"
        )


# The folder the contexts' results_dirs are made in, one a context: removed at the process's
# exit (a TemporaryDirectory's finalizer), not one folder left in /tmp per run_job.
_results_root: tempfile.TemporaryDirectory[str] | None = None


def _temporary_results_dir() -> Path:
    global _results_root
    if _results_root is None:
        _results_root = tempfile.TemporaryDirectory(prefix="jobrelay-test-")
    return Path(tempfile.mkdtemp(dir=_results_root.name))


# --- a handler's verdict ----------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """What one attempt came to, as the consumer decides and stores it.

    ``outcome`` is the consumer's own value (``core/jobs.py``): ``Succeeded``, ``RetryLater`` or
    ``Quarantine``. ``state`` is the job's state after it (``succeeded``, ``retrying``,
    ``quarantined``); ``error_code`` and ``message`` what ``GET /v1/jobs/{id}`` would show as
    ``last_error_code`` and ``last_error`` (``invalid_payload``, ``timeout``, ``invalid_result``,
    ``unexpected_error``, ``attempts_exhausted``, or the handler's own code); ``retry_delay`` the
    seconds before the next attempt; ``failure`` what operators see (class, message, traceback);
    ``exception`` the exception itself (None when the handler did not raise)."""

    outcome: Outcome
    context: JobContext
    exception: BaseException | None = None
    seconds: float = 0.0

    @property
    def state(self) -> JobState:
        match self.outcome:
            case Succeeded():
                return JobState.SUCCEEDED
            case RetryLater():
                return JobState.RETRYING
        return JobState.QUARANTINED

    @property
    def succeeded(self) -> bool:
        return isinstance(self.outcome, Succeeded)

    @property
    def retrying(self) -> bool:
        return isinstance(self.outcome, RetryLater)

    @property
    def quarantined(self) -> bool:
        return isinstance(self.outcome, Quarantine)

    @property
    def result(self) -> dict[str, Any] | None:
        return self.outcome.result if isinstance(self.outcome, Succeeded) else None

    @property
    def error_code(self) -> str | None:
        match self.outcome:
            case RetryLater(error_code=code) | Quarantine(reason_code=code):
                return code
        return None

    @property
    def message(self) -> str | None:
        match self.outcome:
            case RetryLater(error=message) | Quarantine(error=message):
                return message
        return None

    @property
    def retry_delay(self) -> float | None:
        return self.outcome.delay_seconds if isinstance(self.outcome, RetryLater) else None

    @property
    def failure(self) -> Failure | None:
        match self.outcome:
            case RetryLater(failure=failure) | Quarantine(failure=failure):
                return failure
        return None

    @property
    def progress(self) -> list[Progress]:
        """The progress the handler reported, in order (kept by a ``make_context`` context)."""
        return list(getattr(self.context, "reports", ()))


@overload
def run_job(
    target: JobDefinition[Any, Any, Any],
    payload: BaseModel | dict[str, Any],
    /,
    *,
    attempt: int | None = None,
    max_attempts: int | None = None,
    context: JobContext | None = None,
    policy: RetryPolicy | None = None,
    rng: random.Random | None = None,
) -> Verdict: ...


@overload
def run_job(
    target: Registry,
    job_type: str,
    payload: BaseModel | dict[str, Any],
    /,
    *,
    attempt: int | None = None,
    max_attempts: int | None = None,
    context: JobContext | None = None,
    policy: RetryPolicy | None = None,
    rng: random.Random | None = None,
) -> Verdict: ...


def run_job(
    target: Target,
    *args: Any,
    attempt: int | None = None,
    max_attempts: int | None = None,
    context: JobContext | None = None,
    policy: RetryPolicy | None = None,
    rng: random.Random | None = None,
) -> Verdict:
    """Run one attempt of a job as a consumer would and return its ``Verdict``:
    ``run_job(charge, payload)`` for a definition, ``run_job(registry, "shop.charge", payload)``
    for a type of a registry. For synchronous tests; in async code ``await run_job_async``.

    ``payload`` (a model or a dict) goes through JSON, as a stored payload does, and is checked
    against the type's model: one that does not match is quarantined with ``invalid_payload``,
    the handler not run. ``attempt`` (by default 1) of ``max_attempts`` (by default the type's,
    else 3) decides between a retry and ``attempts_exhausted``; ``context``: the one to run in
    (by default ``make_context``'s; its attempt and limit count when the others are not given).
    ``policy``: the retry policy (by default the consumer's defaults, ``JOBRELAY_RETRY_*``);
    ``rng``: its jitter's random numbers."""
    _outside_a_loop("run_job", "run_job_async")
    return asyncio.run(
        _run(target, args, attempt, max_attempts, context, policy or RetryPolicy(), rng)
    )


@overload
async def run_job_async(
    target: JobDefinition[Any, Any, Any],
    payload: BaseModel | dict[str, Any],
    /,
    *,
    attempt: int | None = None,
    max_attempts: int | None = None,
    context: JobContext | None = None,
    policy: RetryPolicy | None = None,
    rng: random.Random | None = None,
) -> Verdict: ...


@overload
async def run_job_async(
    target: Registry,
    job_type: str,
    payload: BaseModel | dict[str, Any],
    /,
    *,
    attempt: int | None = None,
    max_attempts: int | None = None,
    context: JobContext | None = None,
    policy: RetryPolicy | None = None,
    rng: random.Random | None = None,
) -> Verdict: ...


async def run_job_async(
    target: Target,
    *args: Any,
    attempt: int | None = None,
    max_attempts: int | None = None,
    context: JobContext | None = None,
    policy: RetryPolicy | None = None,
    rng: random.Random | None = None,
) -> Verdict:
    """``run_job`` in a running event loop."""
    return await _run(target, args, attempt, max_attempts, context, policy or RetryPolicy(), rng)


async def _run(
    target: Target,
    args: tuple[Any, ...],
    attempt: int | None,
    max_attempts: int | None,
    context: JobContext | None,
    policy: RetryPolicy,
    rng: random.Random | None,
) -> Verdict:
    """Decide, as ``consumer/worker.py::Worker._attempt`` does: resolve the type and the
    payload (refused: quarantined), call the handler, decide the outcome."""
    registry, name, payload = _target(target, args)
    job_type = registry.get(name)  # UnknownJobType: a test's mistake, not a verdict
    context = _context(job_type, registry, context, attempt, max_attempts)
    mask = Masker()
    try:
        if job_type.handler is None:
            raise PermanentError(f"no handler for job type {name[:100]!r}", code="no_handler")
        model = registry.validate_payload(name, _as_stored(payload))
    except (InvalidPayload, PermanentError) as refused:
        failure = refusal_failure(refused, mask)
        return Verdict(Quarantine(refused.code, failure.message, failure), context)
    run = await call_handler(job_type, context, model)
    outcome = decide_outcome(
        attempt=context.attempt,
        max_attempts=context.max_attempts,
        result=run.result,
        error=run.error,
        policy=policy,
        rng=rng,
        mask=mask,
    )
    return Verdict(outcome, context, run.error, run.seconds)


def _target(target: Target, args: tuple[Any, ...]) -> tuple[Registry, str, Any]:
    if isinstance(target, JobDefinition):
        if len(args) != 1:
            raise TypeError("run_job(definition, payload): one payload after the definition")
        return target.registry, target.name, args[0]
    if isinstance(target, Registry):
        if len(args) != 2 or not isinstance(args[0], str):
            raise TypeError("run_job(registry, type_name, payload): a type's name, then a payload")
        return target, args[0], args[1]
    raise TypeError(f"run_job runs a JobDefinition or a Registry's type, not {target!r}")


def _context(
    job_type: JobType,
    registry: Registry,
    context: JobContext | None,
    attempt: int | None,
    max_attempts: int | None,
) -> JobContext:
    """The context to run in, its attempt and limit the ones the outcome is decided by."""
    if context is None:
        limit = registry.max_attempts_for(job_type.name, DEFAULT_MAX_ATTEMPTS)
        return make_context(
            job_type.name,
            attempt=attempt if attempt is not None else 1,
            max_attempts=max_attempts if max_attempts is not None else limit,
        )
    for option, asked, known in (
        ("attempt", attempt, context.attempt),
        ("max_attempts", max_attempts, context.max_attempts),
    ):
        if asked is not None and asked != known:
            raise ValueError(f"{option}={asked} but the context's is {known}: give one of them")
    return context


def _as_stored(payload: Any) -> Any:
    """The payload as the consumer reads it back from jsonb: a model as its JSON, a dict
    through JSON; ``TypeError`` or ``ValueError`` for one that no enqueue would take."""
    if isinstance(payload, BaseModel):
        payload = payload_document(payload)
    try:
        document = json.loads(canonical_json(payload))
    except (TypeError, ValueError) as error:
        raise TypeError(f"payload is not JSON: {error}") from None
    problem = unstorable_json(payload)
    if problem is not None:
        raise ValueError(f"payload cannot be stored: {problem}")
    return document


def _outside_a_loop(name: str, instead: str) -> None:
    """``asyncio.run`` cannot start inside a running loop: say what to call there instead."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise RuntimeError(f"{name} is for synchronous tests; in async code await {instead}")


# --- the recorder -----------------------------------------------------------------------------


@dataclass(frozen=True)
class RecordedJob:
    """A job the recorder made: what its enqueue asked for, with the fields of the job it
    answers (an ``EnqueuedJob``: ``state`` ``queued``, no attempt yet). ``priority`` and
    ``max_attempts`` are the job's (asked, else the type's when a registry was known);
    ``client`` is ``jobrelay.enqueue``'s ``client=`` (None through a definition or the client
    stand-in); ``in_transaction``: enqueued on a connection (nothing is rolled back here)."""

    id: uuid.UUID
    type: str
    payload: dict[str, Any]
    idempotency_key: str
    run_at: datetime | None
    delay_seconds: float | None
    priority: int
    max_attempts: int
    concurrency_key: str | None
    unique_key: str | None
    client: str | uuid.UUID | None
    in_transaction: bool
    created_at: datetime
    state: str = JobState.QUEUED.value
    attempts: int = 0
    deduplicated: bool = False
    """True when a live job of the type held its ``unique_key``: this job is that one."""

    @property
    def key(self) -> str:
        return self.idempotency_key


@dataclass(frozen=True)
class _Asked:
    """One enqueue as the recorder takes it, from whichever stand-in."""

    type: str
    payload: Any
    key: str | None = None
    run_at: datetime | None = None
    delay_seconds: float | None = None
    max_attempts: int | None = None
    flow: Flow = field(default_factory=Flow)
    registry: Registry | None = None
    client: str | uuid.UUID | None = None
    in_transaction: bool = False


class Recorder:
    """Every enqueue of the code under test, kept in memory and answered as jobrelay would.

    ``with recorder.install():`` (or ``with recording() as recorder:``) routes every job
    definition's ``enqueue`` / ``enqueue_async`` here, with or without ``connection=``, and
    replaces ``jobrelay.enqueue`` / ``jobrelay.enqueue_async`` (call them as attributes of
    ``jobrelay``: a name imported with ``from jobrelay import enqueue`` before is not
    replaced). The recorder also stands in for a client itself:
    ``jobrelay.configure(client=recorder, async_client=recorder.async_client)``.

    Answers follow the API's idempotency rules, with keys scoped to the recorder (one client):
    a new key makes a job with a fresh id; the same key with the same type, payload, due time
    and flow fields answers that job; another request under it raises
    ``jobrelay.IdempotencyConflict``. A ``unique_key`` held by a recorded job of the type not
    yet run by ``run_all`` answers that job (``deduplicated``). Payloads are checked as an
    enqueue checks them (a dict jsonb can store; against the type's model when a registry is
    known: ``InvalidPayload``).

    ``jobs``: the jobs made, in order; ``calls``: the job each enqueue answered, repeats too;
    ``of_type(name)``, ``assert_enqueued(type, payload=...)``, ``assert_nothing_enqueued()``,
    ``clear()``; ``run_all()`` runs the recorded jobs through ``run_job`` (inline, as Oban's
    testing mode does)."""

    def __init__(self) -> None:
        self.jobs: list[RecordedJob] = []
        self.calls: list[RecordedJob] = []
        self._by_key: dict[str, tuple[str, RecordedJob]] = {}  # key -> (fingerprint, job)
        self._registries: dict[uuid.UUID, Registry] = {}  # the registry each job came with
        self._ran: set[uuid.UUID] = set()  # run by run_all

    # --- installing ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def install(self) -> Iterator[Recorder]:
        """While inside: every definition's enqueue and ``jobrelay.enqueue`` /
        ``enqueue_async`` come here, whatever ``jobrelay.configure`` the code under test calls
        meanwhile; after, what was there before is back, that configuration too."""
        configured = configured_enqueuer()
        previous = override_enqueuer(_RecorderPort(self))
        replaced = {name: vars(jobrelay).get(name) for name in _MODULE_ENQUEUES}
        setattr(jobrelay, "enqueue", self.enqueue)  # noqa: B010 - typed as transactional's
        setattr(jobrelay, "enqueue_async", self.enqueue_async)  # noqa: B010
        try:
            yield self
        finally:
            override_enqueuer(previous)
            install_enqueuer(configured)
            for name, value in replaced.items():
                if value is None:
                    delattr(jobrelay, name)  # back to the module's lazy import
                else:
                    setattr(jobrelay, name, value)

    # --- the stand-ins ------------------------------------------------------------------------

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
    ) -> RecordedJob:
        """``jobrelay.Client.submit``'s stand-in (a random key when none is given)."""
        if isinstance(delay, timedelta):
            delay = delay.total_seconds()
        flow = Flow(priority, concurrency_key, unique_key)
        return self._record(
            _Asked(type, payload, key, run_at, delay, max_attempts, flow),
        )

    @property
    def async_client(self) -> AsyncRecorder:
        """The recorder as a ``jobrelay.AsyncClient``: ``await recorder.async_client.submit``."""
        return AsyncRecorder(self)

    def enqueue(
        self,
        connection: object,
        *,
        client: str | uuid.UUID,
        type: str,
        payload: dict[str, Any],
        key: str,
        run_at: datetime | None = None,
        delay_seconds: float | None = None,
        max_attempts: int | None = None,
        registry: Registry | None = None,
        traceparent: str | None = None,
        priority: int | None = None,
        concurrency_key: str | None = None,
        unique_key: str | None = None,
    ) -> RecordedJob:
        """``jobrelay.enqueue``'s stand-in: the connection is not used (nothing is rolled
        back), ``traceparent`` is not kept."""
        flow = Flow(priority, concurrency_key, unique_key)
        asked = _Asked(
            type, payload, key, run_at, delay_seconds, max_attempts, flow, registry, client, True
        )
        if key is None:
            raise ValueError("key is required (jobrelay.enqueue makes no key of its own)")
        return self._record(asked)

    async def enqueue_async(self, connection: object, **options: Any) -> RecordedJob:
        """``jobrelay.enqueue_async``'s stand-in, as ``enqueue``."""
        return self.enqueue(connection, **options)

    # --- reading what was recorded ------------------------------------------------------------

    def of_type(self, name: str) -> list[RecordedJob]:
        return [job for job in self.jobs if job.type == name]

    def assert_enqueued(
        self, type: str, payload: BaseModel | Mapping[str, Any] | None = None, **fields: Any
    ) -> RecordedJob:
        """The first job of ``type`` with ``payload`` (a model or a dict, compared as JSON;
        any payload when None) and the given fields (``key=``, ``priority=``, ``run_at=``...);
        ``AssertionError`` listing what was recorded when there is none."""
        wanted = None if payload is None else _as_stored(payload)
        for job in self.of_type(type):
            if wanted is not None and job.payload != wanted:
                continue
            if all(getattr(job, name) == value for name, value in fields.items()):
                return job
        asked = ", ".join(f"{name}={value!r}" for name, value in fields.items())
        raise AssertionError(
            f"no job of type {type!r}"
            + (f" with payload {wanted!r}" if wanted is not None else "")
            + (f" and {asked}" if asked else "")
            + f" was enqueued; recorded: {self._listing()}"
        )

    def assert_nothing_enqueued(self) -> None:
        if self.jobs:
            raise AssertionError(f"jobs were enqueued: {self._listing()}")

    def clear(self) -> None:
        """Forget every job and key: the recorder as new (still installed, if it is)."""
        for kept in (self.jobs, self.calls, self._by_key, self._registries, self._ran):
            kept.clear()

    def _listing(self) -> str:
        if not self.jobs:
            return "none"
        return "; ".join(f"{job.type} {job.payload!r} (key {job.key!r})" for job in self.jobs)

    # --- running what was recorded ------------------------------------------------------------

    def run_all(
        self, registry: Registry | None = None, *, limit: int = 1000
    ) -> list[tuple[RecordedJob, Verdict]]:
        """Run every recorded job not run yet, in the order they were made, one attempt each
        (``run_job``), the jobs their handlers enqueue too, and return each with its verdict.
        ``registry``: where their types are (by default the one each was enqueued with).
        ``RuntimeError`` past ``limit`` jobs: handlers that keep enqueuing one another."""
        _outside_a_loop("run_all", "run_all_async")
        return asyncio.run(self.run_all_async(registry, limit=limit))

    async def run_all_async(
        self, registry: Registry | None = None, *, limit: int = 1000
    ) -> list[tuple[RecordedJob, Verdict]]:
        """``run_all`` in a running event loop."""
        ran: list[tuple[RecordedJob, Verdict]] = []
        while pending := [job for job in self.jobs if job.id not in self._ran]:
            for job in pending:
                if len(ran) >= limit:
                    raise RuntimeError(f"run_all ran {limit} jobs and more keep coming")
                types = registry or self._registries.get(job.id)
                if types is None:
                    raise ValueError(
                        f"job type {job.type!r} was enqueued without a registry: "
                        "run_all(registry) says where it is"
                    )
                self._ran.add(job.id)
                verdict = await run_job_async(
                    types, job.type, job.payload, max_attempts=job.max_attempts
                )
                ran.append((job, verdict))
        return ran

    # --- answering ----------------------------------------------------------------------------

    def _record(self, asked: _Asked) -> RecordedJob:
        """The job an enqueue answers, under the API's idempotency rules."""
        submission = _submission(asked)
        request, fingerprint = submission.request, submission.fingerprint
        held = self._by_key.get(request.idempotency_key)
        if held is not None:
            if held[0] != fingerprint:
                raise _conflict(held[1].id)
            self.calls.append(held[1])
            return held[1]
        live = self._live_unique(request)
        if live is not None:
            self.calls.append(live)
            return live
        job = _new_job(submission, asked)
        self._by_key[request.idempotency_key] = (fingerprint, job)
        if asked.registry is not None:
            self._registries[job.id] = asked.registry
        self.jobs.append(job)
        self.calls.append(job)
        return job

    def _live_unique(self, request: JobRequest) -> RecordedJob | None:
        unique = request.job_flow.unique_key
        for job in self.jobs if unique is not None else ():
            if job.type == request.type and job.unique_key == unique and job.id not in self._ran:
                return replace(job, deduplicated=True)
        return None


class AsyncRecorder:
    """A ``Recorder`` as a ``jobrelay.AsyncClient``: what it submits is recorded there."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    async def submit(self, type: str, payload: dict[str, Any], **options: Any) -> RecordedJob:
        return self.recorder.submit(type, payload, **options)


class _RecorderPort:
    """The ``Enqueuer`` (``core/registry.py``) a recorder installs for job definitions."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    def enqueue(self, request: EnqueueRequest) -> RecordedJob:
        asked = _Asked(
            request.type,
            request.payload,
            request.key,
            request.run_at,
            flow=Flow(request.priority),
            registry=request.registry,
            in_transaction=request.connection is not None,
        )
        return self.recorder._record(asked)

    async def enqueue_async(self, request: EnqueueRequest) -> RecordedJob:
        return self.enqueue(request)


@contextlib.contextmanager
def recording() -> Iterator[Recorder]:
    """``with recording() as recorder:``, a new ``Recorder`` installed while inside."""
    with Recorder().install() as recorder:
        yield recorder


_MODULE_ENQUEUES = ("enqueue", "enqueue_async")


def _submission(asked: _Asked) -> Submission:
    """The checked request and its fingerprint, by ``jobrelay.enqueue``'s own checks
    (``transactional.py::_submission``, free of any connection): ``ValueError`` / ``TypeError``
    for what no submission can have, ``InvalidPayload`` against a known type. Its fingerprint
    is the one the database keeps (``db/accept.py::Submission``)."""
    from jobrelay import transactional  # psycopg and SQLAlchemy: only once a job is recorded

    return transactional._submission(
        asked.type,
        asked.payload,
        asked.key if asked.key is not None else str(uuid.uuid4()),
        asked.run_at,
        asked.delay_seconds,
        asked.max_attempts,
        asked.registry,
        flow=asked.flow,
    )


def _new_job(submission: Submission, asked: _Asked) -> RecordedJob:
    request = submission.request
    flow = request.job_flow
    return RecordedJob(
        id=new_id(),
        type=request.type,
        payload=json.loads(submission.payload_json),  # as stored: a tuple is a list
        idempotency_key=request.idempotency_key,
        run_at=request.run_at,
        delay_seconds=request.delay_seconds,
        priority=request.priority,
        max_attempts=request.max_attempts,
        concurrency_key=flow.concurrency_key,
        unique_key=flow.unique_key,
        client=asked.client,
        in_transaction=asked.in_transaction,
        created_at=datetime.now(UTC),
    )


def _conflict(holder: uuid.UUID) -> Exception:
    """The ``IdempotencyConflict`` jobrelay raises (the HTTP client's class, which
    ``jobrelay.enqueue`` raises too), naming the job that holds the key. Imported here, on
    this rare path only: the client's package loads httpx."""
    from jobrelay.client.errors import IdempotencyConflict

    detail = "the key was used for another type, payload or schedule"
    problem = {
        "title": "This Idempotency-Key was already used for a different request",
        "status": 409,
        "code": IdempotencyConflict.code,
        "detail": detail,
        "job_id": str(holder),
    }
    return IdempotencyConflict(409, IdempotencyConflict.code, detail, problem=problem)
