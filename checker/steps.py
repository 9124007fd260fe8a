"""``step_run_again``: a recorded step never runs again (SPEC section 23; durable execution).

A step line (kind ``step``) says which attempt recorded its value. Its function may have run in
an earlier attempt that died before recording (a figure, allowed); it must not run in a later
attempt, nor twice in the recording one.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from checker.findings import Findings
from checker.history import History


def check_steps(history: History) -> Findings:
    findings = Findings()
    runs: dict[tuple[str, str], Counter[int]] = defaultdict(Counter)
    for run in history.step_runs:
        runs[(run.job_id, run.step)][run.attempt] += 1
    findings.figures["step_runs"] = len(history.step_runs)
    for step in history.steps:
        if step.kind != "step" or step.attempt is None:
            continue  # a sleep, a wait or a child: nothing the handler runs
        recorded = step.attempt
        for attempt, count in sorted(runs.get((step.job_id, step.name), Counter()).items()):
            if attempt < recorded:
                findings.figures["step_runs_before_recorded"] += count
            elif attempt > recorded or count > 1:
                findings.fail(
                    "step_run_again",
                    f"job {step.job_id} step {step.name}: ran {count} time(s) in attempt"
                    f" {attempt}, recorded by attempt {recorded}",
                )
    return findings
