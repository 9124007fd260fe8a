"""One table of idempotency cases through every shape of the accept, against real PostgreSQL:
the API's store (``Store.accept_job``), its batch (``Store.accept_jobs``, both submissions in one
call), ``jobrelay.enqueue`` on the caller's connection, the SQL function ``jobrelay_enqueue``
(migration 0010, the one accept not written in Python), the workflow accept where a case fits a
workflow, and the testing kit's ``Recorder``.

Each case is two submissions under one idempotency key; every shape must answer the second
with the case's decision (new, existing, conflict: ``core/idempotency.py::KeyDecision``) and
store the request hash of ``core/idempotency.py::Submission`` for the first. The same cases
also run across shapes (the first submission through one, the second through another), which
is how a key used from Python and from SQL meets itself.

The SQL function reads the payload as jsonb, which cannot tell ``1e21`` from an integer or
``-0.0`` from ``0.0``: its hash of such a payload differs from Python's, as docs/submitting.md
("From any language: SQL") says. Those cases say so (``sql_hash_differs``) and the test checks
that they still differ, so a change of either side shows here."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from psycopg.rows import namedtuple_row

import jobrelay
from jobrelay.core.errors import DuplicateJob
from jobrelay.core.idempotency import KeyDecision, Submission, check_submission
from jobrelay.core.jobs import Flow
from jobrelay.core.workflows import OnFailure, WorkflowStep
from jobrelay.db.accept import AcceptResult
from jobrelay.db.engine import libpq_url
from jobrelay.db.store import Store
from jobrelay.db.workflow_store import WorkflowStore, WorkflowSubmission
from jobrelay.testing import Recorder
from jobrelay_client.errors import IdempotencyConflict
from tests.conftest import make_client

NEW, EXISTING, CONFLICT = KeyDecision.NEW, KeyDecision.EXISTING, KeyDecision.CONFLICT
TYPE = "parity.echo"
AT = datetime(2031, 6, 1, 12, 0, tzinfo=UTC)


@dataclass(frozen=True)
class Ask:
    """One submission, as each shape can be asked for it."""

    payload: dict[str, Any] = field(default_factory=lambda: {"course": "JavaScript"})
    type: str = TYPE
    run_at: datetime | None = None
    delay_seconds: float | None = None
    priority: int | None = None
    max_attempts: int | None = None
    concurrency_key: str | None = None
    client: str = "alice"
    # The order and submission policies. ``unique_key`` is a pattern: ``{key}`` is the
    # idempotency key of the pair, so that no pair meets the live job of another's.
    unique_key: str | None = None
    sequence_key: str | None = None
    unique_for_seconds: float | None = None
    on_duplicate: str | None = None
    debounce_seconds: float | None = None

    def flow_fields(self, key: str) -> dict[str, Any]:
        """The flow fields as ``jobrelay.enqueue`` and the recorder take them."""
        return {
            "priority": self.priority,
            "concurrency_key": self.concurrency_key,
            "unique_key": None if self.unique_key is None else self.unique_key.format(key=key),
            "sequence_key": self.sequence_key,
            "unique_for_seconds": self.unique_for_seconds,
            "on_duplicate": self.on_duplicate,
            "debounce_seconds": self.debounce_seconds,
        }

    def submission(self, key: str) -> Submission:
        """As ``jobrelay.enqueue`` and the recorder check it (no registry: no type defaults)."""
        return check_submission(
            self.type,
            self.payload,
            key,
            self.run_at,
            self.delay_seconds,
            self.max_attempts,
            None,
            flow=Flow(**self.flow_fields(key)),
        )

    @property
    def in_sql(self) -> bool:
        """The SQL function takes no delay, max_attempts or flow keys but a sequence's."""
        no_keys = not (self.concurrency_key or self.unique_key)
        return self.delay_seconds is None and self.max_attempts is None and no_keys

    @property
    def in_workflow(self) -> bool:
        """A workflow's job has no schedule and no flow keys of its own here."""
        no_keys = not (self.concurrency_key or self.unique_key or self.sequence_key)
        return self.run_at is None and self.delay_seconds is None and no_keys


@dataclass(frozen=True)
class Case:
    name: str
    first: Ask
    second: Ask
    expected: KeyDecision  # what the second submission gets under the first's key
    workflow_expected: KeyDecision | None = None  # where the workflow's own hash decides else
    sql_hash_differs: bool = False  # a number jsonb keeps otherwise (docs/submitting.md)
    sql_expected: KeyDecision | None = None  # both through SQL, where that differs

    def __str__(self) -> str:
        return self.name


