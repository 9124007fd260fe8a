"""The chaos run's history: what happened, as JSON lines in the format of docs/history.md.

The run writes ``history.jsonl`` in its work directory as it goes: a ``run`` header, each HTTP
try and its answer (``Submitter``), each signal (``Signaller``), then, once the system is
quiet, the handlers' effects, the final rows of the database, the broker's queues, and ``end``.
The independent checker (``python -m checker``, which shares no code with ``chaos/``) reads
only this file; ``compare`` holds its counts against ``chaos/checks.py``'s verdict.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, Any
from uuid import UUID

import psycopg
from psycopg.rows import dict_row

from chaos import checks
from chaos.handlers import registry as chaos_registry
from jobrelay.db.engine import libpq_url

FORMAT = 1
HISTORY_FILE = "history.jsonl"
CHECKER_TIMEOUT = 900.0  # seconds: a long profile's history is read in well under a minute
# (runner's count in checks.Verdict, the checker's count): each pair must agree (both zero or
# both not), docs/history.md "Agreement".
PAIRS = (
    ("lost", "lost"),
    ("duplicate_results", "duplicate_results"),
    ("limit_exceeded", "limit_exceeded"),
    ("sequence_overlaps", "sequence_overlaps"),
    ("sequence_order", "sequence_order"),
    ("step_run_again", "step_run_again"),
    ("batch_oversized", "batch_oversized"),
    ("duplicate_effects", "duplicated"),
    ("duplicate_jobs", "keys_with_two_jobs"),
)
JEPSEN = ("lost", "recovered", "unexpected", "duplicated")  # the total-queue checker's four

# The final rows, each record's statement, its columns named as the line's fields (docs/history.md);
# each job's in its order. Ids are written as text and times as epoch seconds (``_plain``).
FINAL_ROWS = {
    "job": (
        "SELECT id, client_id AS client, idempotency_key AS key, type, state, attempts,"
        " max_attempts, last_error_code AS error_code, concurrency_key, sequence_key,"
        " sequence_no, sequence_waits, workflow_id, workflow_ref, parent_job_id, payload"
        " FROM jobrelay.jobs ORDER BY id"
    ),
    "result": "SELECT job_id, attempt, result FROM jobrelay.job_results ORDER BY job_id, attempt",
    "event": (
        "SELECT job_id, seq, event, attempt, at, detail FROM jobrelay.job_journal"
        " ORDER BY job_id, seq, at"
    ),
    "step": (
        "SELECT job_id, name, kind, status, attempt, value FROM jobrelay.job_steps"
        " ORDER BY job_id, at, name"
    ),
    "workflow": "SELECT id, idempotency_key AS key FROM jobrelay.workflows ORDER BY id",
}


class History:
    """An append-only ``history.jsonl``: one ``json.dumps`` a line, its ``record`` first.
    Written from the run's event loop (and, at the end, from one thread at a time)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        # Truncated once: a work directory used again holds one run's history, never two.
        self.file: IO[str] = path.open("w", encoding="utf-8")
        self.requests = 0
        self.lines = 0

    def write(self, record: str, **fields: Any) -> None:
        self.file.write(json.dumps({"record": record, **fields}) + "\n")
        self.lines += 1

    def close(self) -> None:
        self.file.close()

    # --- the run and its load -----------------------------------------------------------------

    def run(self, profile: str, seed: int) -> None:
        """The header: the limits and batch sizes of the run's own job types."""
        types = chaos_registry.types.values()
        limits = {
            t.name: t.limit.concurrency
            for t in types
            if t.limit is not None and t.limit.concurrency is not None
        }
        sizes = {t.name: t.batch.size for t in types if t.batch is not None}
        self.write(
            "run",
            format=FORMAT,
            profile=profile,
            seed=seed,
            at=time.time(),
            limits=limits,
            batch_sizes=sizes,
        )

    def request(
        self,
        op: str,
        *,
        key: str | None = None,
        job_id: str | None = None,
        body: dict[str, Any] | None = None,
    ) -> int:
        """One HTTP try about to be sent; its ``n``, which its answer names."""
        self.requests += 1
        fields: dict[str, Any] = {"n": self.requests, "at": time.time(), "op": op}
        if key is not None:
            fields["key"] = key
        if job_id is not None:
            fields["job_id"] = job_id
        if body is not None:
            fields["body"] = body
        self.write("request", **fields)
        return self.requests

    def answer(
        self, n: int, status: int | None, document: Any = None, error: str | None = None
    ) -> None:
        """Try ``n``'s answer: its status and the ids it named (a 200/202's), or no status and
        the transport error's name. The document itself is not kept: its payload is the
        request's."""
        named = document if status in (200, 202) and isinstance(document, dict) else {}
        jobs = named.get("jobs")
        self.write(
            "answer",
            n=n,
            at=time.time(),
            status=status,
            id=str(named["id"]) if "id" in named else None,
            jobs={ref: str(job["id"]) for ref, job in jobs.items()}
            if isinstance(jobs, dict)
            else None,
            error=error,
        )

    def signal(self, job_id: str, name: str, key: str, answer: str) -> None:
        self.write("signal", at=time.time(), job_id=job_id, name=name, key=key, answer=answer)

    # --- the end --------------------------------------------------------------------------------

    def write_final_state(
        self, database_url: str, snapshot: checks.Snapshot, results_dir: Path, logs: list[Path]
    ) -> None:
        """Once the system is quiet: the effects, the database's rows, and the broker's queues
        as ``snapshot`` read them (``checks``' readers), then ``end``."""
        self.write_effects(
            checks.read_step_runs(results_dir),
            checks.read_batch_runs(results_dir),
            checks.read_logs(logs),
        )
        self.write_rows(database_url)
        self.write("outbox", unpublished=snapshot.unpublished)
        self.write_broker(
            snapshot.work_queues, snapshot.quarantine_messages, snapshot.malformed_quarantine
        )
        self.write("end", at=time.time())
        self.file.flush()

    def write_effects(
        self,
        step_runs: Iterable[checks.StepRun],
        batch_runs: Iterable[checks.BatchRun],
        logs: checks.LogFacts,
    ) -> None:
        for run in step_runs:
            self.write("effect", effect="step_run", **asdict(run))
        for call in batch_runs:
            self.write("effect", effect="batch_call", **asdict(call))
        for outcome, reports in (("written", logs.reports_written), ("found", logs.reports_found)):
            for job_id, times in sorted(reports.items()):
                for _ in range(times):
                    self.write("effect", effect="report", job_id=job_id, outcome=outcome)

    def write_rows(self, database_url: str) -> None:
        with psycopg.connect(
            libpq_url(database_url), connect_timeout=5, row_factory=dict_row
        ) as connection:
            for record, statement in FINAL_ROWS.items():
                for row in connection.execute(statement):
                    self.write(record, **_plain(row, record))

    def write_broker(
        self, work_queues: dict[str, int], quarantine: Counter[str], malformed: int
    ) -> None:
        for name, messages in sorted(work_queues.items()):
            self.write("queue", name=name, messages=messages)
        for job_id, times in sorted(quarantine.items()):
            for _ in range(times):
                self.write("quarantine_message", job_id=job_id)
        for _ in range(malformed):
            self.write("quarantine_message", job_id=None)


