"""``python -m checker HISTORY.jsonl [--json]``: check a chaos run's history by itself.

Exit 0 when every count is 0, 1 when one is not, 2 when the file is not a complete history of
format 1 (one line on stderr saying why).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from checker.counts import check, summary_line
from checker.history import HistoryError, read_history

EXPLAINED = 10  # violations explained on stderr; the counts say how many there were


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m checker", description="Check a chaos run's history (docs/history.md)."
    )
    parser.add_argument("history", type=Path, help="the run's history.jsonl")
    parser.add_argument("--json", action="store_true", help="print the report as one document")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    arguments = _arguments(argv)
    try:
        history = read_history(arguments.history)
    except HistoryError as error:
        print(f"checker: {error}", file=sys.stderr)
        return 2
    report = check(history)
    if arguments.json:
        print(json.dumps(report.as_json(), indent=2))
    else:
        print(summary_line(report))
        for violation in report.violations[:EXPLAINED]:
            print(f"checker: {violation.count}: {violation.message}", file=sys.stderr)
        if len(report.violations) > EXPLAINED:
            more = len(report.violations) - EXPLAINED
            print(f"checker: ... and {more} more (--json lists them all)", file=sys.stderr)
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