def ask(payload: Any = None, **fields: Any) -> Ask:
    return Ask(**fields) if payload is None else Ask(payload, **fields)


CASES = [
    Case("same request", ask(), ask(), EXISTING),
    Case("another payload", ask(), ask({"course": "Rust"}), CONFLICT),
    Case("another type", ask(), ask(type="parity.other"), CONFLICT),
    Case("another client", ask(), ask(client="bob"), NEW),
    Case("another client, another payload", ask(), ask({"x": 1}, client="bob"), NEW),
    Case(
        "key order",
        ask({"a": 1, "b": [1, {"c": 2, "d": 3}]}),
        ask({"b": [1, {"d": 3, "c": 2}], "a": 1}),
        EXISTING,
    ),
    Case("list order", ask({"a": [1, 2]}), ask({"a": [2, 1]}), CONFLICT),
    Case("empty object", ask({}), ask({}), EXISTING),
    Case("empty object and nested empties", ask({}), ask({"a": {}, "b": []}), CONFLICT),
    Case(
        "nested objects and lists",
        ask({"a": {"b": [{"c": None, "d": True}, [], "x"]}}),
        ask({"a": {"b": [{"d": True, "c": None}, [], "x"]}}),
        EXISTING,
    ),
    Case(
        "unicode",
        ask({"naïve": "日本語 🎉", "ß": "\u2028\t\x01"}),
        ask({"ß": "\u2028\t\x01", "naïve": "日本語 🎉"}),
        EXISTING,
    ),
    Case(
        "unicode keys sort by code point",
        ask({"é": 1, "z": 2, "Z": 3, "🎉": 4}),
        ask({"🎉": 4, "Z": 3, "z": 2, "é": 1}),
        EXISTING,
    ),
    Case("composed and decomposed", ask({"name": "é"}), ask({"name": "e\u0301"}), CONFLICT),
    Case("1.0 is not 1", ask({"n": 1.0}), ask({"n": 1}), CONFLICT),
    Case("1.0 again", ask({"n": 1.0}), ask({"n": 1.0}), EXISTING),
    Case("0.1 + 0.2", ask({"n": 0.1 + 0.2}), ask({"n": 0.30000000000000004}), EXISTING),
    Case("0.1 + 0.2 is not 0.3", ask({"n": 0.1 + 0.2}), ask({"n": 0.3}), CONFLICT),
    Case(
        "small and precise floats",
        ask({"n": [1e-07, 123.456, 5e-324, -2.5e-05]}),
        ask({"n": [1e-07, 123.456, 5e-324, -2.5e-05]}),
        EXISTING,
    ),
    Case(
        "the largest double",
        ask({"n": 1.7976931348623157e308}),
        ask({"n": 1.7976931348623157e308}),
        EXISTING,
        sql_hash_differs=True,
    ),
    Case(
        "big ints", ask({"n": 2**70, "m": -(10**30)}), ask({"n": 2**70, "m": -(10**30)}), EXISTING
    ),
    Case("big ints differ by one", ask({"n": 2**70}), ask({"n": 2**70 + 1}), CONFLICT),
    Case("1e21 again", ask({"n": 1e21}), ask({"n": 1e21}), EXISTING, sql_hash_differs=True),
    Case(
        "1e21 is not its integer",
        ask({"n": 1e21}),
        ask({"n": 10**21}),
        CONFLICT,
        sql_hash_differs=True,
        sql_expected=EXISTING,
    ),
    Case("-0.0 again", ask({"n": -0.0}), ask({"n": -0.0}), EXISTING, sql_hash_differs=True),
    Case(
        "-0.0 is not 0.0",
        ask({"n": -0.0}),
        ask({"n": 0.0}),
        CONFLICT,
        sql_hash_differs=True,
        sql_expected=EXISTING,
    ),
    Case("same run_at", ask(run_at=AT), ask(run_at=AT), EXISTING),
    Case(
        "run_at in another offset",
        ask(run_at=AT),
        ask(run_at=AT.astimezone(timezone(timedelta(hours=-7)))),
        EXISTING,
    ),
    Case("another run_at", ask(run_at=AT), ask(run_at=AT + timedelta(microseconds=1)), CONFLICT),
    Case(
        "run_at with microseconds",
        ask(run_at=AT.replace(microsecond=5)),
        ask(run_at=AT.replace(microsecond=5)),
        EXISTING,
    ),
    Case("run_at or none", ask(run_at=AT), ask(), CONFLICT),
    Case("same delay", ask(delay_seconds=60), ask(delay_seconds=60), EXISTING),
    Case("another delay", ask(delay_seconds=60), ask(delay_seconds=61), CONFLICT),
    Case("same priority", ask(priority=5), ask(priority=5), EXISTING),
    Case("another priority", ask(priority=5), ask(priority=6), CONFLICT),
    Case("priority 0 is not none", ask(priority=0), ask(), CONFLICT),
    Case("same concurrency key", ask(concurrency_key="k"), ask(concurrency_key="k"), EXISTING),
    Case("another concurrency key", ask(concurrency_key="k"), ask(concurrency_key="l"), CONFLICT),
    # A job's max_attempts is not part of its request; a workflow's job's is, when asked.
    Case(
        "another max_attempts",
        ask(max_attempts=2),
        ask(max_attempts=5),
        EXISTING,
        workflow_expected=CONFLICT,
    ),
    Case("max_attempts or none", ask(max_attempts=2), ask(), EXISTING, workflow_expected=CONFLICT),
    # The order and submission policies are part of the request; a key's retry is answered by
    # its job before any policy decides (never debounced, refused or deduplicated).
    Case("same sequence key", ask(sequence_key="s"), ask(sequence_key="s"), EXISTING),
    Case("another sequence key", ask(sequence_key="s"), ask(sequence_key="t"), CONFLICT),
    Case("sequence key or none", ask(sequence_key="s"), ask(), CONFLICT),
    Case(
        "same window",
        ask(unique_key="u-{key}", unique_for_seconds=60),
        ask(unique_key="u-{key}", unique_for_seconds=60),
        EXISTING,
    ),
    Case(
        "another window",
        ask(unique_key="u-{key}", unique_for_seconds=60),
        ask(unique_key="u-{key}", unique_for_seconds=61),
        CONFLICT,
    ),
    Case(
        "same debounce, another payload",
        ask(unique_key="u-{key}", debounce_seconds=30),
        ask({"course": "Rust"}, unique_key="u-{key}", debounce_seconds=30),
        CONFLICT,
    ),
    Case(
        "same debounce",
        ask(unique_key="u-{key}", debounce_seconds=30),
        ask(unique_key="u-{key}", debounce_seconds=30),
        EXISTING,
    ),
    Case(
        "a reject retried",
        ask(unique_key="u-{key}", on_duplicate="reject"),
        ask(unique_key="u-{key}", on_duplicate="reject"),
        EXISTING,
    ),
    Case(
        "reject or return_existing",
        ask(unique_key="u-{key}", on_duplicate="reject"),
        ask(unique_key="u-{key}", on_duplicate="return_existing"),
        CONFLICT,
    ),
]


