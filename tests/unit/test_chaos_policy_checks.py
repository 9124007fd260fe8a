"""The chaos run's sequence and batch checks (chaos/checks.py) on snapshots made by hand: two
jobs of a sequence running at once and a job claimed before the one ahead of it was done are
each found, a job queued behind an expected quarantine is blocked (not lost), and a batch job's
effect is written once and is its result."""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest

from chaos.checks import (
    JobRow,
    JournalEntry,
    LogFacts,
    SequencePlace,
    Snapshot,
    Verdict,
    attempts_from_journal,
    read_batch_runs,
    sequence_overlaps,
    verify,
)
from chaos.handlers import (
    BATCH,
    BATCH_EFFECTS,
    BATCH_RUNS_FILE,
    BatchPayload,
    registry as chaos_registry,
)
from chaos.workload import SEQUENCE_KEYS, Kind, Ledger, Planned, Shares, plan
from tests.unit.test_chaos_limit_check import at  # seconds after a fixed moment

CLIENT = "client-1"
KEY = "sequence-1"


@dataclass
class History:
    """Sequenced jobs of one key, in acceptance order, and what the journal says of them."""

    ledger: Ledger = field(default_factory=Ledger)
    jobs: dict[str, JobRow] = field(default_factory=dict)
    places: dict[str, SequencePlace] = field(default_factory=dict)
    journal: list[JournalEntry] = field(default_factory=list)
    lease_losses: Counter[str] = field(default_factory=Counter)

    def job(
        self,
        job_id: str,
        state: str,
        *,
        kind: Kind = Kind.SLEEP,
        code: str | None = None,
        finished: float | None = None,
        waits: bool = False,
        client: str = CLIENT,
    ) -> None:
        planned = Planned(f"key-{job_id}", kind, "demo.sleep", {}, sequence_key=KEY)
        self.ledger.record(planned).answers.append((202, job_id))
        done = at(finished) if finished is not None else None
        self.jobs[job_id] = JobRow(
            job_id, planned.key, "demo.sleep", state, 1, 3, code, finished_at=done
        )
        self.places[job_id] = SequencePlace(client, KEY, len(self.places) + 1, waits)

    def attempt(
        self,
        job_id: str,
        start: float,
        end: float | None,
        event: str = "succeeded",
        number: int = 1,
    ) -> None:
        self.journal.append(JournalEntry(job_id, "claimed", number, at(start)))
        if end is not None:
            self.journal.append(JournalEntry(job_id, event, number, at(end)))

    def snapshot(self) -> Snapshot:
        succeeded = [job_id for job_id, job in self.jobs.items() if job.state == "succeeded"]
        quarantined = [job_id for job_id, job in self.jobs.items() if job.state == "quarantined"]
        return Snapshot(
            self.jobs,
            {job_id: {} for job_id in succeeded},
            Counter(succeeded),
            self.lease_losses,
            0,
            {},
            quarantine_messages=Counter(quarantined),
            sequences=self.places,
            sequence_journal=sorted(self.journal, key=lambda entry: (entry.job_id, entry.at)),
        )

    def verdict(self, tmp_path: Path) -> Verdict:
        return verify(self.ledger, self.snapshot(), LogFacts(), tmp_path)


def counts(verdict: Verdict) -> dict[str, int]:
    return {kind: len(items) for kind, items in verdict.violations.items() if items}


def clean_pair() -> History:
    history = History()
    history.job("a", "succeeded", finished=1)
    history.job("b", "succeeded", finished=3)
    history.attempt("a", 0, 1)
    history.attempt("b", 2, 3)
    return history


def test_jobs_of_a_sequence_run_one_after_the_other_without_a_violation(tmp_path: Path) -> None:
    verdict = clean_pair().verdict(tmp_path)

    assert verdict.ok, dict(verdict.violations)
    assert verdict.figures["sequence_jobs"] == 2 and verdict.figures["sequence_attempts"] == 2


def test_two_jobs_of_a_sequence_running_at_once_are_an_overlap(tmp_path: Path) -> None:
    history = History()
    history.job("a", "succeeded", finished=1)
    history.job("b", "succeeded", finished=3)
    history.attempt("a", 0, 1)
    history.attempt("b", 0.5, 3)

    assert counts(history.verdict(tmp_path)) == {"sequence_overlaps": 1, "sequence_order": 1}


def test_a_job_claimed_between_two_attempts_of_the_one_ahead_started_early(tmp_path: Path) -> None:
    # a failed at 1 (a retry), ran again from 3 and succeeded at 4; b ran from 2 to 2.5: never at
    # once with a, but before a was done.
    history = History()
    history.job("a", "succeeded", finished=4)
    history.job("b", "succeeded", finished=2.5)
    history.attempt("a", 0, 1, "retry_scheduled")
    history.attempt("a", 3, 4, number=2)
    history.attempt("b", 2, 2.5)

    assert counts(history.verdict(tmp_path)) == {"sequence_order": 1}


