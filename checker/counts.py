"""The whole check of a history: every family's findings, as counts, figures and violations."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from checker.findings import COUNTS, Findings, Violation
from checker.history import History
from checker.leases import check_leases
from checker.limits import check_limits
from checker.queue import check_queue
from checker.steps import check_steps

FAMILIES: tuple[Callable[[History], Findings], ...] = (
    check_queue,
    check_leases,
    check_limits,
    check_steps,
)

# Figures printed even when 0, so that a summary line always has the same first fields.
FIGURES = ("recovered", "blocked", "jobs", "acknowledged_keys", "indeterminate_keys", "attempts")


@dataclass(frozen=True)
class Report:
    counts: Mapping[str, int]  # each count of COUNTS: a run passes when all are 0
    figures: Mapping[str, int]
    violations: tuple[Violation, ...]

    @property
    def passed(self) -> bool:
        return not any(self.counts.values())

    def as_json(self) -> dict[str, object]:
        return {
            "counts": dict(self.counts),
            "figures": dict(self.figures),
            "violations": [{"count": v.count, "message": v.message} for v in self.violations],
        }


def check(history: History) -> Report:
    """Every count of docs/history.md's table, from the history alone."""
    findings = Findings()
    for family in FAMILIES:
        findings.extend(family(history))
    figures = {name: findings.figures[name] for name in FIGURES}
    figures.update(sorted(findings.figures.items()))
    return Report(findings.counts(), figures, tuple(findings.violations))


def summary_line(report: Report) -> str:
    """``checker: lost=0 recovered=3 unexpected=0 ... violations=0 jobs=...``"""
    counts = dict(report.counts)
    fields = {"lost": counts.pop("lost"), "recovered": report.figures["recovered"], **counts}
    fields["violations"] = len(report.violations)
    fields.update((k, v) for k, v in report.figures.items() if k != "recovered")
    return "checker: " + " ".join(f"{name}={value}" for name, value in fields.items())


__all__ = ["COUNTS", "Report", "check", "summary_line"]