@dataclass(frozen=True)
class Answer:
    decision: KeyDecision
    id: uuid.UUID | None  # the job (or workflow) answered; None for a conflict


def decision_of(result: AcceptResult) -> Answer:
    if result.conflict:
        return Answer(CONFLICT, None)
    return Answer(NEW if result.created else EXISTING, result.job.id)


class Shapes:
    """Every shape of the accept, on the test's database; each a coroutine (ask, key) ->
    Answer. Submissions under one key are told apart from those of other pairs by the key."""

    def __init__(self, store: Store, database_url: str, clients: dict[str, uuid.UUID]) -> None:
        self.store = store
        self.clients = clients
        # Each connection runs every case's statements, more than psycopg's prepare threshold:
        # prepared on one PgBouncer server session, they would be missing or doubled on the next
        # (make test-pgbouncer), as docs/pgbouncer.md says of any application's connection.
        self.caller = psycopg.connect(libpq_url(database_url), prepare_threshold=None)
        self.sql = psycopg.connect(libpq_url(database_url), autocommit=True, prepare_threshold=None)
        self.recorders: dict[str, Recorder] = {}  # one per client: its keys are its own
        self.answered: set[uuid.UUID] = set()  # the jobs answered so far

    def close(self) -> None:
        self.caller.close()
        self.sql.close()

    def by_name(self) -> dict[str, Callable[[Ask, str], Awaitable[Answer]]]:
        return {
            "api": self.api,
            "enqueue": self.enqueue,
            "sql": self.sql_function,
            "workflow": self.workflow,
            "recorder": self.recorder,
        }

    async def api(self, asked: Ask, key: str) -> Answer:
        request = asked.submission(key).request
        return self.told(await self.store.accept_job(self.clients[asked.client], request))

    def told(self, result: AcceptResult) -> Answer:
        """A store's own answer, its job noted as answered."""
        answer = decision_of(result)
        if answer.id is not None:
            self.answered.add(answer.id)
        return answer

    async def batch(self, first: Ask, second: Ask, key: str) -> tuple[Answer, Answer]:
        """Both in one ``accept_jobs`` when one client sends them, else one call each."""
        requests = [first.submission(key).request, second.submission(key).request]
        if first.client == second.client:
            made, again = await self.store.accept_jobs(self.clients[first.client], requests)
        else:
            [made] = await self.store.accept_jobs(self.clients[first.client], requests[:1])
            [again] = await self.store.accept_jobs(self.clients[second.client], requests[1:])
        return self.told(made), self.told(again)

    async def enqueue(self, asked: Ask, key: str) -> Answer:
        try:
            job = jobrelay.enqueue(
                self.caller,
                client=asked.client,
                type=asked.type,
                payload=asked.payload,
                key=key,
                run_at=asked.run_at,
                delay_seconds=asked.delay_seconds,
                max_attempts=asked.max_attempts,
                **asked.flow_fields(key),
            )
        except IdempotencyConflict:
            return Answer(CONFLICT, None)
        finally:
            self.caller.commit()  # a conflict leaves the transaction usable: nothing to undo
        return self.seen(job.id)

    def seen(self, job_id: uuid.UUID) -> Answer:
        """For a shape that answers only the job: existing when an earlier submission of this
        test was answered that job (every job here was made by one), else new."""
        decision = EXISTING if job_id in self.answered else NEW
        self.answered.add(job_id)
        return Answer(decision, job_id)

    async def sql_function(self, asked: Ask, key: str) -> Answer:
        try:
            row = self.sql.execute(
                "SELECT jobrelay.jobrelay_enqueue(%s, %s, %s::jsonb, %s, run_at => %s, "
                "priority => %s, sequence_key => %s)",
                (
                    asked.client,
                    asked.type,
                    json.dumps(asked.payload),
                    key,
                    asked.run_at,
                    asked.priority,
                    asked.sequence_key,
                ),
            ).fetchone()
        except psycopg.errors.UniqueViolation as error:
            assert (error.diag.message_primary or "").startswith("idempotency_conflict:")
            return Answer(CONFLICT, None)
        assert row is not None
        return self.seen(row[0])

    async def workflow(self, asked: Ask, key: str) -> Answer:
        request = asked.submission(key).request
        step = WorkflowStep("only", request, (), asked.max_attempts)
        submission = WorkflowSubmission(key, OnFailure.CANCEL_DEPENDENTS, (step,))
        accepted = await WorkflowStore(self.store).accept(self.clients[asked.client], submission)
        if accepted.conflict:
            return Answer(CONFLICT, None)
        return Answer(NEW if accepted.created else EXISTING, accepted.workflow_id)

    async def recorder(self, asked: Ask, key: str) -> Answer:
        recorder = self.recorders.setdefault(asked.client, Recorder())
        made = len(recorder.jobs)
        try:
            job = recorder.submit(
                asked.type,
                asked.payload,
                key=key,
                run_at=asked.run_at,
                delay=asked.delay_seconds,
                max_attempts=asked.max_attempts,
                **asked.flow_fields(key),
            )
        except IdempotencyConflict:
            return Answer(CONFLICT, None)
        return Answer(NEW if len(recorder.jobs) > made else EXISTING, job.id)

    def stored_hash(self, job_id: uuid.UUID) -> str:
        row = self.sql.execute(
            "SELECT request_hash FROM jobrelay.jobs WHERE id = %s", (job_id,)
        ).fetchone()
        assert row is not None, f"no job {job_id}"
        request_hash: str = row[0]
        return request_hash


