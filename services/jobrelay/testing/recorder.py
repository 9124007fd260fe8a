"""``Recorder``: every enqueue of the code under test, kept in memory and answered as jobrelay
would, in place of ``jobrelay.configure``'s client and ``jobrelay.enqueue``
(docs/testing-handlers.md)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Unpack

from pydantic import BaseModel

import jobrelay
from jobrelay.core.errors import DuplicateJob, InvalidPayload
from jobrelay.core.idempotency import KeyDecision, Submission, check_submission, decide
from jobrelay.core.ids import new_id
from jobrelay.core.jobs import Flow, JobRequest, OnDuplicate, PolicyOptions
from jobrelay.core.registry import (
    EnqueueRequest,
    Registry,
    configured_enqueuer,
    install_enqueuer,
    override_enqueuer,
)
from jobrelay.core.states import JobState
from jobrelay.testing.verdicts import Verdict, as_stored, outside_a_loop, run_job_async


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
    # The order and submission policies it was enqueued with (asked, else the type's), as
    # recorded: the recorder keeps them for a test to read, it does not enforce them (it
    # refuses a duplicate with ``on_duplicate="reject"``, as the accept does).
    sequence_key: str | None = None
    unique_for_seconds: float | None = None
    on_duplicate: str | None = None
    debounce_seconds: float | None = None
    debounce_max_seconds: float | None = None
    throttle_key: str | None = None

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
        **policies: Unpack[PolicyOptions],
    ) -> RecordedJob:
        """``jobrelay.Client.submit``'s stand-in (a random key when none is given)."""
        if isinstance(delay, timedelta):
            delay = delay.total_seconds()
        flow = Flow(priority, concurrency_key, unique_key, **policies)
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
        **policies: Unpack[PolicyOptions],
    ) -> RecordedJob:
        """``jobrelay.enqueue``'s stand-in: the connection is not used (nothing is rolled
        back), ``traceparent`` is not kept."""
        flow = Flow(priority, concurrency_key, unique_key, **policies)
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
        """The first job of ``type`` with ``payload`` (any payload when None) and the given
        fields (``key=``, ``priority=``, ``run_at=``...); ``AssertionError`` listing what was
        recorded when there is none.

        ``payload`` is compared as the job was stored: a model as its JSON; a dict through the
        type's model when the job was enqueued with a registry that has it (so a field left to
        its default matches the default the enqueue filled in), else on the keys it gives."""
        wanted = None if payload is None else as_stored(payload)
        for job in self.of_type(type):
            if wanted is not None and not self._payload_matches(job, payload, wanted):
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

    def _payload_matches(self, job: RecordedJob, given: Any, wanted: Any) -> bool:
        if job.payload == wanted or isinstance(given, BaseModel):
            return bool(job.payload == wanted)
        types = self._registries.get(job.id)
        if types is not None and job.type in types:
            # Both as the type's model reads them, so that a field left to its default is the
            # default, whether the enqueue was given a model (its JSON has every field) or a
            # dict (stored as given).
            try:
                expected = as_stored(types.validate_payload(job.type, wanted))
            except InvalidPayload:
                return False  # no payload the enqueue took looks like this one
            return bool(as_stored(types.validate_payload(job.type, job.payload)) == expected)
        # No model to fill the defaults in: the keys given must hold the recorded values.
        return isinstance(wanted, dict) and all(
            key in job.payload and job.payload[key] == value for key, value in wanted.items()
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
        outside_a_loop("run_all", "run_all_async")
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
            held_hash, held_job = held
            if decide(held_hash, fingerprint) is KeyDecision.CONFLICT:
                raise _conflict(held_job.id)
            self.calls.append(held_job)
            return held_job
        live = self._live_unique(request)
        if live is not None:
            if request.job_flow.on_duplicate is OnDuplicate.REJECT:
                raise DuplicateJob(f"job {live.id} holds the unique key", job_id=str(live.id))
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
            flow=Flow(request.priority, **request.policies),
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
    (``core/idempotency.py::check_submission``): ``ValueError`` / ``TypeError`` for what no
    submission can have, ``InvalidPayload`` against a known type. Its fingerprint is the one
    the database keeps."""
    return check_submission(
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
        sequence_key=flow.sequence_key,
        unique_for_seconds=flow.unique_for_seconds,
        on_duplicate=flow.on_duplicate,
        debounce_seconds=flow.debounce_seconds,
        debounce_max_seconds=flow.debounce_max_seconds,
        throttle_key=flow.throttle_key,
        client=asked.client,
        in_transaction=asked.in_transaction,
        created_at=datetime.now(UTC),
    )


def _conflict(holder: uuid.UUID) -> Exception:
    """The ``IdempotencyConflict`` ``jobrelay.enqueue`` raises, naming the job that holds the
    key. Imported here, on this rare path only: the client's package loads httpx."""
    from jobrelay_client.errors import IdempotencyConflict

    detail = "the key was used for another type, payload or schedule"
    return IdempotencyConflict.of_holder(detail, holder)
