"""Print named statements exactly as jobrelay runs them, to paste into psql or EXPLAIN:
``python -m jobrelay.db.sql claim_jobs`` (several names: each, in turn; none: every name)."""

from __future__ import annotations

import sys

from jobrelay.db.sql import STATEMENTS


def main(names: list[str]) -> int:
    if not names:
        for name, statement in sorted(STATEMENTS.items()):
            print(f"{name}\t{statement.file}")
        return 0
    unknown = [name for name in names if name not in STATEMENTS]
    if unknown:
        print(f"no statement named {', '.join(unknown)}", file=sys.stderr)
        return 2
    for name in names:
        print(f"{STATEMENTS[name].sql};")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