@pytest.fixture
async def shapes(store: Store, database_url: str) -> AsyncIterator[Shapes]:
    clients = {}
    for name in ("alice", "bob"):
        await make_client(store, name)
        with psycopg.connect(libpq_url(database_url)) as connection:
            row = connection.execute(
                "SELECT id FROM jobrelay.clients WHERE name = %s", (name,)
            ).fetchone()
        assert row is not None
        clients[name] = row[0]
    shapes = Shapes(store, database_url, clients)
    yield shapes
    shapes.close()


def applies(shape: str, case: Case) -> bool:
    asks = (case.first, case.second)
    if shape == "sql":
        return all(asked.in_sql for asked in asks)
    if shape == "workflow":
        return all(asked.in_workflow for asked in asks)
    return True


def expected(case: Case, first_shape: str, second_shape: str) -> KeyDecision:
    if first_shape == second_shape == "workflow" and case.workflow_expected is not None:
        return case.workflow_expected
    if first_shape == second_shape == "sql" and case.sql_expected is not None:
        return case.sql_expected
    return case.expected


def pairs(case: Case) -> Iterator[tuple[str, str]]:
    """Each shape with itself; and each shape that writes a job row with each other one, where
    both take the case (the SQL function only where its hash is Python's)."""
    job_shapes = ["api", "enqueue", "sql"]
    for shape in ("api", "enqueue", "sql", "workflow", "recorder"):
        if applies(shape, case):
            yield shape, shape
    for first in job_shapes:
        for second in job_shapes:
            if first == second or not (applies(first, case) and applies(second, case)):
                continue
            if "sql" in (first, second) and case.sql_hash_differs:
                continue
            yield first, second