def _plain(row: dict[str, Any], record: str) -> dict[str, Any]:
    """A row as its line's fields; a job's key only when a client gave it (docs/history.md)."""
    fields = {name: _json_value(value) for name, value in row.items()}
    if record == "job" and (fields["workflow_id"] or fields["parent_job_id"]):
        # A workflow's job or a child: its key is one jobrelay made; the workflow's (its own
        # line) or the parent stands for it.
        fields["key"] = None
    return fields


def _json_value(value: Any) -> Any:
    """An id as text and a time as epoch seconds (neither is JSON); any other value as it is."""
    if isinstance(value, datetime):
        return value.timestamp()
    return str(value) if isinstance(value, UUID) else value


# --- the independent checker ----------------------------------------------------------------


@dataclass
class CheckerVerdict:
    """What ``python -m checker HISTORY --json`` said, or why it could not say (``failure``)."""

    counts: dict[str, int] = field(default_factory=dict)
    figures: dict[str, Any] = field(default_factory=dict)
    violations: list[dict[str, Any]] = field(default_factory=list)
    failure: str | None = None

    def count(self, name: str) -> int:
        """A count, or a figure of that name (``recovered`` is one: never a failure)."""
        return int(self.counts.get(name, self.figures.get(name, 0)) or 0)


def run_checker(history: Path, cwd: Path) -> CheckerVerdict:
    """The independent checker as a process of its own: exit 0 clean, 1 violations, anything
    else (2: not a history, a crash) a failure, as is an output that is not its document."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", "checker", str(history), "--json"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=CHECKER_TIMEOUT,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return CheckerVerdict(failure=f"{type(error).__name__}: {error}")
    if done.returncode not in (0, 1):
        return CheckerVerdict(failure=f"exit {done.returncode}: {done.stderr.strip()[-500:]}")
    try:
        document = json.loads(done.stdout)
        verdict = CheckerVerdict(
            {str(name): int(n) for name, n in document["counts"].items()},
            dict(document.get("figures") or {}),
            list(document.get("violations") or []),
        )
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        said = f"{done.stdout[:300]} {done.stderr.strip()[-500:]}".strip()
        return CheckerVerdict(
            failure=f"exit {done.returncode}, unreadable output ({type(error).__name__}): {said}"
        )
    if (done.returncode == 1) != bool(verdict.violations):
        verdict.failure = f"exit {done.returncode} with {len(verdict.violations)} violations"
    return verdict


def compare(verdict: checks.Verdict, checker: CheckerVerdict) -> str:
    """Fail ``verdict`` where the checker failed, found something, or disagrees with it on a
    pair of PAIRS (one zero, the other not); ``agree``, ``disagree`` or ``failed``."""
    if checker.failure is not None:
        verdict.fail("checker_failed", checker.failure)
        return "failed"
    for violation in checker.violations:
        verdict.fail("checker_found", f"{violation.get('count')}: {violation.get('message')}")
    agree = True
    for ours, theirs in PAIRS:
        mine, its = len(verdict.violations.get(ours, [])), checker.count(theirs)
        if bool(mine) != bool(its):
            agree = False
            verdict.fail(
                "checkers_disagree", f"{ours}={mine} (chaos/checks.py), {theirs}={its} (checker)"
            )
    return "agree" if agree else "disagree"


def checker_line(checker: CheckerVerdict, seed: int, profile: str) -> str | None:
    """The checker's counts and figures as the run's line ``chaos: checker: seed=… profile=…
    key=value …`` (read by scripts/correctness.py); None when it could not check."""
    if checker.failure is not None:
        return None
    values = {**checker.counts, **checker.figures}
    fields = " ".join(f"{name}={value}" for name, value in values.items())
    return f"chaos: checker: seed={seed} profile={profile} {fields}"


def summary_parts(status: str, checker: CheckerVerdict) -> list[str]:
    """The summary line's fields: the agreement and Jepsen's four counts ("-" when the checker
    could not check)."""
    counts = {name: "-" if checker.failure else checker.count(name) for name in JEPSEN}
    return [f"checker={status}", *(f"checker_{name}={n}" for name, n in counts.items())]
