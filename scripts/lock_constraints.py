"""The lock's versions as a pip constraints file: ``python scripts/lock_constraints.py LOCK OUT``.

``make dist`` writes ``dist/constraints.txt`` from ``requirements/dev.txt`` (every locked
package, the ``django`` extra's included), so that an installation from the built wheel gets
exactly the versions CI ran: ``pip install --find-links dist -c dist/constraints.txt
'jobrelay[django]'``. A constraints file may not carry hashes; the markers stay (one Django for
Python 3.11, another for 3.12 and later). Standard library only.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

# "name==version" and its markers, up to the line's continuation backslash.
PINNED = re.compile(r"^(?P<pin>[A-Za-z0-9][A-Za-z0-9._-]*==[^\s;\\]+(?:\s*;[^\\]+)?)\s*\\?\s*$")


def constraints(lock: str) -> list[str]:
    """Every pinned requirement of a ``uv pip compile`` lock, without its hashes."""
    pins = [match["pin"].strip() for line in lock.splitlines() if (match := PINNED.match(line))]
    if not pins:
        raise ValueError("no pinned requirement (name==version) in the lock")
    return pins


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: lock_constraints.py LOCK OUT", file=sys.stderr)
        return 2
    lock, out = (Path(arg) for arg in argv)
    header = f"# The versions of {lock} (make lock), as pip constraints; written by make dist.\n"
    out.write_text(header + "".join(f"{pin}\n" for pin in constraints(lock.read_text())))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