@pytest.mark.parametrize("case", CASES, ids=str)
async def test_every_accept_decides_a_case_alike_and_stores_the_one_request_hash(
    case: Case, shapes: Shapes
) -> None:
    run = shapes.by_name()
    answered: dict[tuple[str, str], tuple[KeyDecision, KeyDecision]] = {}
    wanted: dict[tuple[str, str], tuple[KeyDecision, KeyDecision]] = {}
    for first_shape, second_shape in pairs(case):
        key = uuid.uuid4().hex
        python_hash = case.first.submission(key).fingerprint  # of the key's unique key
        first = await run[first_shape](case.first, key)
        second = await run[second_shape](case.second, key)
        answered[first_shape, second_shape] = (first.decision, second.decision)
        wanted[first_shape, second_shape] = (NEW, expected(case, first_shape, second_shape))
        if second.decision is EXISTING:  # the same job (or workflow) answered again
            assert second.id == first.id, (first_shape, second_shape)
        if first_shape in ("api", "enqueue", "sql") and first.id is not None:
            stored = shapes.stored_hash(first.id)
            if first_shape == "sql" and case.sql_hash_differs:
                assert stored != python_hash, "jsonb now tells this number apart: see the doc"
            else:
                assert stored == python_hash, first_shape
    # The batch: both submissions through one accept_jobs (the second meets the first in it).
    key = uuid.uuid4().hex
    made, again = await shapes.batch(case.first, case.second, key)
    answered["batch", "batch"] = (made.decision, again.decision)
    wanted["batch", "batch"] = (NEW, case.expected)
    python_hash = case.first.submission(key).fingerprint
    assert made.id is not None and shapes.stored_hash(made.id) == python_hash
    assert answered == wanted


# --- the policies' own answers: two submissions under two keys, through each accept ----------

NEW_JOB, SAME_JOB, REFUSED = "new job", "same job", "refused"


async def policy_answer(shapes: Shapes, shape: str, asked: Ask, key: str) -> tuple[str, Any]:
    """What one submission got (a new job, the job of its unique key, a refusal) and its job's
    id, through ``shape``; every shape but the recorder commits at once."""
    if shape == "api":
        request = asked.submission(key).request
        result = await shapes.store.accept_job(shapes.clients[asked.client], request)
        if result.rejected:
            return REFUSED, result.job.id
        return (NEW_JOB if result.created else SAME_JOB), result.job.id
    if shape == "enqueue":
        before = set(shapes.answered)
        try:
            job = jobrelay.enqueue(
                shapes.caller,
                client=asked.client,
                type=asked.type,
                payload=asked.payload,
                key=key,
                **asked.flow_fields(key),
            )
        except DuplicateJob as error:
            return REFUSED, uuid.UUID(str(error.extra["job_id"]))
        finally:
            shapes.caller.commit()
        shapes.answered.add(job.id)
        return (SAME_JOB if job.id in before else NEW_JOB), job.id
    if shape == "sql":
        answer = await shapes.sql_function(asked, key)
        return (NEW_JOB if answer.decision is NEW else SAME_JOB), answer.id
    recorder = shapes.recorders.setdefault(asked.client, Recorder())
    made = len(recorder.jobs)
    try:
        recorded = recorder.submit(asked.type, asked.payload, key=key, **asked.flow_fields(key))
    except DuplicateJob as error:
        return REFUSED, uuid.UUID(str(error.extra["job_id"]))
    return (NEW_JOB if len(recorder.jobs) > made else SAME_JOB), recorded.id


