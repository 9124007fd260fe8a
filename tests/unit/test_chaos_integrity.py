"""chaos/integrity.py reads pg_amcheck's report: each finding counted once with what it says,
the relations counted from ``--verbose``, and a run that checked nothing is an error, never
"clean". The samples follow pg_amcheck's own format strings (src/bin/pg_amcheck/pg_amcheck.c:
a header line per finding, then the message indented by four spaces) with messages of
verify_heapam.c and verify_nbtree.c."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.integrity import AmcheckError, command, report

VERBOSE = """\
pg_amcheck: including database "jobrelay_chaos"
pg_amcheck: in database "jobrelay_chaos": using amcheck version "1.3" in schema "pg_catalog"
pg_amcheck: checking heap table "jobrelay_chaos.jobrelay.jobs"
pg_amcheck: checking heap table "jobrelay_chaos.pg_toast.pg_toast_16420"
pg_amcheck: checking btree index "jobrelay_chaos.jobrelay.jobs_pkey"
"""

CORRUPT = """\
heap table "jobrelay_chaos.jobrelay.jobs", block 0, offset 3:
    line pointer redirection to item at offset 21840 exceeds maximum offset 38
heap table "jobrelay_chaos.jobrelay.jobs", block 2, offset 7, attribute 4:
    toast value 16444 not found in toast table
btree index "jobrelay_chaos.jobrelay.jobs_pkey":
    ERROR:  heap tuple (0,3) from table "jobs" lacks matching index tuple within index "jobs_pkey"
    HINT:  Retrying verification using the function bt_index_parent_check() might provide a more specific error.
"""  # noqa: E501


def test_a_clean_check_counts_what_it_checked() -> None:
    found = report("127.0.0.1:5433", 0, "", VERBOSE)
    assert (found.tables, found.indexes, found.findings) == (2, 1, [])
    assert found.field == "clean"
    assert found.line("node2") == (
        "pg_amcheck on 127.0.0.1:5433 (new primary node2): 2 relations, 1 indexes checked, "
        "0 problems"
    )


def test_a_corruption_report_is_one_finding_per_header() -> None:
    found = report("127.0.0.1:5433", 2, CORRUPT, VERBOSE)
    assert found.field == "problems:3"
    assert found.findings[0] == (
        'heap table "jobrelay_chaos.jobrelay.jobs", block 0, offset 3:\n'
        "    line pointer redirection to item at offset 21840 exceeds maximum offset 38"
    )
    assert found.findings[2].startswith('btree index "jobrelay_chaos.jobrelay.jobs_pkey":\n')
    assert "lacks matching index tuple" in found.findings[2]
    assert found.findings[2].count("\n") == 2  # the ERROR and its HINT
    assert found.output == CORRUPT


@pytest.mark.parametrize(
    ("returncode", "stdout", "stderr"),
    [
        (1, "", 'pg_amcheck: error: connection to server at "127.0.0.1", port 5433 failed'),
        (2, "", VERBOSE),  # "corruption" with no finding printed: not explained
        (0, "", "pg_amcheck: no relations to check"),  # nothing checked is not clean
    ],
)
def test_a_check_that_did_not_check_is_an_error_not_clean(
    returncode: int, stdout: str, stderr: str
) -> None:
    with pytest.raises(AmcheckError, match=f"exited with {returncode}"):
        report("127.0.0.1:5433", returncode, stdout, stderr)


def test_the_command_checks_heap_and_indexes_at_their_strictest_without_a_password() -> None:
    args = command(Path("/usr/lib/postgresql/15/bin"), "127.0.0.1", 5433, "jobrelay", "db")
    assert args[0] == "/usr/lib/postgresql/15/bin/pg_amcheck"
    assert {"--heapallindexed", "--parent-check", "--install-missing", "--verbose"} <= set(args)
    assert args[-1] == "db"
    assert not any("password" in arg and arg != "--no-password" for arg in args)
