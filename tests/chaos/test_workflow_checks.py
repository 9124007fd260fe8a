"""The chaos run's workflow checks, on snapshots made by hand: each violation they exist for is
found, and a job cancelled under a quarantined parent is accounted for, not lost."""

from __future__ import annotations

import random
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

from chaos.checks import JobRow, LogFacts, Snapshot, Verdict, verify
from chaos.workload import WORKFLOW_SHAPE, Kind, Ledger, Planned, PlannedStep, PlannedWorkflow, plan

T0 = datetime(2026, 12, 2, tzinfo=UTC)
WORKFLOW_ID = "wf-1"


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def chain_of_two(kind_of_e: Kind = Kind.SLEEP) -> Ledger:
    """A ledger holding one accepted workflow whose jobs are ``e`` and ``f`` (after ``e``)."""
    workflow = PlannedWorkflow(
        "t-wf-1",
        (
            PlannedStep("e", (), Planned("t-wf-1:e", kind_of_e, "demo.sleep", {})),
            PlannedStep("f", ("e",), Planned("t-wf-1:f", Kind.SLEEP, "demo.sleep", {})),
        ),
    )
    ledger = Ledger()
    record = ledger.workflow_record(workflow)
    record.answers.append((202, WORKFLOW_ID))
    record.jobs = {"e": {"job-e"}, "f": {"job-f"}}
    return ledger


def snapshot(
    e_state: str, f_state: str, *, f_code: str | None = None, f_claimed: float | None = 2.0
) -> Snapshot:
    def row(ref: str, state: str, code: str | None, finished: float) -> JobRow:
        return JobRow(
            f"job-{ref}",
            f"workflow:{WORKFLOW_ID}:{ref}",
            "demo.sleep",
            state,
            1,
            3,
            code,
            finished_at=at(finished)
            if state in ("succeeded", "quarantined", "cancelled")
            else None,
            workflow_id=WORKFLOW_ID,
            workflow_ref=ref,
        )

    jobs = {"job-e": row("e", e_state, None, 1.0), "job-f": row("f", f_state, f_code, 3.0)}
    results: dict[str, object] = {
        job_id: {} for job_id, job in jobs.items() if job.state == "succeeded"
    }
    return Snapshot(
        jobs,
        results,
        Counter(list(results)),
        Counter(),
        0,
        {},
        workflows={WORKFLOW_ID: "t-wf-1"},
        parents={"job-f": ["job-e"]},
        first_claimed={"job-e": at(0.5)} | ({"job-f": at(f_claimed)} if f_claimed else {}),
        first_succeeded={"job-e": at(1.0)} if e_state == "succeeded" else {},
        releases={"job-f": ["parents_succeeded"]} if e_state == "succeeded" else {},
    )


def check(ledger: Ledger, state: Snapshot, tmp_path: Path) -> Verdict:
    return verify(ledger, state, LogFacts(), tmp_path)


def test_a_workflow_plan_is_a_diamond_and_a_chain_of_chaos_kinds() -> None:
    submissions = plan(random.Random(1), 1500, "t")
    workflows = [s.job for s in submissions if isinstance(s.job, PlannedWorkflow)]
    assert workflows and 1500 <= sum(s.size for s in submissions if not s.duplicate) < 1507
    assert all({step.ref: step.after for step in w.steps} == WORKFLOW_SHAPE for w in workflows)
    assert {step.job.kind for w in workflows for step in w.steps} == set(Kind)


def test_a_workflow_that_ran_in_order_passes(tmp_path: Path) -> None:
    ledger = chain_of_two()
    verdict = check(ledger, snapshot("succeeded", "succeeded"), tmp_path)
    assert verdict.ok, dict(verdict.violations)
    assert verdict.figures["workflow_jobs"] == 2


def test_a_child_claimed_before_its_parent_succeeded_is_found(tmp_path: Path) -> None:
    ledger = chain_of_two()
    verdict = check(ledger, snapshot("succeeded", "succeeded", f_claimed=0.9), tmp_path)
    assert list(verdict.violations) == ["child_started_before_parent_finished"]


def test_a_job_released_twice_without_a_restore_is_found(tmp_path: Path) -> None:
    ledger = chain_of_two()
    state = snapshot("succeeded", "succeeded")
    state.releases["job-f"] = ["parents_succeeded", "restored", "parents_succeeded"]
    assert check(ledger, state, tmp_path).ok
    state.releases["job-f"].append("parents_succeeded")
    assert list(check(ledger, state, tmp_path).violations) == ["released_twice"]


def test_a_job_cancelled_under_a_quarantined_parent_is_accounted_for(tmp_path: Path) -> None:
    ledger = chain_of_two(Kind.PERMANENT)
    state = snapshot("quarantined", "cancelled", f_code="dependency_failed", f_claimed=None)
    state.quarantine_messages = Counter({"job-e": 1})
    verdict = check(ledger, state, tmp_path)
    assert verdict.ok, dict(verdict.violations)
    assert verdict.figures["dependency_cancelled"] == 1


def test_a_job_still_waiting_after_its_parents_succeeded_is_lost(tmp_path: Path) -> None:
    ledger = chain_of_two()
    state = snapshot("succeeded", "waiting", f_claimed=None)
    assert list(check(ledger, state, tmp_path).violations) == ["lost"]