async def batch_answers(shapes: Shapes, first: Ask, second: Ask) -> list[tuple[str, Any]]:
    """Both submissions in one ``accept_jobs``, under two keys."""
    requests = [first.submission("b1-" + uuid.uuid4().hex).request]
    requests.append(second.submission("b2-" + uuid.uuid4().hex).request)
    results = await shapes.store.accept_jobs(shapes.clients[first.client], requests)
    answers = []
    for result in results:
        assert isinstance(result, AcceptResult)
        told = REFUSED if result.rejected else NEW_JOB if result.created else SAME_JOB
        answers.append((told, result.job.id))
    return answers


async def both(shapes: Shapes, shape: str, first: Ask, second: Ask) -> list[tuple[str, Any]]:
    if shape == "batch":
        return await batch_answers(shapes, first, second)
    return [
        await policy_answer(shapes, shape, first, "p1-" + uuid.uuid4().hex),
        await policy_answer(shapes, shape, second, "p2-" + uuid.uuid4().hex),
    ]


def job_row(shapes: Shapes, job_id: uuid.UUID) -> Any:
    row = (
        shapes.sql.cursor(row_factory=namedtuple_row)
        .execute(
            "SELECT payload, available_at > now() + interval '20 seconds' AS moved, "
            "sequence_waits, "
            "EXISTS (SELECT 1 FROM jobrelay.outbox o WHERE o.job_id = j.id) AS relayable "
            "FROM jobrelay.jobs j WHERE id = %s",
            (job_id,),
        )
        .fetchone()
    )
    assert row is not None, f"no job {job_id}"
    return row


@pytest.mark.parametrize("shape", ["api", "batch", "enqueue", "recorder"])
async def test_a_reject_refuses_the_second_job_of_a_unique_key_in_every_accept(
    shape: str, shapes: Shapes
) -> None:
    asked = ask(unique_key=f"u-{uuid.uuid4().hex}", on_duplicate="reject")
    (first, made), (second, answered) = await both(shapes, shape, asked, asked)
    assert (first, second) == (NEW_JOB, REFUSED)
    assert answered == made


@pytest.mark.parametrize("shape", ["api", "batch", "enqueue"])
async def test_a_debounce_gives_the_queued_job_the_last_payload_in_every_accept(
    shape: str, shapes: Shapes
) -> None:
    unique = f"u-{uuid.uuid4().hex}"
    first = ask({"edit": 1}, unique_key=unique, debounce_seconds=30)
    second = ask({"edit": 2}, unique_key=unique, debounce_seconds=30)
    (told_first, made), (told_second, answered) = await both(shapes, shape, first, second)
    assert (told_first, told_second, answered) == (NEW_JOB, SAME_JOB, made)
    row = job_row(shapes, made)
    assert row.payload == {"edit": 2} and row.moved


@pytest.mark.parametrize("shape", ["api", "enqueue"])
async def test_a_window_answers_with_a_job_of_the_key_that_ended_in_it_in_every_accept(
    shape: str, shapes: Shapes
) -> None:
    unique = f"u-{uuid.uuid4().hex}"
    windowed = ask(unique_key=unique, unique_for_seconds=600)
    told, made = await policy_answer(shapes, shape, windowed, uuid.uuid4().hex)
    shapes.sql.execute(
        "UPDATE jobrelay.jobs SET state = 'succeeded', finished_at = now() WHERE id = %s", (made,)
    )
    again = await policy_answer(shapes, shape, windowed, uuid.uuid4().hex)
    without = await policy_answer(shapes, shape, ask(unique_key=unique), uuid.uuid4().hex)
    assert (told, again, without[0]) == (NEW_JOB, (SAME_JOB, made), NEW_JOB)


@pytest.mark.parametrize("shape", ["api", "batch", "enqueue", "sql"])
async def test_the_second_job_of_a_sequence_waits_without_an_outbox_row_in_every_accept(
    shape: str, shapes: Shapes
) -> None:
    asked = ask(sequence_key=f"s-{uuid.uuid4().hex}")
    (told_first, ahead), (told_second, behind) = await both(shapes, shape, asked, asked)
    assert (told_first, told_second) == (NEW_JOB, NEW_JOB)
    first, second = job_row(shapes, ahead), job_row(shapes, behind)
    assert (first.sequence_waits, first.relayable) == (False, True)
    assert (second.sequence_waits, second.relayable) == (True, False)
