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
"""

from __future__ import annotations

import hashlib
import json
import urllib.parse
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from chaos.workload import Kind, Ledger
from jobrelay.broker.connection import connect_broker
from jobrelay.db.engine import libpq_url
from jobrelay.db.quarantine_store import QUARANTINE_LOCK_KEY
from tests.support.servers import management_request

TERMINAL = ("succeeded", "quarantined", "cancelled")
QUARANTINE_QUEUE = "jobrelay.quarantine"
WORK_QUEUE_PREFIX = "jobrelay.jobs."


@dataclass(frozen=True)
class JobRow:
    id: str
    key: str
    type: str
    state: str
    attempts: int
    max_attempts: int
    error_code: str | None


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


# --- reading ------------------------------------------------------------------------------------


def progress(database_url: str) -> tuple[int, int]:
    """(jobs not terminal, unpublished outbox rows): both 0 at quiescence."""
    with psycopg.connect(libpq_url(database_url), connect_timeout=5) as connection:
        row = connection.execute(
            "SELECT (SELECT count(*) FROM jobs WHERE state <> ALL(%s)),"
            " (SELECT count(*) FROM outbox WHERE published_at IS NULL)",
            (list(TERMINAL),),
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def read_database(database_url: str) -> Snapshot:
    with psycopg.connect(libpq_url(database_url), connect_timeout=5) as connection:
        jobs = {
            str(row[0]): JobRow(str(row[0]), *row[1:])
            for row in connection.execute(
                "SELECT id, idempotency_key, type, state, attempts, max_attempts,"
                " last_error_code FROM jobs"
            )
        }
        results: dict[str, Any] = {}
        result_counts: Counter[str] = Counter()
        for job_id, result in connection.execute("SELECT job_id, result FROM job_results"):
            results[str(job_id)] = result
            result_counts[str(job_id)] += 1
        lease_losses: Counter[str] = Counter(
            {
                str(job_id): int(n)
                for job_id, n in connection.execute(
                    "SELECT job_id, count(*) FROM job_events WHERE event = 'lease_expired'"
                    " GROUP BY job_id"
                )
            }
        )
        unpublished_row = connection.execute(
            "SELECT count(*) FROM outbox WHERE published_at IS NULL"
        ).fetchone()
    assert unpublished_row is not None
    return Snapshot(jobs, results, result_counts, lease_losses, int(unpublished_row[0]), {})


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
            for row in connection.execute("SELECT id FROM jobs WHERE state = 'quarantined'")
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


# --- the verdict --------------------------------------------------------------------------------


@dataclass
class Verdict:
    violations: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    figures: Counter[str] = field(default_factory=Counter)
    suspects: list[str] = field(default_factory=list)  # job ids worth a `jobs trace`

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
        for problem in record.unexpected:
            verdict.fail("unexpected_answer", f"key {record.job.key}: {problem}")
        if not record.accepted:
            continue
        verdict.figures["accepted"] += 1
        ids = record.job_ids
        created = sum(1 for status, _ in record.answers if status == 202)
        if len(ids) > 1 or created > 1:
            verdict.fail("duplicate_jobs", f"key {record.job.key} answered {record.answers}")
        for job_id in ids:
            expected_kind[job_id] = record.job.kind
            _check_job(verdict, record, job_id, snapshot)
    keys = set(ledger.records)
    for job in snapshot.jobs.values():
        if job.key not in keys:
            verdict.fail("duplicate_jobs", f"job {job.id} has a key never submitted: {job.key}")
        elif job.id not in expected_kind and job.state not in TERMINAL:
            verdict.fail("lost", f"job {job.id} (never acknowledged) ended {job.state}", job.id)
    for job_id, count in snapshot.result_counts.items():
        if count > 1:
            verdict.fail("duplicate_results", f"job {job_id} has {count} results", job_id)
    _check_exports(verdict, snapshot, logs, results_dir)
    _check_broker(verdict, snapshot)
    for line in logs.bugs:
        verdict.fail("service_bug", line)
    return verdict


def _check_job(verdict: Verdict, record: Any, job_id: str, snapshot: Snapshot) -> None:
    job = snapshot.jobs.get(job_id)
    if job is None:
        verdict.fail("lost", f"job {job_id} (key {record.job.key}) is not in the database")
        return
    verdict.figures[job.state] += 1
    if job.state not in TERMINAL:
        verdict.fail("lost", f"job {job_id} ({record.job.kind}) still {job.state}", job_id)
        return
    has_result = job_id in snapshot.results
    if (job.state == "succeeded") != has_result:
        verdict.fail("result_mismatch", f"job {job_id} {job.state}, result: {has_result}", job_id)
    if job.state == "cancelled":
        if not record.cancel_requested:
            verdict.fail("wrong_state", f"job {job_id} cancelled, never by us", job_id)
        return
    if record.cancel_confirmed:
        verdict.fail("wrong_state", f"job {job_id} cancel confirmed, ended {job.state}", job_id)
    if record.job.kind is Kind.PERMANENT:
        if job.state != "quarantined":
            verdict.fail("wrong_state", f"permanent job {job_id} ended {job.state}", job_id)
        return
    if job.state == "quarantined":
        if job.error_code == "attempts_exhausted" and snapshot.lease_losses[job_id] > 0:
            verdict.figures["exhausted_by_faults"] += 1
        else:
            verdict.fail(
                "wrongly_quarantined",
                f"{record.job.kind} job {job_id} quarantined ({job.error_code}, attempts "
                f"{job.attempts}/{job.max_attempts}, lease losses {snapshot.lease_losses[job_id]})",
                job_id,
            )


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
