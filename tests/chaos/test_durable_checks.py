"""The chaos run's durable-execution checks, on snapshots made by hand: a clean run of
``chaos.durable`` passes, a step run again after it was recorded, a signal returned to two waits,
a wake before its time and a second child are each found, and a step run by an attempt that died
before recording it is allowed."""

from __future__ import annotations

import json
import random
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from chaos.checks import (
    DurableFacts,
    JobRow,
    LogFacts,
    SignalRow,
    Snapshot,
    StepRow,
    Verdict,
    verify,
)
from chaos.handlers import DURABLE, RUNS_FILE
from chaos.workload import Kind, Ledger, Planned, SentSignal, plan

T0 = datetime(2026, 12, 5, tzinfo=UTC)
JOB = "job-d"
CHILD = "job-c"


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def value(attempt: int, nonce: str) -> dict[str, Any]:
    return {"attempt": attempt, "nonce": nonce}


class Case:
    """One succeeded ``chaos.durable`` job: steps first, second (attempt 1) and last (attempt 2),
    a sleep of attempt 1 until t=3, claimed again at t=3.5, two signals taken by its two waits,
    and one child that succeeded."""

    def __init__(self, tmp_path: Path) -> None:
        self.results_dir = tmp_path
        payload = {"sleep": 2.0, "signals": True, "child": "ok"}
        job = Planned("k-d", Kind.DURABLE, DURABLE, payload, signal_delays=(0.5, 4.0))
        self.ledger = Ledger()
        self.ledger.record(job).answers.append((202, JOB))
        signals = [{"key": "k-d:1"}, {"key": "k-d:2"}]
        for signal in signals:
            self.ledger.signals.append(SentSignal(JOB, signal["key"], signal, "sent"))
        self.runs = [
            {"job_id": JOB, "step": "first", **value(1, "f1")},
            {"job_id": JOB, "step": "second", **value(1, "s1")},
            {"job_id": JOB, "step": "last", **value(2, "l2")},
        ]
        steps = {
            "first": StepRow(JOB, "first", "step", "done", 1, at(1), value(1, "f1")),
            "second": StepRow(JOB, "second", "step", "done", 1, at(1), value(1, "s1")),
            "sleep": StepRow(JOB, "sleep", "sleep", "done", 1, at(1), None, wake_at=at(3)),
            "signal:go": StepRow(JOB, "signal:go", "signal", "done", 2, at(4), signals[0]),
            "signal:go#2": StepRow(JOB, "signal:go#2", "signal", "done", 3, at(5), signals[1]),
            "last": StepRow(JOB, "last", "step", "done", 2, at(6), value(2, "l2")),
        }
        self.durable = DurableFacts(
            steps={JOB: steps},
            signals={
                JOB: [
                    SignalRow(JOB, "k-d:1", signals[0], "signal:go"),
                    SignalRow(JOB, "k-d:2", signals[1], "signal:go#2"),
                ]
            },
            claims={JOB: [(1, at(0.5)), (2, at(3.5)), (3, at(4.5))]},
        )
        self.jobs = {
            JOB: JobRow(JOB, "k-d", DURABLE, "succeeded", 3, 7, None, finished_at=at(6)),
            CHILD: JobRow(
                CHILD,
                f"{JOB}:child:demo.sleep",
                "demo.sleep",
                "succeeded",
                1,
                3,
                None,
                finished_at=at(5),
                parent_job_id=JOB,
            ),
        }
        self.results: dict[str, Any] = {
            JOB: {
                "first": value(1, "f1"),
                "second": value(1, "s1"),
                "signals": signals,
                "child": {"result": {"slept": 0.01}},
                "last": value(2, "l2"),
            },
            CHILD: {"slept": 0.01},
        }

    def check(self) -> Verdict:
        lines = "".join(json.dumps(run) + "\n" for run in self.runs)
        (self.results_dir / RUNS_FILE).write_text(lines)
        snapshot = Snapshot(
            self.jobs,
            self.results,
            Counter(dict.fromkeys(self.results, 1)),
            Counter(),
            0,
            {},
            durable=self.durable,
        )
        return verify(self.ledger, snapshot, LogFacts(), self.results_dir)


