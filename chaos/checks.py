"""Quiescence and the invariants, read from PostgreSQL, RabbitMQ, the results directory and the
services' logs (docs/invariants.md).

Every accepted job must end succeeded, quarantined (exactly the permanent ones) or cancelled,
with at most one result and at most one side effect; no key may make a second job; nothing may
stay unpublished or in a work queue; the quarantine queue must hold one message per quarantined
job and nothing else.

One allowance (docs/states.md: ``attempts`` counts every claim): an attempt lost to a crash or
an expired lease still counts, so a job whose attempts all ran out that way is quarantined
``attempts_exhausted``. That is correct behaviour, counted as ``exhausted_by_faults``; a
quarantine the journal does not explain that way is a violation.

Flow control (docs/flow-control.md): no more than the limit of ``chaos.limited`` attempts of one
key may ever run at once, as the journal tells it (``attempts_from_journal``,
``limit_excesses``).

Workflows (docs/workflows.md), from ``job_dependencies`` and the journal: no job was claimed
before every job it depends on had succeeded (``child_started_before_parent_finished``), none
was released (``parents_succeeded``) twice without a ``restored`` between (``released_twice``),
and each ended as its kind says, or ``cancelled`` with ``dependency_failed`` under a job it
depends on that was quarantined (or cancelled so). One still ``waiting`` is lost.

Sequences (docs/flow-control.md), from ``jobs.sequence_no`` and the journal: no two jobs of one
client and sequence key ran at once (``sequence_overlaps``, attempts rebuilt as for the limit),
and none was first claimed before every job accepted ahead of it in its key had succeeded or
been cancelled (``sequence_order``). A job still queued behind a quarantined job of its key is
blocked, not lost, when that quarantine is expected (a permanent failure, or attempts used up by
lost leases); behind any other, it is lost.

Batch handlers: ``chaos.batch``'s effect per job (``chaos/handlers.py``) was written once at
most, a succeeded job's result is its effect, and no call took more than its batch size.

Durable execution (docs/durable-execution.md), from ``job_steps``, ``job_signals``, the journal
and the lines ``chaos.durable``'s step functions append (``chaos/handlers.py``): no step's
function ran again in a later attempt than the one that recorded its value, nor twice in one
attempt (``step_run_again``; a run in an earlier attempt, which died before recording, is
allowed and counted); each recorded value is a run's, and the job's result carries the recorded
values (``durable_mismatch``); no signal was returned to two waits nor a wait given two
(``signal_returned_twice``); no job was claimed after a durable sleep before its wake time, by
the database's clock (``woke_early``); a parent made one child at most
(``duplicate_children``), and a child, whose key no client submitted, ended like any job.
"""

from __future__ import annotations

import hashlib
import json
import urllib.parse
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg

from chaos.handlers import (
    BATCH,
    BATCH_EFFECTS,
    BATCH_RUNS_FILE,
    BATCH_SIZE,
    DURABLE,
    LIMITED,
    RUNS_FILE,
    registry as chaos_registry,
)
from chaos.workload import Answers, KeyRecord, Kind, Ledger, Planned, WorkflowRecord
from jobrelay.broker.connection import connect_broker
from jobrelay.core.flow import limit_key
from jobrelay.db.engine import libpq_url
from jobrelay.db.quarantine_store import QUARANTINE_LOCK_KEY
from tests.support.servers import management_request

TERMINAL = ("succeeded", "quarantined", "cancelled")
QUARANTINE_QUEUE = "jobrelay.quarantine"
WORK_QUEUE_PREFIX = "jobrelay.jobs."
# The journal's entries that end an attempt (of the same attempt number as its `claimed`):
# its outcome, or its lease found expired (a re-claim, a rescue, a hold or a release).
ATTEMPT_ENDS = ("succeeded", "retry_scheduled", "quarantined", "cancelled", "lease_expired")
DEPENDENCY_FAILED = "dependency_failed"  # the code of a job cancelled under a failed parent
RELEASE_EVENTS = ("parents_succeeded", "restored")
SEQUENCE_DONE = ("succeeded", "cancelled")  # the ends that let a sequence's next job run


@dataclass(frozen=True)
class JobRow:
    id: str
    key: str
    type: str
    state: str
    attempts: int
    max_attempts: int
    error_code: str | None
    concurrency_key: str | None = None
    finished_at: datetime | None = None
    workflow_id: str | None = None
    workflow_ref: str | None = None
    parent_job_id: str | None = None  # a child job's parent (context.run_child)


@dataclass(frozen=True)
class SequencePlace:
    """A sequenced job's place: its client's sequence key, its number in the order of
    acceptance (``jobs.sequence_no``), and whether it waits, unrelayed, behind the one ahead."""

    client: str
    key: str
    number: int
    waits: bool = False

    @property
    def sequence(self) -> str:
        return f"{self.client}/{self.key}"


@dataclass(frozen=True)
class JournalEntry:
    job_id: str
    event: str
    attempt: int
    at: datetime


@dataclass
class Snapshot:
    jobs: dict[str, JobRow]
    results: dict[str, Any]  # job id -> result document
    result_counts: Counter[str]
    lease_losses: Counter[str]  # job id -> lease_expired events (crashed or hung attempts)
    unpublished: int
    work_queues: dict[str, int]  # queue -> messages (ready + unacked)
    quarantine_messages: Counter[str] = field(default_factory=Counter)  # job id -> messages
    malformed_quarantine: int = 0
    limited_journal: list[JournalEntry] = field(default_factory=list)  # chaos.limited's, in order
    held: int = 0  # `held` events: deliveries put back at a limit
    workflows: dict[str, str] = field(default_factory=dict)  # workflow id -> its key
    parents: dict[str, list[str]] = field(default_factory=dict)  # job id -> its parents' ids
    first_claimed: dict[str, datetime] = field(default_factory=dict)  # of workflow jobs
    first_succeeded: dict[str, datetime] = field(default_factory=dict)  # of workflow jobs
    releases: dict[str, list[str]] = field(default_factory=dict)  # job id -> RELEASE_EVENTS
    durable: DurableFacts = field(default_factory=lambda: DurableFacts())
    sequences: dict[str, SequencePlace] = field(default_factory=dict)  # job id -> its place
    # The sequenced jobs' `claimed`, ATTEMPT_ENDS and journal order.
    sequence_journal: list[JournalEntry] = field(default_factory=list)
    batch_tags: dict[str, str] = field(default_factory=dict)  # chaos.batch job id -> its tag


@dataclass(frozen=True)
class StepRow:
    """A row of ``job_steps``."""

    job_id: str
    name: str
    kind: str
    status: str
    attempt: int
    at: datetime
    value: Any
    wake_at: datetime | None = None