def test_a_job_claimed_after_a_cancelled_one_still_waits_for_the_one_before_that(
    tmp_path: Path,
) -> None:
    # a runs 0..5; b, cancelled while it waited (at 1), let c run at 2: c is early.
    history = History()
    history.job("a", "succeeded", finished=5)
    history.job("b", "cancelled", finished=1)
    history.job("c", "succeeded", finished=3)
    history.ledger.records["key-b"].cancel_requested = True
    history.attempt("a", 0, 5)
    history.journal.append(JournalEntry("b", "cancelled", 0, at(1)))
    history.attempt("c", 2, 3)

    assert counts(history.verdict(tmp_path)) == {"sequence_overlaps": 1, "sequence_order": 1}


def test_a_job_after_a_quarantined_one_must_never_run(tmp_path: Path) -> None:
    history = History()
    history.job("a", "quarantined", kind=Kind.PERMANENT, code="permanent_failure", finished=1)
    history.job("b", "succeeded", finished=3)
    history.attempt("a", 0, 1, "quarantined")
    history.attempt("b", 2, 3)

    assert counts(history.verdict(tmp_path)) == {"sequence_order": 1}


def test_an_attempt_ends_at_its_lease_expiry_and_one_without_end_at_its_jobs_end() -> None:
    # a's first attempt lost its lease at 2, its second succeeded at 3; b from 4: no overlap.
    history = clean_pair()
    history.journal = []
    history.attempt("a", 0, 2, "lease_expired")
    history.attempt("a", 2, 3, number=2)
    history.attempt("b", 4, 5)
    keys = {"a": "s", "b": "s"}
    assert sequence_overlaps(attempts_from_journal(history.journal, keys, {})) == []
    # With no end in the journal, a's first attempt runs until a finished (at 4.5): over b's.
    history.journal = [entry for entry in history.journal if entry.event != "lease_expired"]
    attempts = attempts_from_journal(history.journal, keys, {"a": at(4.5)})
    [overlap] = sequence_overlaps(attempts)
    assert {attempt.job_id for attempt in overlap.running} == {"a", "b"}


def test_two_attempts_of_one_job_at_once_are_no_sequence_overlap() -> None:
    journal = [
        JournalEntry("a", "claimed", 1, at(0)),
        JournalEntry("a", "claimed", 2, at(1)),
        JournalEntry("a", "succeeded", 2, at(2)),
    ]

    assert sequence_overlaps(attempts_from_journal(journal, {"a": "s"}, {"a": at(2)})) == []


def test_jobs_of_one_key_under_two_clients_are_two_sequences(tmp_path: Path) -> None:
    history = History()
    history.job("a", "succeeded", finished=2)
    history.job("b", "succeeded", finished=3, client="client-2")
    history.attempt("a", 0, 2)
    history.attempt("b", 1, 3)

    verdict = history.verdict(tmp_path)

    assert verdict.ok, dict(verdict.violations)
    assert verdict.figures["sequence_keys"] == 2


@pytest.mark.parametrize(
    ("kind", "code", "lease_losses"),
    [(Kind.PERMANENT, "permanent_failure", 0), (Kind.SLEEP, "attempts_exhausted", 1)],
    ids=["a permanent failure", "attempts used up by lost leases"],
)
def test_jobs_queued_behind_an_expected_quarantine_are_blocked_not_lost(
    tmp_path: Path, kind: Kind, code: str, lease_losses: int
) -> None:
    history = History()
    history.job("a", "quarantined", kind=kind, code=code, finished=1)
    history.job("b", "queued", waits=True)
    history.job("c", "queued", waits=True)
    history.attempt("a", 0, 1, "quarantined" if kind is Kind.PERMANENT else "lease_expired")
    history.lease_losses["a"] = lease_losses

    verdict = history.verdict(tmp_path)

    assert verdict.ok, dict(verdict.violations)
    assert verdict.figures["sequence_blocked"] == 2


def test_a_job_queued_behind_an_unexpected_quarantine_is_lost(tmp_path: Path) -> None:
    history = History()
    history.job("a", "quarantined", code="handler_failed", finished=1)
    history.job("b", "queued", waits=True)
    history.attempt("a", 0, 1, "quarantined")

    assert counts(history.verdict(tmp_path)) == {"wrongly_quarantined": 1, "lost": 1}


def test_a_job_queued_with_nothing_ahead_to_wait_for_is_lost(tmp_path: Path) -> None:
    history = History()
    history.job("a", "succeeded", finished=1)
    history.job("b", "queued", waits=True)
    history.attempt("a", 0, 1)

    assert counts(history.verdict(tmp_path)) == {"lost": 1}


