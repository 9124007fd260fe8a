"""Integrity after failover: ``pg_amcheck`` on the run's scratch database at the primary Patroni
names once the run is over (docs/failover.md, "Integrity after failover").

The whole scratch database is checked (the jobrelay schema, the system catalogs and the TOAST
tables): every heap table with ``verify_heapam`` and every B-tree index with
``bt_index_parent_check`` and ``heapallindexed`` (each heap tuple must be found in the index).
The parent check takes a ShareLock on each table: the run calls this once its services have
stopped.

pg_amcheck's exit status: 0 nothing found, 2 corruption found, 1 (or anything else) it could not
check; each finding is a header line on stdout (``heap table "db.schema.table", block B, offset
O:`` or ``btree index "db.schema.index":``) followed by indented lines saying what is wrong.
"""

from __future__ import annotations

import os
import re
import subprocess
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

TIMEOUT = 600.0  # a long profile's database is a few hundred MB at most
FOUND_CORRUPTION = 2
_FINDING = re.compile(r'^(heap table|btree index) "[^"]+".*:$')
_CHECKED_TABLE = re.compile(r'^pg_amcheck: checking heap table "')
_CHECKED_INDEX = re.compile(r'^pg_amcheck: checking btree index "')


class AmcheckError(Exception):
    """pg_amcheck could not be run or could not check (not a finding: the run fails anyway)."""


@dataclass(frozen=True)
class AmcheckReport:
    target: str  # host:port
    tables: int  # heap tables checked (TOAST tables included)
    indexes: int  # B-tree indexes checked
    findings: list[str]  # one per corruption report: its header and its indented lines
    output: str  # pg_amcheck's stdout, as it printed it

    @property
    def field(self) -> str:
        """The summary line's ``amcheck=`` value."""
        return f"problems:{len(self.findings)}" if self.findings else "clean"

    def line(self, primary: str) -> str:
        return (
            f"pg_amcheck on {self.target} (new primary {primary}): {self.tables} relations, "
            f"{self.indexes} indexes checked, {len(self.findings)} problems"
        )


def command(bindir: Path, host: str, port: int, user: str, database: str) -> list[str]:
    """pg_amcheck on one database: heap and B-tree checks at their strictest; ``--verbose``
    names each relation as it is checked (on stderr), which is how they are counted."""
    return [
        str(bindir / "pg_amcheck"),
        *["--host", host, "--port", str(port), "--username", user, "--no-password"],
        "--install-missing",  # amcheck in the scratch database, dropped with it
        "--heapallindexed",
        "--parent-check",
        "--verbose",
        database,
    ]


def findings(stdout: str) -> list[str]:
    """Each corruption report of pg_amcheck's stdout: a header line and the indented lines
    that follow it."""
    found: list[list[str]] = []
    for line in stdout.splitlines():
        if _FINDING.match(line):
            found.append([line])
        elif found and line.startswith((" ", "\t")):
            found[-1].append(line)
    return ["\n".join(lines) for lines in found]


def counted(stderr: str) -> tuple[int, int]:
    """(heap tables, B-tree indexes) that ``--verbose`` says were checked."""
    lines = stderr.splitlines()
    tables = sum(1 for line in lines if _CHECKED_TABLE.match(line))
    indexes = sum(1 for line in lines if _CHECKED_INDEX.match(line))
    return tables, indexes


def report(target: str, returncode: int, stdout: str, stderr: str) -> AmcheckReport:
    """What one pg_amcheck run found; AmcheckError when it did not check (a failure to connect,
    a missing extension, or an exit status its output does not explain)."""
    found = findings(stdout)
    tables, indexes = counted(stderr)
    explained = returncode == 0 or (returncode == FOUND_CORRUPTION and found)
    if not explained or tables == 0:
        raise AmcheckError(
            f"pg_amcheck on {target} exited with {returncode} having checked {tables} tables: "
            + (stderr.strip().splitlines() or ["no output"])[-1]
        )
    return AmcheckReport(target, tables, indexes, found, stdout)


def check(bindir: Path, database_url: str, host: str, port: int) -> AmcheckReport:
    """pg_amcheck on ``database_url``'s database at ``host:port``, as its user (the password
    goes through the environment, never the command line)."""
    parts = urllib.parse.urlsplit(database_url)
    database = urllib.parse.unquote(parts.path.lstrip("/"))
    user = urllib.parse.unquote(parts.username or "postgres")
    env = {**os.environ, "PGPASSWORD": urllib.parse.unquote(parts.password or "")}
    target = f"{host}:{port}"
    try:
        done = subprocess.run(
            command(bindir, host, port, user, database),
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise AmcheckError(f"pg_amcheck on {target} could not run: {error}") from None
    return report(target, done.returncode, done.stdout, done.stderr)