def test_a_durable_job_that_ran_as_recorded_passes(tmp_path: Path) -> None:
    verdict = Case(tmp_path).check()
    assert verdict.ok, dict(verdict.violations)
    figures = verdict.figures
    assert (figures["durable_jobs"], figures["steps_recorded"], figures["step_runs"]) == (1, 3, 3)
    assert (figures["sleeps"], figures["max_wake_delay_ms"]) == (1, 500)
    assert (figures["signals_sent"], figures["signals_taken"], figures["children"]) == (2, 2, 1)


def test_a_step_run_by_an_attempt_that_died_before_recording_it_is_allowed(
    tmp_path: Path,
) -> None:
    case = Case(tmp_path)
    case.runs.insert(2, {"job_id": JOB, "step": "last", **value(1, "lost")})
    verdict = case.check()
    assert verdict.ok, dict(verdict.violations)
    assert verdict.figures["step_runs_before_recorded"] == 1


def test_a_step_run_again_after_it_was_recorded_is_found(tmp_path: Path) -> None:
    case = Case(tmp_path)
    case.runs.append({"job_id": JOB, "step": "first", **value(2, "again")})
    assert list(case.check().violations) == ["step_run_again"]


def test_a_result_that_did_not_see_the_recorded_value_is_found(tmp_path: Path) -> None:
    case = Case(tmp_path)
    case.results[JOB]["second"] = value(2, "other")
    assert list(case.check().violations) == ["durable_mismatch"]


def test_a_signal_returned_to_two_waits_is_found(tmp_path: Path) -> None:
    case = Case(tmp_path)
    steps = case.durable.steps[JOB]
    first = steps["signal:go"]
    steps["signal:go#2"] = StepRow(JOB, "signal:go#2", "signal", "done", 3, at(5), first.value)
    case.results[JOB]["signals"] = [first.value, first.value]
    assert "signal_returned_twice" in case.check().violations


def test_a_wait_that_took_two_signals_is_found(tmp_path: Path) -> None:
    case = Case(tmp_path)
    signals = case.durable.signals[JOB]
    signals[1] = SignalRow(JOB, "k-d:2", signals[1].value, "signal:go")
    assert "signal_returned_twice" in case.check().violations


def test_a_claim_before_the_wake_time_is_found(tmp_path: Path) -> None:
    case = Case(tmp_path)
    case.durable.claims[JOB][1] = (2, at(2.9))
    assert list(case.check().violations) == ["woke_early"]


def test_a_second_child_is_found(tmp_path: Path) -> None:
    case = Case(tmp_path)
    case.jobs["job-c2"] = JobRow(
        "job-c2", "other", "demo.sleep", "succeeded", 1, 3, None, parent_job_id=JOB
    )
    case.results["job-c2"] = {"slept": 0.01}
    assert list(case.check().violations) == ["duplicate_children"]


def test_an_unfinished_child_is_lost(tmp_path: Path) -> None:
    case = Case(tmp_path)
    child = case.jobs[CHILD]
    case.jobs[CHILD] = JobRow(CHILD, child.key, child.type, "queued", 0, 3, None, parent_job_id=JOB)
    del case.results[CHILD]
    assert "lost" in case.check().violations


def test_the_plan_has_durable_jobs_with_sleeps_signals_and_children() -> None:
    submissions = plan(random.Random(1), 1500, "t")
    durable = [
        s.job for s in submissions if isinstance(s.job, Planned) and s.job.kind is Kind.DURABLE
    ]
    assert 0.08 < len(durable) / len(submissions) < 0.2
    assert any(job.payload["sleep"] for job in durable)
    assert any(len(job.signal_delays) == 3 for job in durable)
    assert {job.payload["child"] for job in durable} == {None, "ok", "fails"}
    # Some signals are due before the job's sleep ends (so before its wait), some after.
    delays = [(job.payload["sleep"], d) for job in durable for d in job.signal_delays]
    assert any(d < sleep for sleep, d in delays) and any(d > sleep + 1 for sleep, d in delays)
