"""What each family of checks hands back: its violations, each named by the count it adds to,
and its figures (what the run did, never a failure by itself)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

# The counts of docs/history.md's last table that fail a run, in the order they are printed.
COUNTS = (
    "lost",
    "unexpected",
    "duplicated",
    "keys_with_two_jobs",
    "duplicate_results",
    "stale_writes",
    "limit_exceeded",
    "batch_oversized",
    "sequence_overlaps",
    "sequence_order",
    "step_run_again",
)


@dataclass(frozen=True)
class Violation:
    count: str  # one of COUNTS
    message: str  # in words, naming the job, key or call


@dataclass
class Findings:
    violations: list[Violation] = field(default_factory=list)
    figures: Counter[str] = field(default_factory=Counter)

    def fail(self, count: str, message: str) -> None:
        assert count in COUNTS, count
        self.violations.append(Violation(count, message))

    def counts(self) -> dict[str, int]:
        """Every count, 0 included, in the order of ``COUNTS``."""
        found = Counter(violation.count for violation in self.violations)
        return {name: found[name] for name in COUNTS}

    def extend(self, other: Findings) -> None:
        self.violations.extend(other.violations)
        self.figures.update(other.figures)
