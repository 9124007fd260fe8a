"""The named statements of ``db/sql/*.sql``: each is one constant of ``db/queries.py`` and is
run somewhere, the loader expands the one fragment and refuses a malformed file, the channels
the statements notify are those ``db/channels.py`` listens to, and ``python -m jobrelay.db.sql``
prints a statement as it runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from sqlalchemy import TextClause

from jobrelay.db import channels, queries
from jobrelay.db.sql import STATEMENTS, parse
from jobrelay.db.sql.__main__ import main

PACKAGE = Path(queries.__file__).resolve().parent.parent


def test_every_statement_of_the_files_is_a_constant_of_queries() -> None:
    constants = {name for name, value in vars(queries).items() if isinstance(value, TextClause)}
    assert constants == {name.upper() for name in STATEMENTS}
    for name in STATEMENTS:
        assert getattr(queries, name.upper()).text == STATEMENTS[name].sql


def test_every_named_statement_is_run_somewhere() -> None:
    sources = "\n".join(
        path.read_text() for path in PACKAGE.rglob("*.py") if path.name != "queries.py"
    )
    unused = [n for n in STATEMENTS if not re.search(rf"\.{n.upper()}\b(?!`)", sources)]
    assert unused == []


def test_the_fragment_is_expanded_once_where_it_is_included() -> None:
    including = {name for name, s in STATEMENTS.items() if "moved_dependents AS (" in s.sql}
    assert including == {
        "cancel_job",
        "quarantine_exhausted",
        "finish_jobs",
        "defer_unknown_type",
        "quarantine_delivery_limited",
    }
    for name in including:
        assert STATEMENTS[name].sql.count("moved_dependents AS (") == 1
        assert "-- include:" not in STATEMENTS[name].sql
        assert STATEMENTS[name].makes[-3:] == ("parents_succeeded", "dependency_failed", "wake")
        assert "woken_parents AS (" in STATEMENTS[name].sql


SAMPLE = """-- The file's own comment.

-- name: first
-- makes: cancel
-- What it does.
WITH moved AS (SELECT 1 AS id)
    -- include: tail
SELECT id FROM moved;

-- fragment: tail
-- makes: restore
, more AS (SELECT 2)
"""


def test_a_file_is_read_into_named_statements() -> None:
    (statement,) = parse({"sample.sql": SAMPLE}).values()
    assert statement.name == "first" and statement.file == "sample.sql"
    assert statement.sql == (
        "WITH moved AS (SELECT 1 AS id)\n, more AS (SELECT 2)\nSELECT id FROM moved"
    )
    assert statement.makes == ("cancel", "restore")
    assert statement.comment == "What it does."


@pytest.mark.parametrize(
    ("source", "refused"),
    [
        ("-- name: a\nSELECT 1;\n-- name: a\nSELECT 2;\n", "named twice"),
        ("-- name: a\nSELECT 1\n", "does not end with ';'"),
        ("-- name: a\nSELECT 1\n-- include: b\n;\n", "no fragment named 'b'"),
        ("-- name: a\nSELECT 1;\n-- fragment: b\n, x AS (SELECT 1)\n", "included nowhere"),
    ],
)
def test_a_malformed_file_is_refused(source: str, refused: str) -> None:
    with pytest.raises(ValueError, match=refused):
        parse({"bad.sql": source})


def test_every_channel_a_statement_notifies_is_one_jobrelay_listens_to() -> None:
    notified = {
        channel
        for statement in STATEMENTS.values()
        for channel in re.findall(r"pg_notify\('(\w+)'", statement.sql)
    }
    listened = {channels.CLIENTS_CHANNEL, channels.OUTBOX_CHANNEL, channels.TYPES_CHANNEL}
    assert notified == listened


def test_a_statement_is_printed_as_it_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["finish_jobs"]) == 0
    assert capsys.readouterr().out == queries.FINISH_JOBS.text + ";\n"


def test_a_statement_may_begin_with_an_include() -> None:
    source = (
        "-- name: a\n-- Its comment.\n-- include: body\nSELECT 1;\n"
        "-- fragment: body\nWITH x AS (SELECT 1)\n"
    )
    (statement,) = parse({"begins.sql": source}).values()
    assert statement.sql == "WITH x AS (SELECT 1)\nSELECT 1"
    assert statement.comment == "Its comment."
    for name in ("finish_jobs", "finish_plain_jobs"):
        assert STATEMENTS[name].sql.startswith("WITH asked AS (")
        assert STATEMENTS[name].includes[0] == "finish_moves"


def test_an_unknown_name_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["finish_job"]) == 2
    assert "no statement named finish_job" in capsys.readouterr().err
