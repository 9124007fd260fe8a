"""What the chaos run submits, and a client that treats every ambiguous answer as ambiguous.

The plan is a pure function of the seed: a mix of job kinds, each under its own idempotency key,
some keys submitted twice (later, or at the same moment) and some jobs cancelled right after
they are accepted. Every job has a priority of its own, and a share of them (``LIMITED``) runs
under ``chaos.limited``'s concurrency limit per key (chaos/handlers.py), most of them on a few
busy keys so the limit is reached. Another share (``DURABLE``) is ``chaos.durable``: steps, a
durable sleep of 1-3 s, two waits for a signal that ``Signaller`` sends at a planned delay after
the job is accepted (before or after the wait starts), and a child job. A share of the slots
(``WORKFLOW_SHARE``) is a workflow instead (docs/workflows.md): a diamond and a chain of the
same job kinds, so the handlers' failures and the faults reach jobs that wait for others too; a
workflow counts its jobs against the plan's number of jobs. A share of the single jobs
(``SEQUENCE_SHARE``) carries a ``sequence_key`` (docs/flow-control.md): ``SEQUENCE_KEYS`` keys,
each with jobs of two types (``demo.sleep`` and a transient ``demo.fail``), and on a few keys a
permanent failure that blocks the rest of its key until the end of the run. ``BATCH`` jobs
(about 10%) are ``chaos.batch``, a batch handler's. Both shares can be left out (``Shares``).
The client retries a 5xx or a
broken connection with the same key: the earlier request may have committed (the ambiguous
commit), and the key makes the retry safe.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import httpx
import psycopg

from chaos.handlers import BATCH, DURABLE, LIMITED, SIGNAL
from jobrelay.db.engine import libpq_url

if TYPE_CHECKING:
    from chaos.history import History

RETRY_PAUSE = (0.2, 2.0)  # growing pause between retries of an ambiguous request


class Kind(StrEnum):
    SLEEP = "sleep"
    EXPORT = "export"
    TRANSIENT = "transient"  # fails on its first 1–2 attempts, then succeeds
    PERMANENT = "permanent"  # fails permanently on every attempt: must end quarantined
    LIMITED = "limited"  # chaos.limited: at most its limit of one key run at once
    DURABLE = "durable"  # chaos.durable: steps, a sleep, signals and a child
    BATCH = "batch"  # chaos.batch: a batch handler's job, failing its first call or two at times


KIND_WEIGHTS = {
    Kind.SLEEP: 35,
    Kind.EXPORT: 22,
    Kind.TRANSIENT: 18,
    Kind.PERMANENT: 10,
    Kind.LIMITED: 15,
    Kind.DURABLE: 14,  # about 12% of the jobs
    Kind.BATCH: 13,  # about 10% of the jobs
}
PRIORITIES = (-10, 0, 0, 0, 5, 50)  # every job's priority is drawn from these
LIMITED_KEYS = 30  # chaos.limited's keys; the first ones far busier than the last (1/rank)
LIMITED_SECONDS = (0.05, 0.8)  # how long a chaos.limited job holds its slot
LIMITED_KEY_WEIGHTS = [1 / rank for rank in range(1, LIMITED_KEYS + 1)]
WORKFLOW_SHARE = 0.10  # of the submissions: a workflow of WORKFLOW_SHAPE's jobs
# ref -> the refs it waits for: a diamond (a; b, c after a; d after b and c) and a chain.
WORKFLOW_SHAPE: dict[str, tuple[str, ...]] = {
    "a": (),
    "b": ("a",),
    "c": ("a",),
    "d": ("b", "c"),
    "e": (),
    "f": ("e",),
    "g": ("f",),
}
DURABLE_SLEEP = (1.0, 3.0)  # a chaos.durable job's durable sleep, seconds (most have one)
# When the run sends a signal, seconds after the job was accepted: before its sleep ends (so
# before the wait starts) or well after.
SIGNAL_DELAYS = (0.0, 6.0)
# Of the slots: a job with a sequence key, about 15% of the jobs (a workflow's slot holds 7).
SEQUENCE_SHARE = 0.24
SEQUENCE_KEYS = 40
SEQUENCE_KINDS = (Kind.SLEEP, Kind.TRANSIENT)  # two types: a sequence runs across types
# Every tenth key may be blocked: a permanent failure, which holds its key's later jobs queued
# (``blocked_by``) to the end of the run, drawn for this share of the key's jobs.
BLOCKING_KEY_EVERY = 10
BLOCKING_SHARE = 0.1
BATCH_FAILING = 0.2  # of the batch jobs: fail on the first one or two calls that take them
LATER_DUPLICATE_SLOTS = 200  # a later duplicate comes up to this many slots after its original


@dataclass(frozen=True)
class Planned:
    key: str
    kind: Kind
    type: str
    payload: dict[str, Any]
    priority: int = 0
    max_attempts: int | None = None
    cancel: bool = False
    # chaos.durable with signals: the delay of each signal sent after the job was accepted
    # (two for its two waits, sometimes a third that no wait takes).
    signal_delays: tuple[float, ...] = ()
    sequence_key: str | None = None

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "type": self.type,
            "payload": self.payload,
            "priority": self.priority,
        }
        if self.max_attempts is not None:
            body["max_attempts"] = self.max_attempts
        if self.sequence_key is not None:
            body["sequence_key"] = self.sequence_key
        return body


@dataclass(frozen=True)
class Shares:
    """Which of the plan's optional shares it holds (``python -m chaos --no-sequences``,
    ``--no-batches``): all by default."""

    sequences: bool = True
    batches: bool = True

    def kinds(self) -> dict[Kind, int]:
        """KIND_WEIGHTS without the kinds left out."""
        return {k: w for k, w in KIND_WEIGHTS.items() if self.batches or k is not Kind.BATCH}


@dataclass(frozen=True)
class PlannedStep:
    """One job of a planned workflow: its ref, the refs it waits for, and the job itself (its
    ``key`` names it in reports only: the workflow's key is the one submitted)."""

    ref: str
    after: tuple[str, ...]
    job: Planned

    def body(self) -> dict[str, Any]:
        return {"ref": self.ref, "after": list(self.after), **self.job.body()}


@dataclass(frozen=True)
class PlannedWorkflow:
    key: str
    steps: tuple[PlannedStep, ...]

    def body(self) -> dict[str, Any]:
        return {
            "jobs": [step.body() for step in self.steps],
            "on_failure": "cancel_dependents",
        }


@dataclass(frozen=True)
class Submission:
    job: Planned | PlannedWorkflow
    duplicate: bool  # a second submission of the same key

    @property
    def size(self) -> int:
        """How many jobs it asks for."""
        return len(self.job.steps) if isinstance(self.job, PlannedWorkflow) else 1


def plan(
    rng: random.Random, count: int, prefix: str, shares: Shares = Shares()
) -> list[Submission]:
    """About ``count`` jobs (single, in sequences or in workflows) and their duplicate
    submissions, in submission order."""
    entries: list[tuple[int, int, Submission]] = []  # (slot, order within the plan, submission)
    number = planned = 0
    kinds = shares.kinds()
    while planned < count:
        roll = rng.random()
        if roll < WORKFLOW_SHARE:
            job: Planned | PlannedWorkflow = _planned_workflow(rng, f"{prefix}-wf-{number}", kinds)
        elif shares.sequences and roll < WORKFLOW_SHARE + SEQUENCE_SHARE:
            job = _planned_in_sequence(rng, f"{prefix}-{number}")
        else:
            job = _planned_job(rng, f"{prefix}-{number}", kinds)
        submission = Submission(job, duplicate=False)
        planned += submission.size
        entries.append((number, len(entries), submission))
        roll = rng.random()
        if roll < 0.03:  # at the same moment: two workers take them side by side
            entries.append((number, len(entries), Submission(job, duplicate=True)))
        elif roll < 0.12:  # later, once the job may be running or finished
            later = number + rng.randint(1, LATER_DUPLICATE_SLOTS)
            entries.append((later, len(entries), Submission(job, duplicate=True)))
        number += 1
    return [submission for _, _, submission in sorted(entries, key=lambda e: e[:2])]


def _planned_job(rng: random.Random, key: str, kinds: dict[Kind, int] = KIND_WEIGHTS) -> Planned:
    kind = rng.choices(list(kinds), list(kinds.values()))[0]
    return replace(_planned(rng, key, kind), priority=rng.choice(PRIORITIES))


def _planned_in_sequence(rng: random.Random, key: str) -> Planned:
    """A job of one of SEQUENCE_KINDS under one of SEQUENCE_KEYS, at a priority of its own (a
    priority never reorders a sequence); on a blocking key, sometimes a permanent failure."""
    number = rng.randint(1, SEQUENCE_KEYS)
    kind = rng.choice(SEQUENCE_KINDS)
    if number % BLOCKING_KEY_EVERY == 0 and rng.random() < BLOCKING_SHARE:
        kind = Kind.PERMANENT
    job = replace(_planned(rng, key, kind), sequence_key=f"sequence-{number}")
    return replace(job, priority=rng.choice(PRIORITIES))


def _planned_workflow(
    rng: random.Random, key: str, kinds: dict[Kind, int] = KIND_WEIGHTS
) -> PlannedWorkflow:
    """WORKFLOW_SHAPE with a job of a random kind at each ref; none is cancelled by us (a
    workflow's jobs end cancelled only when a job they depend on is quarantined)."""
    steps = tuple(
        PlannedStep(ref, after, replace(_planned_job(rng, f"{key}:{ref}", kinds), cancel=False))
        for ref, after in WORKFLOW_SHAPE.items()
    )
    return PlannedWorkflow(key, steps)


def _planned(rng: random.Random, key: str, kind: Kind) -> Planned:
    match kind:
        case Kind.SLEEP:
            payload: dict[str, Any] = {"seconds": round(rng.uniform(0, 0.05), 3)}
            return Planned(key, kind, "demo.sleep", payload, cancel=rng.random() < 0.05)
        case Kind.EXPORT:
            return Planned(key, kind, "catalog.export", {"course": f"course-{rng.randint(1, 99)}"})
        case Kind.TRANSIENT:
            payload = {"mode": "transient", "times": rng.choice([1, 2])}
            return Planned(key, kind, "demo.fail", payload, max_attempts=3)
        case Kind.PERMANENT:
            # `times` at its maximum: no attempt number can succeed, even after lost attempts.
            payload = {"mode": "permanent", "times": 1000}
            return Planned(key, kind, "demo.fail", payload, max_attempts=3)
        case Kind.LIMITED:
            payload = {
                "key": f"key-{rng.choices(range(1, LIMITED_KEYS + 1), LIMITED_KEY_WEIGHTS)[0]}",
                "seconds": round(rng.uniform(*LIMITED_SECONDS), 3),
            }
            return Planned(key, kind, LIMITED, payload)
        case Kind.DURABLE:
            return _planned_durable(rng, key)
        case Kind.BATCH:
            failing = rng.random() < BATCH_FAILING
            payload = {"tag": key, "fail_times": rng.choice([1, 2]) if failing else 0}
            return Planned(key, kind, BATCH, payload)
    raise AssertionError(kind)  # pragma: no cover


def _planned_durable(rng: random.Random, key: str) -> Planned:
    sleep = round(rng.uniform(*DURABLE_SLEEP), 3) if rng.random() < 0.8 else 0.0
    signals = rng.random() < 0.6
    child = rng.choices([None, "ok", "fails"], [4, 5, 1])[0]
    payload = {"sleep": sleep, "signals": signals, "child": child}
    delays: tuple[float, ...] = ()
    if signals:
        count = 3 if rng.random() < 0.2 else 2
        delays = tuple(round(rng.uniform(*SIGNAL_DELAYS), 3) for _ in range(count))
    return Planned(key, Kind.DURABLE, DURABLE, payload, signal_delays=delays)


@dataclass
class Answers:
    """Everything the API answered for one idempotency key."""

    answers: list[tuple[int, str]] = field(default_factory=list)  # (status, job/workflow id)
    unexpected: list[str] = field(default_factory=list)  # 4xx answers, give-ups

    @property
    def ids(self) -> set[str]:
        return {answered for _, answered in self.answers}

    @property
    def created(self) -> int:
        """Answers that said they created it (202): one at most."""
        return sum(1 for status, _ in self.answers if status == 202)

    @property
    def accepted(self) -> bool:
        return bool(self.answers)


@dataclass
class KeyRecord(Answers):
    """A single job's key."""

    job: Planned = field(kw_only=True)
    cancel_requested: bool = False
    cancel_confirmed: bool = False

    @property
    def job_ids(self) -> set[str]:
        return self.ids


@dataclass
class WorkflowRecord(Answers):
    """A workflow's key, and the job ids by ref that its answers named (every answer must name
    the same ones)."""

    workflow: PlannedWorkflow = field(kw_only=True)
    jobs: dict[str, set[str]] = field(default_factory=dict)  # ref -> job ids answered


@dataclass(frozen=True)
class SentSignal:
    job_id: str
    key: str  # its idempotency key
    value: dict[str, Any]
    answer: str  # jobrelay_signal's: sent, repeated, finished, unknown (or "gave up: …")


@dataclass
class Ledger:
    records: dict[str, KeyRecord] = field(default_factory=dict)
    signals: list[SentSignal] = field(default_factory=list)
    workflows: dict[str, WorkflowRecord] = field(default_factory=dict)
    requests: int = 0
    ambiguous: int = 0  # 5xx or a broken connection: retried with the same key
    ambiguous_commits: int = 0  # ...and the retry found the job the failed request created
    errors: Counter[str] = field(default_factory=Counter)

    def record(self, job: Planned) -> KeyRecord:
        return self.records.setdefault(job.key, KeyRecord(job=job))

    def workflow_record(self, workflow: PlannedWorkflow) -> WorkflowRecord:
        return self.workflows.setdefault(workflow.key, WorkflowRecord(workflow=workflow))


class Submitter:
    def __init__(
        self,
        api_url: str,
        token: str,
        ledger: Ledger,
        *,
        give_up_after: float = 180.0,
        on_accepted: Callable[[Planned, str], None] | None = None,
        history: History | None = None,
    ) -> None:
        self.client = httpx.AsyncClient(
            base_url=api_url,
            headers={"Authorization": f"Bearer {token}"},
            timeout=httpx.Timeout(10.0),
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=64),
        )
        self.ledger = ledger
        self.give_up_after = give_up_after
        self.on_accepted = on_accepted  # each planned job's first acceptance, with its id
        self.history = history  # each try and its answer, when given (chaos/history.py)

    async def close(self) -> None:
        await self.client.aclose()

    async def run(self, submissions: list[Submission], *, seconds: float, workers: int) -> None:
        """Submit at an even pace over ``seconds`` with ``workers`` requests in flight at most."""
        queue: asyncio.Queue[tuple[float, Submission]] = asyncio.Queue()
        start = time.monotonic()
        step = seconds / max(1, len(submissions))
        for number, submission in enumerate(submissions):
            queue.put_nowait((start + number * step, submission))

        async def worker() -> None:
            while not queue.empty():
                due, submission = queue.get_nowait()
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                await self.submit(submission)

        await asyncio.gather(*(worker() for _ in range(workers)))

    async def submit(self, submission: Submission) -> None:
        job = submission.job
        if isinstance(job, PlannedWorkflow):
            await self._submit_workflow(job, submission)
            return
        record = self.ledger.record(job)
        asked = Try("submit", key=job.key, body=job.body())
        document = await self._accept("/v1/jobs", asked, record, submission)
        if document is not None and not submission.duplicate and self.on_accepted:
            self.on_accepted(job, str(document["id"]))
        if document is not None and job.cancel and not submission.duplicate:
            await self._cancel(record, str(document["id"]))

    async def _submit_workflow(self, workflow: PlannedWorkflow, submission: Submission) -> None:
        record = self.ledger.workflow_record(workflow)
        asked = Try("submit_workflow", key=workflow.key, body=workflow.body())
        document = await self._accept("/v1/workflows", asked, record, submission)
        steps = {step.ref: step.job for step in workflow.steps}
        for ref, job in (document or {}).get("jobs", {}).items():
            record.jobs.setdefault(ref, set()).add(str(job["id"]))
            if ref in steps and not submission.duplicate and self.on_accepted:
                self.on_accepted(steps[ref], str(job["id"]))

    async def _accept(
        self, path: str, asked: Try, record: Answers, submission: Submission
    ) -> dict[str, Any] | None:
        """POST the submission ``asked`` (a body under a key), retried until a definite answer;
        the accepted document (its id in ``record``), or None (the problem in ``record``)."""
        answer = await self._request(path, asked)
        if answer is None:
            record.unexpected.append("gave up: no definite answer")
            return None
        status, document, failures = answer
        if status not in (200, 202):
            record.unexpected.append(f"submit answered {status}: {document}")
            return None
        record.answers.append((status, str(document["id"])))
        if status == 200 and failures and not submission.duplicate:
            self.ledger.ambiguous_commits += 1
        return dict(document)

    async def _cancel(self, record: KeyRecord, job_id: str) -> None:
        record.cancel_requested = True
        answer = await self._request(f"/v1/jobs/{job_id}/cancel", Try("cancel", job_id=job_id))
        if answer is not None and answer[0] == 200:
            record.cancel_confirmed = True

    async def _request(self, path: str, request: Try) -> tuple[int, Any, int] | None:
        """POST: (status, JSON body, ambiguous failures before it), retrying 5xx and broken
        connections; None after ``give_up_after`` seconds without a definite answer. Each try
        and its answer go to the history, when there is one."""
        deadline = time.monotonic() + self.give_up_after
        failures = 0
        headers = {"Idempotency-Key": request.key} if request.key is not None else None
        while True:
            self.ledger.requests += 1
            n = request.record(self.history)
            try:
                response = await self.client.post(path, json=request.body, headers=headers)
                document = _json(response)
                if self.history is not None:
                    self.history.answer(n, response.status_code, document)
                if response.status_code < 500:
                    return response.status_code, document, failures
                self.ledger.errors[f"http_{response.status_code}"] += 1
            except httpx.TransportError as error:
                if self.history is not None:
                    self.history.answer(n, None, error=type(error).__name__)
                self.ledger.errors[type(error).__name__] += 1
            failures += 1
            self.ledger.ambiguous += 1
            if time.monotonic() > deadline:
                return None
            low, high = RETRY_PAUSE
            await asyncio.sleep(min(high, low * 2 ** min(failures - 1, 4)))


