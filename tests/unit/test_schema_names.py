"""Every statement names jobrelay's objects with their schema, and another schema's name
takes the default's place in them, and nowhere else.

Statements must not depend on a session's search_path (an application's connection in
``enqueue``, PgBouncer in transaction mode): a table named without its schema would be looked
up in the caller's path, where an application may have its own ``jobs``.
"""

from __future__ import annotations

import re

import pytest

from jobrelay.core.settings import Settings, validate_schema_name
from jobrelay.db import queries
from jobrelay.db.schema import OBJECTS, in_schema, translator
from jobrelay.db.sql import STATEMENTS as NAMED
from jobrelay.db.tables import metadata

# Every named statement of db/sql/*.sql, as it runs (its fragment included).
STATEMENTS = {name: statement.sql for name, statement in NAMED.items()}
# An object's name as a whole word: not after a dot (qualified, or a column such as o.jobs)
# and not before one (an alias-like table reference such as jobs.id is still a table name,
# but only after it was named in FROM qualified).
_BARE = re.compile(
    rf"(?<![\w.$]){'|'.join(sorted(OBJECTS, key=len, reverse=True)).join(['(', ')'])}\b(?![.\w])"
)
# Places a table (or a function) is named: after FROM, JOIN, INTO, UPDATE, USING, TABLE, or in
# a FROM list after a comma; and a function call.
_NAMED_AT = re.compile(r"(?:\b(?:FROM|JOIN|INTO|UPDATE|USING|TABLE)\s+|,\s*)$", re.IGNORECASE)


def _without_literals(sql: str) -> str:
    return re.sub(r"--[^\n]*", "", re.sub(r"'(?:[^']|'')*'", "''", sql))


def _unqualified(sql: str) -> list[str]:
    text = _without_literals(sql)
    found = []
    for match in _BARE.finditer(text):
        before = text[: match.start()]
        is_call = text[match.end() :].lstrip().startswith("(") and match[1].startswith("jobrelay_")
        if _NAMED_AT.search(before) or is_call:
            found.append(text[max(0, match.start() - 30) : match.end() + 10].strip())
    return found


def test_the_checker_finds_a_table_named_without_its_schema() -> None:
    assert _unqualified("SELECT 1 FROM jobs j JOIN jobrelay.outbox o ON o.job_id = j.id")
    assert _unqualified("UPDATE jobrelay.outbox o SET x = 1 FROM due, jobs j WHERE true")
    assert _unqualified("SELECT jobrelay_enqueue('a', 'b', '{}', 'k')")
    assert not _unqualified("SELECT j.jobs FROM jobrelay.jobs j WHERE j.type = 'jobs'")


@pytest.mark.parametrize("name", sorted(STATEMENTS))
def test_every_statement_names_jobrelay_objects_with_their_schema(name: str) -> None:
    assert _unqualified(STATEMENTS[name]) == []


def test_the_tables_of_the_models_are_in_the_default_schema() -> None:
    assert {table.schema for table in metadata.tables.values()} == {"jobrelay"}


def test_the_default_schema_translates_nothing() -> None:
    assert translator("jobrelay") is None
    assert in_schema(queries.JOB_BY_ID, "jobrelay") is queries.JOB_BY_ID


def test_another_schema_takes_the_place_of_jobrelay_objects_only() -> None:
    translate = translator("app_jobs")
    assert translate is not None
    sql = (
        "SELECT 'jobrelay.jobs.default', \"jobrelay.jobs\" FROM jobrelay.jobs j "
        "JOIN jobrelay.outbox o ON o.job_id = j.id, x_jobrelay.jobs, jobrelay.jobsx "
        "WHERE jobrelay.jobrelay_enqueue('a') IS NOT NULL"
    )
    assert translate(sql) == (
        "SELECT 'jobrelay.jobs.default', \"jobrelay.jobs\" FROM app_jobs.jobs j "
        "JOIN app_jobs.outbox o ON o.job_id = j.id, x_jobrelay.jobs, jobrelay.jobsx "
        "WHERE app_jobs.jobrelay_enqueue('a') IS NOT NULL"
    )


def test_another_schema_takes_the_place_of_jobrelay_in_a_sequence_named_as_a_regclass() -> None:
    translate = translator("app_jobs")
    assert translate is not None
    leased = translate(queries.LEASE_OUTBOX_BATCH.text)
    assert leased.count("nextval('app_jobs.job_events_id_seq')") == 1
    longer = "SELECT 'jobrelay.job_events_id_seq_x'"
    assert translate(longer) == longer
    # A sequence's place in line (issue 41): ACCEPT_POLICED_JOB's order of acceptance.
    accepted = translate(queries.ACCEPT_POLICED_JOB.text)
    assert accepted.count("nextval('app_jobs.job_sequence_order')") == 1


def test_every_statement_in_another_schema_names_no_default_schema_object() -> None:
    translate = translator("app_jobs")
    assert translate is not None
    for name, sql in STATEMENTS.items():
        translated = _without_literals(translate(sql))
        assert not re.search(r"(?<![\w.])jobrelay\.(?!\w+\.)", translated), name


def test_a_translated_clause_keeps_its_parameters() -> None:
    clause = in_schema(queries.JOB_BY_ID, "app_jobs")
    assert "app_jobs.jobs" in clause.text
    assert clause._bindparams.keys() == queries.JOB_BY_ID._bindparams.keys()


@pytest.mark.parametrize("name", ["Jobs", "1jobs", "job-relay", "a" * 64, "", "x;drop"])
def test_a_schema_name_that_is_not_a_plain_identifier_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="lower-case SQL identifier"):
        validate_schema_name(name)


@pytest.mark.parametrize("name", ["public", "pg_jobs", "information_schema"])
def test_a_reserved_schema_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="reserved"):
        validate_schema_name(name)


def test_the_schema_setting_defaults_to_jobrelay_and_reads_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("JOBRELAY_DATABASE_SCHEMA", raising=False)
    assert Settings().database_schema == "jobrelay"
    monkeypatch.setenv("JOBRELAY_DATABASE_SCHEMA", "app_jobs")
    assert Settings().database_schema == "app_jobs"


def test_a_bad_schema_setting_is_one_line_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from jobrelay.cli.common import CliError, settings_from_env

    monkeypatch.setenv("JOBRELAY_DATABASE_SCHEMA", "public")
    with pytest.raises(CliError) as raised:
        settings_from_env()
    message = str(raised.value)
    assert message.startswith("invalid setting: JOBRELAY_DATABASE_SCHEMA: ")
    assert "reserved" in message and "\n" not in message


def test_enqueue_refuses_a_schema_that_is_not_an_identifier() -> None:
    import jobrelay

    with pytest.raises(ValueError, match="lower-case SQL identifier"):
        jobrelay.enqueue(
            object(),  # type: ignore[arg-type]
            client="alice",
            type="t",
            payload={},
            key="k",
            schema="jobs; DROP TABLE x",
        )