@dataclass(frozen=True)
class SignalRow:
    """A row of ``job_signals``."""

    job_id: str
    key: str | None  # its idempotency key
    value: Any
    taken_by: str | None  # the step name of the wait that took it


@dataclass(frozen=True)
class StepRun:
    """A run of a ``chaos.durable`` step's function, as it logged it."""

    job_id: str
    step: str
    attempt: int
    nonce: str


@dataclass
class DurableFacts:
    """What the durable jobs left in the database."""

    steps: dict[str, dict[str, StepRow]] = field(default_factory=dict)  # job id -> name -> row
    signals: dict[str, list[SignalRow]] = field(default_factory=dict)  # job id -> its signals
    claims: dict[str, list[tuple[int, datetime]]] = field(default_factory=dict)  # `claimed`s


# --- reading ------------------------------------------------------------------------------------


def progress(database_url: str) -> tuple[int, int]:
    """(jobs not terminal, unpublished outbox rows): both 0 at quiescence. A sequenced job that
    waits behind a quarantined job of its key is not counted: it waits for an operator, who
    never comes in a chaos run (the checker judges it)."""
    with psycopg.connect(libpq_url(database_url), connect_timeout=5) as connection:
        row = connection.execute(
            "SELECT (SELECT count(*) FROM jobrelay.jobs j WHERE j.state <> ALL(%s)"
            "  AND NOT (j.sequence_waits AND EXISTS (SELECT 1 FROM jobrelay.jobs q"
            "   WHERE q.client_id = j.client_id AND q.sequence_key = j.sequence_key"
            "   AND q.sequence_no < j.sequence_no AND q.state = 'quarantined'))),"
            " (SELECT count(*) FROM jobrelay.outbox WHERE published_at IS NULL)",
            (list(TERMINAL),),
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def read_database(database_url: str) -> Snapshot:
    with psycopg.connect(libpq_url(database_url), connect_timeout=5) as connection:
        jobs = {
            str(row[0]): JobRow(str(row[0]), *row[1:9], *(_text(value) for value in row[9:]))
            for row in connection.execute(
                "SELECT id, idempotency_key, type, state, attempts, max_attempts,"
                " last_error_code, concurrency_key, finished_at, workflow_id, workflow_ref,"
                " parent_job_id FROM jobrelay.jobs"
            )
        }
        limited_journal, sequence_journal = _attempt_journals(connection)
        held_row = connection.execute(
            "SELECT count(*) FROM jobrelay.job_events WHERE event = 'held'"
        ).fetchone()
        results: dict[str, Any] = {}
        result_counts: Counter[str] = Counter()
        for job_id, result in connection.execute("SELECT job_id, result FROM jobrelay.job_results"):
            results[str(job_id)] = result
            result_counts[str(job_id)] += 1
        lease_losses: Counter[str] = Counter(
            {
                str(job_id): int(n)
                for job_id, n in connection.execute(
                    "SELECT job_id, count(*) FROM jobrelay.job_events WHERE event = 'lease_expired'"
                    " GROUP BY job_id"
                )
            }
        )
        unpublished_row = connection.execute(
            "SELECT count(*) FROM jobrelay.outbox WHERE published_at IS NULL"
        ).fetchone()
        workflows = _read_workflows(connection)
        durable = _read_durable(connection)
        sequences, batch_tags = _read_policies(connection)
    assert unpublished_row is not None and held_row is not None
    snapshot = Snapshot(
        jobs,
        results,
        result_counts,
        lease_losses,
        int(unpublished_row[0]),
        {},
        limited_journal=limited_journal,
        held=int(held_row[0]),
    )
    snapshot.workflows, snapshot.parents, journal = workflows
    snapshot.first_claimed, snapshot.first_succeeded, snapshot.releases = journal
    snapshot.durable = durable
    snapshot.sequences, snapshot.sequence_journal = sequences, sequence_journal
    snapshot.batch_tags = batch_tags
    return snapshot


def _attempt_journals(
    connection: psycopg.Connection[Any],
) -> tuple[list[JournalEntry], list[JournalEntry]]:
    """The `claimed` and ATTEMPT_ENDS entries of ``chaos.limited``'s jobs and of the sequenced
    jobs, each job's in journal order."""
    limited: list[JournalEntry] = []
    sequenced: list[JournalEntry] = []
    for job_id, event, attempt, at, of_limited in connection.execute(
        "SELECT e.job_id, e.event, e.attempt, e.at, j.type = %s FROM jobrelay.job_journal e"
        " JOIN jobrelay.jobs j ON j.id = e.job_id"
        " WHERE (j.type = %s OR j.sequence_key IS NOT NULL) AND e.event = ANY(%s)"
        " ORDER BY e.job_id, e.seq, e.at",
        (LIMITED, LIMITED, ["claimed", *ATTEMPT_ENDS]),
    ):
        entry = JournalEntry(str(job_id), event, int(attempt), at)
        (limited if of_limited else sequenced).append(entry)
    return limited, sequenced


def _read_policies(
    connection: psycopg.Connection[Any],
) -> tuple[dict[str, SequencePlace], dict[str, str]]:
    """The sequenced jobs' places, and ``chaos.batch``'s tags."""
    sequences = {
        str(job_id): SequencePlace(str(client), str(key), int(number), bool(waits))
        for job_id, client, key, number, waits in connection.execute(
            "SELECT id, client_id, sequence_key, sequence_no, sequence_waits FROM jobrelay.jobs"
            " WHERE sequence_key IS NOT NULL"
        )
    }
    tags = {
        str(job_id): str(tag)
        for job_id, tag in connection.execute(
            "SELECT id, payload->>'tag' FROM jobrelay.jobs WHERE type = %s", (BATCH,)
        )
    }
    return sequences, tags


def _read_durable(connection: psycopg.Connection[Any]) -> DurableFacts:
    """The steps and signals of every job, and the `claimed` entries of ``chaos.durable``'s."""
    facts = DurableFacts()
    for row in connection.execute(
        "SELECT job_id, name, kind, status, attempt, at, value, wake_at FROM jobrelay.job_steps"
    ):
        step = StepRow(str(row[0]), *row[1:])
        facts.steps.setdefault(step.job_id, {})[step.name] = step
    for job_id, key, value, taken_by in connection.execute(
        "SELECT job_id, idempotency_key, value, taken_by FROM jobrelay.job_signals ORDER BY id"
    ):
        facts.signals.setdefault(str(job_id), []).append(
            SignalRow(str(job_id), key, value, taken_by)
        )
    for job_id, attempt, at in connection.execute(
        "SELECT e.job_id, e.attempt, e.at FROM jobrelay.job_journal e"
        " JOIN jobrelay.jobs j ON j.id = e.job_id"
        " WHERE j.type = %s AND e.event = 'claimed' ORDER BY e.job_id, e.seq, e.at",
        (DURABLE,),
    ):
        facts.claims.setdefault(str(job_id), []).append((int(attempt), at))
    return facts


WorkflowJournal = tuple[dict[str, datetime], dict[str, datetime], dict[str, list[str]]]


def _read_workflows(
    connection: psycopg.Connection[Any],
) -> tuple[dict[str, str], dict[str, list[str]], WorkflowJournal]:
    """The workflows' keys, the edges, and the journal of the workflows' jobs: first `claimed`,
    first `succeeded` and the release events of each."""
    workflows = {
        str(workflow_id): str(key)
        for workflow_id, key in connection.execute(
            "SELECT id, idempotency_key FROM jobrelay.workflows"
        )
    }
    parents: dict[str, list[str]] = defaultdict(list)
    for job_id, parent_id in connection.execute(
        "SELECT job_id, parent_id FROM jobrelay.job_dependencies ORDER BY job_id, parent_id"
    ):
        parents[str(job_id)].append(str(parent_id))
    first: dict[str, dict[str, datetime]] = {"claimed": {}, "succeeded": {}}
    releases: dict[str, list[str]] = defaultdict(list)
    for job_id, event, at in connection.execute(
        "SELECT e.job_id, e.event, e.at FROM jobrelay.job_journal e JOIN jobrelay.jobs j ON j.id = "
        "e.job_id"
        " WHERE j.workflow_id IS NOT NULL AND e.event = ANY(%s) ORDER BY e.job_id, e.seq, e.at",
        (["claimed", "succeeded", *RELEASE_EVENTS],),
    ):
        if event in first:
            first[event].setdefault(str(job_id), at)
        else:
            releases[str(job_id)].append(event)
    return dict(workflows), dict(parents), (first["claimed"], first["succeeded"], dict(releases))


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def work_queue_depths(api_url: str, vhost: str) -> dict[str, int]:
    """Messages (ready + unacknowledged) per work queue, from the management API (its figures
    lag by a few seconds: ask until they settle)."""
    quoted = urllib.parse.quote(vhost, safe="")
    queues = management_request(api_url, "GET", f"/api/queues/{quoted}") or []
    return {
        queue["name"]: int(queue.get("messages", 0) or 0)  # ready + unacknowledged
        for queue in queues
        if str(queue["name"]).startswith(WORK_QUEUE_PREFIX)
    }


async def ready_messages(amqp_url: str, queue: str) -> int:
    """Exact count of ready messages (a passive declare answers from the queue itself)."""
    connection = await connect_broker(amqp_url, seconds=10)  # any node of a cluster
    async with connection:
        channel = await connection.channel()
        declared = await channel.declare_queue(queue, passive=True)
        return int(declared.declaration_result.message_count or 0)


async def read_quarantine(amqp_url: str, database_url: str) -> tuple[Counter[str], int]:
    """Job id -> messages in the quarantine queue, and how many bodies name no job. Messages
    are fetched without ack and return to the queue when the connection closes.

    Read under jobrelay's quarantine lock (``jobrelay.db.quarantine_store``): a dispatcher's
    sweep holds the queue's messages for a moment, and a read beside it would miss them."""
    found: Counter[str] = Counter()
    malformed = 0
    async with await psycopg.AsyncConnection.connect(
        libpq_url(database_url), connect_timeout=5
    ) as lock:
        await lock.execute("SELECT pg_advisory_xact_lock(%s)", (QUARANTINE_LOCK_KEY,))
        connection = await connect_broker(amqp_url, seconds=10)  # any node of a cluster
        async with connection:
            channel = await connection.channel()
            queue = await channel.declare_queue(QUARANTINE_QUEUE, passive=True)
            while (message := await queue.get(no_ack=False, fail=False, timeout=10)) is not None:
                try:
                    found[str(json.loads(message.body)["job_id"])] += 1
                except (ValueError, KeyError, TypeError):
                    malformed += 1
        await lock.rollback()  # releases the lock
    return found, malformed


def quarantined_ids(database_url: str) -> set[str]:
    with psycopg.connect(libpq_url(database_url), connect_timeout=5) as connection:
        return {
            str(row[0])
            for row in connection.execute(
                "SELECT id FROM jobrelay.jobs WHERE state = 'quarantined'"
            )
        }


def quarantine_consistent(quarantined: set[str], found: Counter[str], malformed: int) -> bool:
    """Exactly one message per quarantined job and no other (docs/invariants.md, 8)."""
    return not malformed and set(found) == quarantined and all(n == 1 for n in found.values())


# --- the services' logs -------------------------------------------------------------------------


@dataclass
class LogFacts:
    reports_written: Counter[str] = field(default_factory=Counter)  # job id -> "report written"
    reports_found: Counter[str] = field(default_factory=Counter)
    bugs: list[str] = field(default_factory=list)  # lines the services mark as a bug


def read_logs(paths: list[Path]) -> LogFacts:
    facts = LogFacts()
    for path in paths:
        if not path.exists():
            continue
        for line in path.read_text(errors="replace").splitlines():
            if not line.startswith("{"):
                continue
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            message = str(entry.get("msg", ""))
            if message == "report written":
                facts.reports_written[str(entry.get("job_id"))] += 1
            elif message.startswith("report found"):
                facts.reports_found[str(entry.get("job_id"))] += 1
            if entry.get("event") == "bug":
                facts.bugs.append(f"{path.name}: {line[:300]}")
    return facts


# --- the concurrency limit ---------------------------------------------------------------------


@dataclass(frozen=True)
class Attempt:
    """One attempt of a limited job as the journal tells it, from its `claimed` to its end."""

    job_id: str
    number: int
    key: str  # the limit's key (``limit_key``)
    start: datetime
    end: datetime
    ended_by: str | None  # its end's event; None: the journal has none (counted until the
    # job finished)

    @property
    def ended(self) -> bool:
        return self.ended_by is not None


@dataclass(frozen=True)
class Excess:
    """A moment when more attempts of one key ran at once than the limit allows."""

    key: str
    at: datetime
    running: tuple[Attempt, ...]  # the last one started over the limit

    def describe(self) -> str:
        attempts = ", ".join(
            f"{a.job_id}#{a.number} [{a.start.isoformat()} .. {a.end.isoformat()}"
            f" {a.ended_by or 'no end'}]"
            for a in self.running
        )
        at = self.at.isoformat()
        return f"key {self.key!r}: {len(self.running)} attempts at {at}: {attempts}"


def attempts_from_journal(
    entries: Iterable[JournalEntry], keys: Mapping[str, str], finished: Mapping[str, datetime]
) -> list[Attempt]:
    """The attempts of the jobs of ``entries`` (their `claimed` and ATTEMPT_ENDS, each job's in
    journal order), under the key ``keys`` gives each job. An attempt ends at the first entry of
    ATTEMPT_ENDS after its `claimed` with its number; with none, when its job finished
    (``finished``), else at the job's last entry."""
    journals: dict[str, list[JournalEntry]] = defaultdict(list)
    for entry in entries:
        journals[entry.job_id].append(entry)
    attempts = []
    for job_id, journal in journals.items():
        for position, claimed in enumerate(journal):
            if claimed.event != "claimed":
                continue
            end = next(
                (
                    later
                    for later in journal[position + 1 :]
                    if later.attempt == claimed.attempt and later.event in ATTEMPT_ENDS
                ),
                None,
            )
            if end is not None:
                until, ended_by = end.at, end.event
            else:
                until = finished.get(job_id) or max(entry.at for entry in journal)
                ended_by = None
            attempts.append(
                Attempt(job_id, claimed.attempt, keys[job_id], claimed.at, until, ended_by)
            )
    return attempts


def _running_at_starts(attempts: list[Attempt]) -> Iterator[tuple[datetime, tuple[Attempt, ...]]]:
    """For each start of one key's ``attempts``, the attempts running just after it. An end at
    the same moment as a start comes first: attempts that only touch do not overlap."""
    moments = sorted(
        [(a.start, 1, n) for n, a in enumerate(attempts) if a.end > a.start]
        + [(a.end, 0, n) for n, a in enumerate(attempts) if a.end > a.start]
    )
    running: dict[int, Attempt] = {}
    for at, starts, n in moments:
        if starts:
            running[n] = attempts[n]
            yield at, tuple(running.values())
        else:
            del running[n]


def _by_key(attempts: Iterable[Attempt]) -> list[tuple[str, list[Attempt]]]:
    by_key: dict[str, list[Attempt]] = defaultdict(list)
    for attempt in attempts:
        by_key[attempt.key].append(attempt)
    return sorted(by_key.items())


def limit_excesses(attempts: Iterable[Attempt], limit: int) -> tuple[list[Excess], int]:
    """The moments (starts) when more than ``limit`` attempts of one key ran at once, and the
    most that ever ran at once of any key."""
    excesses = []
    peak = 0
    for key, of_key in _by_key(attempts):
        for at, running in _running_at_starts(of_key):
            peak = max(peak, len(running))
            if len(running) > limit:
                excesses.append(Excess(key, at, running))
    return excesses, peak


# --- sequences ----------------------------------------------------------------------------------


def sequence_overlaps(attempts: Iterable[Attempt]) -> list[Excess]:
    """The moments (starts) when attempts of two jobs of one sequence (the attempts' key) ran at
    once. The attempts are ``attempts_from_journal``'s, as for the limit: one whose lease
    expired ends at its `lease_expired` entry (after it its work is fenced out and its job may
    be claimed again), one the journal never ends runs until its job finished. Two attempts of
    one job that overlap so are the lease's business, not the sequence's: not counted."""
    overlaps = []
    for key, of_key in _by_key(attempts):
        for at, running in _running_at_starts(of_key):
            if len({attempt.job_id for attempt in running}) > 1:
                overlaps.append(Excess(key, at, running))
    return overlaps


def sequence_order(snapshot: Snapshot) -> list[tuple[str, str]]:
    """(job id, what happened) for each sequenced job first claimed before every job accepted
    ahead of it in its sequence had succeeded or been cancelled."""
    first_claimed: dict[str, datetime] = {}
    done: dict[str, datetime] = {}  # job id -> its last SEQUENCE_DONE entry
    for entry in snapshot.sequence_journal:
        if entry.event == "claimed":
            first_claimed.setdefault(entry.job_id, entry.at)
        elif entry.event in SEQUENCE_DONE:
            done[entry.job_id] = entry.at
    early = []
    for sequence, job_ids in _in_order(snapshot).items():
        for position, job_id in enumerate(job_ids):
            claimed = first_claimed.get(job_id)
            if claimed is None:
                continue
            for ahead in job_ids[:position]:
                ended = _sequence_done_at(snapshot, ahead, done)
                if ended is None or claimed < ended:
                    state = snapshot.jobs[ahead].state if ahead in snapshot.jobs else "missing"
                    when = ended.isoformat() if ended else "never"
                    early.append(
                        (
                            job_id,
                            f"{sequence}: job {job_id} claimed at {claimed.isoformat()}, job "
                            f"{ahead} ahead of it {state}, done at {when}",
                        )
                    )
                    break
    return early


def _in_order(snapshot: Snapshot) -> dict[str, list[str]]:
    """Each sequence's job ids in the order of acceptance."""
    places = sorted(snapshot.sequences.items(), key=lambda item: item[1].number)
    sequences: dict[str, list[str]] = defaultdict(list)
    for job_id, place in places:
        sequences[place.sequence].append(job_id)
    return dict(sequences)


def _sequence_done_at(
    snapshot: Snapshot, job_id: str, done: Mapping[str, datetime]
) -> datetime | None:
    """When the job succeeded or was cancelled (the later of its journal's last such entry and
    its ``finished_at``); None when it ended neither way."""
    job = snapshot.jobs.get(job_id)
    if job is None or job.state not in SEQUENCE_DONE:
        return None
    moments = [at for at in (done.get(job_id), job.finished_at) if at]
    return max(moments) if moments else None


def blocked_by(snapshot: Snapshot, job_id: str) -> JobRow | None:
    """The quarantined job that holds this one back: the first job ahead of it in its sequence
    that has not succeeded or been cancelled, when that one is quarantined and this one still
    waits queued (no outbox row); None otherwise."""
    place = snapshot.sequences.get(job_id)
    job = snapshot.jobs.get(job_id)
    if place is None or job is None or job.state != "queued" or not place.waits:
        return None
    ahead = sorted(
        (other.number, other_id)
        for other_id, other in snapshot.sequences.items()
        if other.sequence == place.sequence and other.number < place.number
    )
    for _, other_id in ahead:
        other = snapshot.jobs.get(other_id)
        if other is not None and other.state not in SEQUENCE_DONE:
            return other if other.state == "quarantined" else None
    return None


def _check_sequences(
    verdict: Verdict, snapshot: Snapshot, expected_kind: Mapping[str, Kind]
) -> None:
    """No two jobs of a sequence ran at once, none started before the ones ahead of it were
    done, and a job still queued behind a quarantined one is so only behind an expected
    quarantine."""
    places = snapshot.sequences
    verdict.figures["sequence_jobs"] = len(places)
    verdict.figures["sequence_keys"] = len({place.sequence for place in places.values()})
    for job_id in places:
        blocker = blocked_by(snapshot, job_id)
        if blocker is None:
            continue
        kind = expected_kind.get(blocker.id)
        if kind is not None and _quarantine_expected(blocker, kind, snapshot):
            verdict.figures["sequence_blocked"] += 1
        else:
            verdict.fail(
                "lost",
                f"job {job_id} still queued behind job {blocker.id}, quarantined "
                f"({blocker.error_code}) unexpectedly",
                job_id,
            )
    keys = {job_id: place.sequence for job_id, place in places.items()}
    finished = {
        job_id: job.finished_at
        for job_id, job in snapshot.jobs.items()
        if job_id in places and job.finished_at is not None
    }
    attempts = attempts_from_journal(snapshot.sequence_journal, keys, finished)
    verdict.figures["sequence_attempts"] = len(attempts)
    for overlap in sequence_overlaps(attempts):
        verdict.fail("sequence_overlaps", overlap.describe(), overlap.running[-1].job_id)
    for job_id, message in sequence_order(snapshot):
        verdict.fail("sequence_order", message, job_id)


# --- batch handlers -------------------------------------------------------------------------


@dataclass(frozen=True)
class BatchRun:
    """One job's part in a call of ``chaos.batch``, as the handler logged it."""

    tag: str
    call: str
    size: int  # the call's payloads
    outcome: str  # written, found (its effect) or failed (a transient failure answered)


def read_batch_runs(results_dir: Path) -> list[BatchRun]:
    """The lines ``chaos.batch``'s calls logged (``chaos/handlers.py``)."""
    return [
        BatchRun(entry["tag"], entry["call"], int(entry["size"]), entry["outcome"])
        for entry in _json_lines(results_dir / BATCH_RUNS_FILE)
    ]


def _json_lines(path: Path) -> list[dict[str, Any]]:
    """A file of one JSON object a line, as a handler appended it; none when it is missing."""
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _check_batches(verdict: Verdict, snapshot: Snapshot, results_dir: Path) -> None:
    """Each ``chaos.batch`` job's effect written once at most and a succeeded job's result the
    effect itself; no call over the batch size; no effect of a job that does not exist."""
    runs = read_batch_runs(results_dir)
    verdict.figures["batch_jobs"] = len(snapshot.batch_tags)
    verdict.figures["batch_calls"] = len({run.call for run in runs})
    verdict.figures["batch_largest"] = max((run.size for run in runs), default=0)
    verdict.figures["batch_failed_elements"] = sum(run.outcome == "failed" for run in runs)
    for run in runs:
        if run.size > BATCH_SIZE:
            verdict.fail("batch_oversized", f"call {run.call} took {run.size} jobs")
    for tag, n in Counter(run.tag for run in runs if run.outcome == "written").items():
        if n > 1:
            verdict.fail("duplicate_effects", f"batch effect {tag} written {n} times")
    effects = results_dir / BATCH_EFFECTS
    for job_id, tag in snapshot.batch_tags.items():
        job = snapshot.jobs.get(job_id)
        if job is None or job.state != "succeeded":
            continue
        path = effects / f"{tag}.json"
        effect = json.loads(path.read_text()) if path.exists() else None
        result = snapshot.results.get(job_id)
        told = {k: result.get(k) for k in ("tag", "nonce")} if isinstance(result, dict) else {}
        if effect is None or told != effect:
            verdict.fail(
                "missing_effect", f"batch job {job_id}: result {result}, effect {effect}", job_id
            )
    tags = set(snapshot.batch_tags.values())
    for path in effects.glob("*.json") if effects.exists() else []:
        if path.stem not in tags:
            verdict.fail("duplicate_effects", f"batch effect {path.name} belongs to no job")


# --- the verdict --------------------------------------------------------------------------------


@dataclass
class Verdict:
    violations: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    figures: Counter[str] = field(default_factory=Counter)
    suspects: list[str] = field(default_factory=list)  # job ids worth a `jobs trace`
    remarks: list[str] = field(default_factory=list)  # worth a look, not violations

    def fail(self, kind: str, message: str, job_id: str | None = None) -> None:
        self.violations[kind].append(message)
        if job_id and job_id not in self.suspects:
            self.suspects.append(job_id)

    @property
    def ok(self) -> bool:
        return not any(self.violations.values())


def verify(ledger: Ledger, snapshot: Snapshot, logs: LogFacts, results_dir: Path) -> Verdict:
    verdict = Verdict()
    expected_kind: dict[str, Kind] = {}
    for record in ledger.records.values():
        if _check_answers(verdict, record, f"key {record.job.key}"):
            for job_id in record.job_ids:
                expected_kind[job_id] = record.job.kind
                _check_job(verdict, record, job_id, snapshot)
    for workflow in ledger.workflows.values():
        if _check_answers(verdict, workflow, f"workflow key {workflow.workflow.key}"):
            verdict.figures["workflows"] += 1
            expected_kind |= _check_workflow(verdict, workflow, snapshot)
    _check_keys(verdict, ledger, snapshot, expected_kind)
    for job_id, count in snapshot.result_counts.items():
        if count > 1:
            verdict.fail("duplicate_results", f"job {job_id} has {count} results", job_id)
    _check_release_order(verdict, snapshot)
    _check_durable(verdict, ledger, snapshot, read_step_runs(results_dir))
    _check_exports(verdict, snapshot, logs, results_dir)
    _check_limit(verdict, snapshot)
    _check_sequences(verdict, snapshot, expected_kind)
    _check_batches(verdict, snapshot, results_dir)
    _check_broker(verdict, snapshot)
    for line in logs.bugs:
        verdict.fail("service_bug", line)
    return verdict


def _check_answers(verdict: Verdict, record: Answers, label: str) -> bool:
    """The key's answers: its problems, and one job (or workflow) at most. True when it was
    accepted."""
    for problem in record.unexpected:
        verdict.fail("unexpected_answer", f"{label}: {problem}")
    if not record.accepted:
        return False
    verdict.figures["accepted"] += 1
    if len(record.ids) > 1 or record.created > 1:
        verdict.fail("duplicate_jobs", f"{label} answered {record.answers}")
    return True


def _check_keys(
    verdict: Verdict, ledger: Ledger, snapshot: Snapshot, expected_kind: Mapping[str, Kind]
) -> None:
    """No job or workflow under a key never submitted; a job never acknowledged (its request
    given up) may exist, but must have finished."""
    for workflow_id, key in snapshot.workflows.items():
        if key not in ledger.workflows:
            verdict.fail("duplicate_jobs", f"workflow {workflow_id} has a key never submitted")
    for job in snapshot.jobs.values():
        if job.parent_job_id is not None:  # a child: its key is its parent's, never submitted
            if job.state not in TERMINAL:
                verdict.fail("lost", f"child job {job.id} ended {job.state}", job.id)
        elif job.workflow_id is None and job.key not in ledger.records:
            verdict.fail("duplicate_jobs", f"job {job.id} has a key never submitted: {job.key}")
        elif (
            job.id not in expected_kind
            and job.state not in TERMINAL
            and blocked_by(snapshot, job.id) is None  # judged by _check_sequences
        ):
            verdict.fail("lost", f"job {job.id} (never acknowledged) ended {job.state}", job.id)


def _check_job(verdict: Verdict, record: KeyRecord, job_id: str, snapshot: Snapshot) -> None:
    job = _finished_job(verdict, job_id, f"{record.job.kind}, key {record.job.key}", snapshot)
    if job is None:
        return
    if job.state == "cancelled":
        if not record.cancel_requested:
            verdict.fail("wrong_state", f"job {job_id} cancelled, never by us", job_id)
        return
    if record.cancel_confirmed:
        verdict.fail("wrong_state", f"job {job_id} cancel confirmed, ended {job.state}", job_id)
    _check_ending(verdict, job, record.job.kind, snapshot)


def _check_workflow(
    verdict: Verdict, record: WorkflowRecord, snapshot: Snapshot
) -> dict[str, Kind]:
    """Each job of an accepted workflow, as its answers named it: the kind of each by id."""
    kinds: dict[str, Kind] = {}
    label = f"workflow key {record.workflow.key}"
    for step in record.workflow.steps:
        ids = record.jobs.get(step.ref, set())
        if len(ids) != 1:
            verdict.fail("duplicate_jobs", f"{label}: job {step.ref} answered as {sorted(ids)}")
        for job_id in ids:
            kinds[job_id] = step.job.kind
            verdict.figures["workflow_jobs"] += 1
            _check_workflow_job(verdict, job_id, step.job.kind, f"{label}:{step.ref}", snapshot)
    return kinds


def _check_workflow_job(
    verdict: Verdict, job_id: str, kind: Kind, label: str, snapshot: Snapshot
) -> None:
    """As a single job, but cancelled only under a job it depends on that failed."""
    job = _finished_job(verdict, job_id, f"{kind}, {label}", snapshot)
    if job is None:
        return
    if job.state != "cancelled":
        _check_ending(verdict, job, kind, snapshot)
        return
    failed = [
        parent for parent in snapshot.parents.get(job_id, []) if _failed(snapshot.jobs.get(parent))
    ]
    if job.error_code == DEPENDENCY_FAILED and failed:
        verdict.figures["dependency_cancelled"] += 1
    else:
        verdict.fail(
            "wrong_state",
            f"workflow job {job_id} ({label}) cancelled ({job.error_code}) with no failed parent",
            job_id,
        )


def _failed(job: JobRow | None) -> bool:
    """Quarantined, or cancelled under a job it depends on: its dependents are cancelled."""
    return job is not None and (
        job.state == "quarantined"
        or (job.state == "cancelled" and job.error_code == DEPENDENCY_FAILED)
    )


def _finished_job(verdict: Verdict, job_id: str, label: str, snapshot: Snapshot) -> JobRow | None:
    """The job when it is terminal, with a result exactly when it succeeded; None (and lost)
    when it is not in the database or not terminal."""
    job = snapshot.jobs.get(job_id)
    if job is None:
        verdict.fail("lost", f"job {job_id} ({label}) is not in the database")
        return None
    verdict.figures[job.state] += 1
    if job.state not in TERMINAL and blocked_by(snapshot, job_id) is not None:
        return None  # queued behind a quarantined job of its sequence: _check_sequences
    if job.state not in TERMINAL:
        parents = ", ".join(
            f"{parent} {snapshot.jobs[parent].state if parent in snapshot.jobs else 'missing'}"
            for parent in snapshot.parents.get(job_id, [])
        )
        waits = f", its parents: {parents}" if parents else ""
        verdict.fail("lost", f"job {job_id} ({label}) still {job.state}{waits}", job_id)
        return None
    has_result = job_id in snapshot.results
    if (job.state == "succeeded") != has_result:
        verdict.fail("result_mismatch", f"job {job_id} {job.state}, result: {has_result}", job_id)
    return job


def _check_ending(verdict: Verdict, job: JobRow, kind: Kind, snapshot: Snapshot) -> None:
    """Succeeded or quarantined, not cancelled: a permanent job quarantined, any other
    succeeded, or quarantined for attempts its lost leases used up."""
    if kind is Kind.PERMANENT:
        if job.state != "quarantined":
            verdict.fail("wrong_state", f"permanent job {job.id} ended {job.state}", job.id)
        return
    if job.state == "quarantined":
        if _exhausted_by_faults(job, snapshot):
            verdict.figures["exhausted_by_faults"] += 1
        else:
            verdict.fail(
                "wrongly_quarantined",
                f"{kind} job {job.id} quarantined ({job.error_code}, attempts "
                f"{job.attempts}/{job.max_attempts}, lease losses {snapshot.lease_losses[job.id]})",
                job.id,
            )


def _exhausted_by_faults(job: JobRow, snapshot: Snapshot) -> bool:
    """Quarantined for attempts that lost leases used up (an allowance, not a violation)."""
    return job.error_code == "attempts_exhausted" and snapshot.lease_losses[job.id] > 0


def _quarantine_expected(job: JobRow, kind: Kind, snapshot: Snapshot) -> bool:
    return job.state == "quarantined" and (
        kind is Kind.PERMANENT or _exhausted_by_faults(job, snapshot)
    )


def _check_release_order(verdict: Verdict, snapshot: Snapshot) -> None:
    """No workflow job claimed before each of its parents succeeded, and none released twice
    without being restored (a replayed parent) in between."""
    for job_id, parents in snapshot.parents.items():
        claimed = snapshot.first_claimed.get(job_id)
        if claimed is None:
            continue
        for parent in parents:
            done = _succeeded_at(snapshot, parent)
            if done is None or claimed < done:
                verdict.fail(
                    "child_started_before_parent_finished",
                    f"job {job_id} claimed at {claimed.isoformat()}, its parent {parent} "
                    f"succeeded at {done.isoformat() if done else 'never'}",
                    job_id,
                )
    for job_id, events in snapshot.releases.items():
        verdict.figures["released"] += events.count("parents_succeeded")
        if _released_twice(events):
            verdict.fail("released_twice", f"job {job_id} released twice: {events}", job_id)


def _succeeded_at(snapshot: Snapshot, job_id: str) -> datetime | None:
    """When the job succeeded: its journal's `succeeded` and its ``finished_at``, the later of
    the two; None when it did not."""
    job = snapshot.jobs.get(job_id)
    if job is None or job.state != "succeeded":
        return None
    moments = [at for at in (snapshot.first_succeeded.get(job_id), job.finished_at) if at]
    return max(moments) if moments else None


def _released_twice(events: Iterable[str]) -> bool:
    since_restored = 0
    for event in events:
        since_restored = 0 if event == "restored" else since_restored + 1
        if since_restored > 1:
            return True
    return False


def _check_exports(verdict: Verdict, snapshot: Snapshot, logs: LogFacts, results_dir: Path) -> None:
    """Each report written once: one "report written" line at most, and the file the result
    describes is there with the same bytes."""
    exports = {job.id for job in snapshot.jobs.values() if job.type == "catalog.export"}
    for job_id, count in logs.reports_written.items():
        if count > 1:
            verdict.fail(
                "duplicate_effects", f"report of job {job_id} written {count} times", job_id
            )
    for job_id in exports:
        job = snapshot.jobs[job_id]
        if job.state != "succeeded":
            continue
        result = snapshot.results.get(job_id) or {}
        path = results_dir / str(result.get("key", f"reports/{job_id}.csv"))
        if not path.exists():
            verdict.fail("missing_effect", f"job {job_id} succeeded without its report", job_id)
            continue
        if hashlib.sha256(path.read_bytes()).hexdigest() != result.get("sha256"):
            verdict.fail(
                "missing_effect", f"report of job {job_id} differs from its result", job_id
            )
        if logs.reports_written[job_id] + logs.reports_found[job_id] == 0:
            verdict.fail("missing_effect", f"no handler run logged for job {job_id}", job_id)
        verdict.figures["reports"] += 1
    reports = results_dir / "reports"
    for path in reports.glob("*.csv") if reports.exists() else []:
        if path.stem not in exports:
            verdict.fail("duplicate_effects", f"report {path.name} belongs to no export job")


def _check_limit(verdict: Verdict, snapshot: Snapshot) -> None:
    """No more than ``chaos.limited``'s concurrency of one key ran at once (the journal's
    attempts); an attempt the journal never ends is a remark, counted until its job finished."""
    limit = chaos_registry.types[LIMITED].limit
    assert limit is not None and limit.concurrency is not None
    limited = [job for job in snapshot.jobs.values() if job.type == LIMITED]
    keys = {job.id: limit_key(limit, job.concurrency_key) for job in limited}
    finished = {job.id: job.finished_at for job in limited if job.finished_at is not None}
    attempts = attempts_from_journal(snapshot.limited_journal, keys, finished)
    verdict.figures["limited_attempts"] = len(attempts)
    for attempt in attempts:
        if not attempt.ended:
            verdict.figures["open_attempts"] += 1
            verdict.remarks.append(
                f"attempt {attempt.number} of {LIMITED} job {attempt.job_id} has no end in the "
                "journal: counted until its job finished"
            )
    excesses, verdict.figures["limited_peak"] = limit_excesses(attempts, limit.concurrency)
    for excess in excesses:
        verdict.fail("limit_exceeded", excess.describe(), excess.running[-1].job_id)
        for attempt in excess.running[:-1]:
            if attempt.job_id not in verdict.suspects:
                verdict.suspects.append(attempt.job_id)
    verdict.figures["held"] = snapshot.held


def _check_broker(verdict: Verdict, snapshot: Snapshot) -> None:
    if snapshot.unpublished:
        verdict.fail("unpublished", f"{snapshot.unpublished} outbox rows never published")
    for queue, depth in snapshot.work_queues.items():
        if depth:
            verdict.fail("work_queue_not_empty", f"{queue} holds {depth} messages")
    quarantined = {job.id for job in snapshot.jobs.values() if job.state == "quarantined"}
    for job_id in sorted(quarantined):
        count = snapshot.quarantine_messages[job_id]
        if count != 1:
            verdict.fail(
                "quarantine_mismatch",
                f"quarantined job {job_id} ({snapshot.jobs[job_id].error_code}) has {count} "
                "messages in the quarantine queue",
                job_id,
            )
    for job_id, count in snapshot.quarantine_messages.items():
        if job_id not in quarantined:
            state = snapshot.jobs[job_id].state if job_id in snapshot.jobs else "unknown"
            verdict.fail(
                "quarantine_mismatch",
                f"{count} quarantine messages for job {job_id}, which is {state}",
                job_id,
            )
    if snapshot.malformed_quarantine:
        verdict.fail("quarantine_mismatch", f"{snapshot.malformed_quarantine} malformed messages")
    verdict.figures["quarantine_messages"] = sum(snapshot.quarantine_messages.values())


# --- durable execution --------------------------------------------------------------------------


def read_step_runs(results_dir: Path) -> list[StepRun]:
    """The runs ``chaos.durable``'s step functions logged (``chaos/handlers.py``)."""
    return [
        StepRun(entry["job_id"], entry["step"], int(entry["attempt"]), entry["nonce"])
        for entry in _json_lines(results_dir / RUNS_FILE)
    ]


def _planned_durable(ledger: Ledger) -> dict[str, Planned]:
    """Each accepted ``chaos.durable`` job's plan, by job id."""
    planned = {
        job_id: record.job
        for record in ledger.records.values()
        if record.job.kind is Kind.DURABLE
        for job_id in record.job_ids
    }
    for workflow in ledger.workflows.values():
        for step in workflow.workflow.steps:
            if step.job.kind is Kind.DURABLE:
                planned |= dict.fromkeys(workflow.jobs.get(step.ref, set()), step.job)
    return planned


def _check_durable(
    verdict: Verdict, ledger: Ledger, snapshot: Snapshot, runs: list[StepRun]
) -> None:
    durable = {job.id: job for job in snapshot.jobs.values() if job.type == DURABLE}
    verdict.figures["durable_jobs"] = len(durable)
    _check_step_runs(verdict, snapshot, durable, runs)
    _check_sleeps(verdict, snapshot, durable)
    _check_signals(verdict, ledger, snapshot, durable)
    _check_children(verdict, snapshot, _planned_durable(ledger))


def _check_step_runs(
    verdict: Verdict, snapshot: Snapshot, durable: Mapping[str, JobRow], runs: list[StepRun]
) -> None:
    """A step's function ran at most once per attempt, never in an attempt after the one that
    recorded it, and the recorded value (and the result's) is the run of that attempt."""
    by_step: dict[tuple[str, str], list[StepRun]] = defaultdict(list)
    for run in runs:
        by_step[(run.job_id, run.step)].append(run)
    verdict.figures["step_runs"] = len(runs)
    for job_id in durable:
        for row in snapshot.durable.steps.get(job_id, {}).values():
            if row.kind == "step":
                verdict.figures["steps_recorded"] += 1
                if (job_id, row.name) not in by_step:
                    verdict.fail(
                        "durable_mismatch", f"job {job_id}: step {row.name} recorded, never run"
                    )
    for (job_id, step), of_step in sorted(by_step.items()):
        label = f"job {job_id}: step {step}"
        for attempt, n in Counter(run.attempt for run in of_step).items():
            if n > 1:
                verdict.fail(
                    "step_run_again", f"{label} ran {n} times in attempt {attempt}", job_id
                )
        row = snapshot.durable.steps.get(job_id, {}).get(step)
        if row is None:
            continue  # never recorded: its attempts died first, or the job ended before
        later = sorted(run.attempt for run in of_step if run.attempt > row.attempt)
        if later:
            verdict.fail(
                "step_run_again",
                f"{label} recorded by attempt {row.attempt}, run again in attempts {later}",
                job_id,
            )
        verdict.figures["step_runs_before_recorded"] += sum(
            1 for run in of_step if run.attempt < row.attempt
        )
        recorded = row.value if isinstance(row.value, dict) else {}
        if not any(
            run.attempt == row.attempt and run.nonce == recorded.get("nonce") for run in of_step
        ):
            verdict.fail(
                "durable_mismatch", f"{label}: recorded {row.value}, no run of its attempt", job_id
            )
        result = snapshot.results.get(job_id)
        if isinstance(result, dict) and step in result and result[step] != row.value:
            verdict.fail(
                "durable_mismatch",
                f"{label}: the result has {result[step]}, recorded {row.value}",
                job_id,
            )


def _check_sleeps(verdict: Verdict, snapshot: Snapshot, durable: Mapping[str, JobRow]) -> None:
    """The first claim after a durable sleep was recorded came at or after its wake time (both
    the database's clock); how late it came, the median and the longest (faults included)."""
    delays: list[int] = []
    for job_id in durable:
        for row in snapshot.durable.steps.get(job_id, {}).values():
            if row.kind != "sleep" or row.wake_at is None:
                continue
            verdict.figures["sleeps"] += 1
            claims = snapshot.durable.claims.get(job_id, [])
            woke = next((at for attempt, at in claims if attempt > row.attempt), None)
            if woke is None:
                continue  # never claimed again: it ended another way (checked as any job)
            if woke < row.wake_at:
                verdict.fail(
                    "woke_early",
                    f"job {job_id}: {row.name} until {row.wake_at.isoformat()}, claimed at "
                    f"{woke.isoformat()}",
                    job_id,
                )
            delays.append(int((woke - row.wake_at).total_seconds() * 1000))
    if delays:
        delays.sort()
        verdict.figures["median_wake_delay_ms"] = delays[len(delays) // 2]
        verdict.figures["max_wake_delay_ms"] = delays[-1]


def _check_signals(
    verdict: Verdict, ledger: Ledger, snapshot: Snapshot, durable: Mapping[str, JobRow]
) -> None:
    """Every signal sent is stored once; each was taken by one wait at most, each wait took one,
    and the wait's recorded value (and the result's) is the signal it took."""
    for sent in ledger.signals:
        if sent.answer == "sent":
            verdict.figures["signals_sent"] += 1
        stored = [
            row for row in snapshot.durable.signals.get(sent.job_id, []) if row.key == sent.key
        ]
        if sent.answer in ("sent", "repeated") and len(stored) != 1:
            verdict.fail(
                "durable_mismatch",
                f"signal {sent.key} answered {sent.answer}, stored {len(stored)} times",
                sent.job_id,
            )
        elif sent.answer not in ("sent", "repeated", "finished"):
            verdict.fail("unexpected_answer", f"signal {sent.key}: {sent.answer}", sent.job_id)
    for job_id in durable:
        signals = snapshot.durable.signals.get(job_id, [])
        taken = [row for row in signals if row.taken_by is not None]
        verdict.figures["signals_taken"] += len(taken)
        for wait, n in Counter(row.taken_by for row in taken).items():
            if n > 1:
                verdict.fail("signal_returned_twice", f"job {job_id}: {wait} took {n}", job_id)
        waits = [
            row
            for row in snapshot.durable.steps.get(job_id, {}).values()
            if row.kind == "signal" and row.status == "done"
        ]
        for wait in waits:
            matching = [row for row in signals if row.value == wait.value]
            if len(matching) != 1 or matching[0].taken_by != wait.name:
                verdict.fail(
                    "signal_returned_twice",
                    f"job {job_id}: {wait.name} returned {wait.value}, which "
                    f"{[row.taken_by for row in matching]} took",
                    job_id,
                )
        result = snapshot.results.get(job_id)
        returned = result.get("signals") if isinstance(result, dict) else None
        if returned is not None:
            values = [json.dumps(value, sort_keys=True) for value in returned]
            if len(set(values)) != len(values):
                verdict.fail("signal_returned_twice", f"job {job_id} got {returned}", job_id)
            if sorted(values) != sorted(json.dumps(w.value, sort_keys=True) for w in waits):
                verdict.fail(
                    "durable_mismatch",
                    f"job {job_id}: the result's signals {returned}, the waits' "
                    f"{[w.value for w in waits]}",
                    job_id,
                )


def _check_children(verdict: Verdict, snapshot: Snapshot, planned: Mapping[str, Planned]) -> None:
    """One child per parent that asked for one; the parent's result says how its child ended."""
    children: dict[str, list[JobRow]] = defaultdict(list)
    for job in snapshot.jobs.values():
        if job.parent_job_id is not None:
            children[job.parent_job_id].append(job)
    verdict.figures["children"] = sum(len(kids) for kids in children.values())
    for parent, kids in children.items():
        if len(kids) > 1:
            ids = sorted(kid.id for kid in kids)
            verdict.fail("duplicate_children", f"job {parent} has children {ids}", parent)
    for job_id, job in planned.items():
        outcome = job.payload.get("child")
        result = snapshot.results.get(job_id)
        if outcome is None or not isinstance(result, dict):
            continue  # no child asked for, or the job did not succeed (checked as any job)
        kids = children.get(job_id, [])
        told = result.get("child") or {}
        if not kids:
            verdict.fail("durable_mismatch", f"job {job_id} succeeded without its child", job_id)
        elif len(kids) > 1:
            continue  # duplicate_children already
        elif outcome == "ok" and told.get("result") != snapshot.results.get(kids[0].id):
            verdict.fail(
                "durable_mismatch",
                f"job {job_id}: its child's result {told}, the child's "
                f"{snapshot.results.get(kids[0].id)} ({kids[0].state})",
                job_id,
            )
        elif outcome == "fails" and told.get("failed") != kids[0].state:
            verdict.fail(
                "durable_mismatch",
                f"job {job_id}: told its child {told}, the child is {kids[0].state}",
                job_id,
            )