@dataclass(frozen=True)
class Try:
    """What one POST of the Submitter asks, as its history's ``request`` lines tell it."""

    op: str  # submit, submit_workflow or cancel (docs/history.md)
    key: str | None = None  # its Idempotency-Key
    job_id: str | None = None  # a cancel's job
    body: dict[str, Any] | None = None

    def record(self, history: History | None) -> int:
        """A ``request`` line for this try; its ``n`` (0 without a history)."""
        if history is None:
            return 0
        return history.request(self.op, key=self.key, job_id=self.job_id, body=self.body)


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return {"raw": response.text[:200]}


class Signaller:
    """Sends ``chaos.durable``'s signals in the database with ``jobrelay_signal`` (as a sender's
    own transaction would), each at its planned delay after its job was accepted, under an
    idempotency key of its own; retried (same key) while PostgreSQL is restarting."""

    def __init__(
        self,
        database_url: str,
        ledger: Ledger,
        *,
        give_up_after: float = 120.0,
        history: History | None = None,
    ) -> None:
        self.url = libpq_url(database_url)
        self.ledger = ledger
        self.give_up_after = give_up_after
        self.history = history  # each signal and its answer, when given (chaos/history.py)
        self.tasks: set[asyncio.Task[None]] = set()

    def accepted(self, job: Planned, job_id: str) -> None:
        for number, delay in enumerate(job.signal_delays, start=1):
            task = asyncio.create_task(self._send(job_id, f"{job.key}:{number}", delay))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def wait(self) -> None:
        while self.tasks:
            await asyncio.gather(*self.tasks)

    async def _send(self, job_id: str, key: str, delay: float) -> None:
        await asyncio.sleep(delay)
        value = {"key": key}  # unique: the checker finds each wait's signal by its value
        deadline = time.monotonic() + self.give_up_after
        while True:
            try:
                answer = await self._signal(job_id, key, value)
                break
            except psycopg.Error as error:
                if not isinstance(error, psycopg.OperationalError):  # not an outage: final
                    answer = f"failed: {type(error).__name__}: {str(error)[:200]}"
                    break
                if time.monotonic() > deadline:
                    answer = f"gave up: {type(error).__name__}"
                    break
                await asyncio.sleep(0.5)
        self.ledger.signals.append(SentSignal(job_id, key, value, answer))
        if self.history is not None:
            self.history.signal(job_id, SIGNAL, key, answer)

    async def _signal(self, job_id: str, key: str, value: dict[str, Any]) -> str:
        async with await psycopg.AsyncConnection.connect(
            self.url, autocommit=True, connect_timeout=5
        ) as connection:
            cursor = await connection.execute(
                "SELECT jobrelay.jobrelay_signal(%s, %s, %s::jsonb, %s)",
                (job_id, SIGNAL, json.dumps(value), key),
            )
            row = await cursor.fetchone()
        assert row is not None
        return str(row[0])