# --- batch jobs ---------------------------------------------------------------------------------


def batch_history(
    tmp_path: Path, outcomes: list[str], effect: dict[str, str] | None
) -> tuple[Ledger, Snapshot]:
    """One succeeded ``chaos.batch`` job tagged ``t1`` whose result is {"tag": "t1", "nonce":
    "n1"}, the handler's lines for it and its effect file as given."""
    ledger = Ledger()
    ledger.record(Planned("t1", Kind.BATCH, BATCH, {"tag": "t1"})).answers.append((202, "j1"))
    job = JobRow("j1", "t1", BATCH, "succeeded", 1, 3, None, finished_at=at(1))
    lines = [
        {"tag": "t1", "call": f"c{n}", "size": 1, "outcome": o} for n, o in enumerate(outcomes)
    ]
    (tmp_path / BATCH_RUNS_FILE).write_text("".join(json.dumps(line) + "\n" for line in lines))
    if effect is not None:
        (tmp_path / BATCH_EFFECTS).mkdir()
        (tmp_path / BATCH_EFFECTS / "t1.json").write_text(json.dumps(effect))
    result = {"tag": "t1", "nonce": "n1", "call": "c1"}
    snapshot = Snapshot(
        {"j1": job}, {"j1": result}, Counter(["j1"]), Counter(), 0, {}, batch_tags={"j1": "t1"}
    )
    return ledger, snapshot


def test_a_batch_job_failed_once_then_written_once_is_clean(tmp_path: Path) -> None:
    ledger, snapshot = batch_history(tmp_path, ["failed", "written"], {"tag": "t1", "nonce": "n1"})

    verdict = verify(ledger, snapshot, LogFacts(), tmp_path)

    assert verdict.ok, dict(verdict.violations)
    assert verdict.figures["batch_calls"] == 2 and verdict.figures["batch_failed_elements"] == 1


def test_a_batch_effect_written_twice_is_a_duplicate_effect(tmp_path: Path) -> None:
    ledger, snapshot = batch_history(tmp_path, ["written", "written"], {"tag": "t1", "nonce": "n1"})

    assert counts(verify(ledger, snapshot, LogFacts(), tmp_path)) == {"duplicate_effects": 1}


def test_a_succeeded_batch_job_without_its_effect_is_missing_one(tmp_path: Path) -> None:
    ledger, snapshot = batch_history(tmp_path, ["written"], {"tag": "t1", "nonce": "other"})

    assert counts(verify(ledger, snapshot, LogFacts(), tmp_path)) == {"missing_effect": 1}


# --- the plan -----------------------------------------------------------------------------------


def planned_jobs(shares: Shares) -> list[Planned]:
    """The jobs (first submissions, single or in workflows) of a short run's plan."""
    jobs: list[Planned] = []
    for submission in plan(random.Random(7), 1500, "t", shares):
        if submission.duplicate:
            continue
        if isinstance(submission.job, Planned):
            jobs.append(submission.job)
        else:
            jobs.extend(step.job for step in submission.job.steps)
    return jobs


def test_a_plan_sequences_about_15_percent_of_its_jobs_over_two_types_and_batches_some() -> None:
    jobs = planned_jobs(Shares())
    sequenced = [job for job in jobs if job.sequence_key is not None]

    assert 0.10 < len(sequenced) / len(jobs) < 0.20
    assert len({job.sequence_key for job in sequenced}) == SEQUENCE_KEYS
    assert {job.type for job in sequenced} == {"demo.sleep", "demo.fail"}
    assert all(job.body()["sequence_key"] == job.sequence_key for job in sequenced)
    assert 0.05 < sum(job.kind is Kind.BATCH for job in jobs) / len(jobs) < 0.15


def test_a_plan_without_the_shares_has_no_sequence_and_no_batch_job() -> None:
    jobs = planned_jobs(Shares(sequences=False, batches=False))

    assert not any(job.sequence_key is not None or job.kind is Kind.BATCH for job in jobs)


def test_the_batch_handler_fails_a_job_on_its_first_calls_and_writes_each_effect_once(
    tmp_path: Path,
) -> None:
    handler = chaos_registry.types[BATCH].handler
    context = SimpleNamespace(results_dir=tmp_path)  # the one field of BatchContext it reads
    payloads = [BatchPayload(tag="x", fail_times=1), BatchPayload(tag="y")]

    first = asyncio.run(handler(context, payloads))
    second = asyncio.run(handler(context, payloads))

    assert isinstance(first[0], Exception) and first[1]["tag"] == "y"
    assert second[0]["tag"] == "x" and second[1]["nonce"] == first[1]["nonce"]
    outcomes = [(run.tag, run.outcome) for run in read_batch_runs(tmp_path)]
    assert outcomes == [("x", "failed"), ("y", "written"), ("x", "written"), ("y", "found")]
