"""Every named statement of ``db/sql/*.sql`` parses and plans against the real schema: each is
prepared (libpq's PQprepare, the ``:name`` parameters as ``$n``) on a migrated database, in the
default schema and, translated (``db/schema.py``), in another. A misspelt column, a table of no
migration or a type that does not fit fails here, before any test of behaviour runs it.

And psycopg caches the conversion of even the longest statement, through the limit
``db/engine.py`` raises where psycopg reads it: a statement over psycopg's own 4,096 bytes
would otherwise be parsed again, by regular expressions, on every run."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import _queries as psycopg_queries, pq
from sqlalchemy.dialects import postgresql

from jobrelay.db import engine
from jobrelay.db.engine import libpq_url
from jobrelay.db.migrations import upgrade
from jobrelay.db.schema import translator
from jobrelay.db.sql import STATEMENTS, clause
from tests.support import databases
from tests.support.servers import Servers

_DIALECT = postgresql.psycopg.dialect()  # type: ignore[attr-defined]
_PARAMETER = re.compile(r"%\((\w+)\)s")
OTHER_SCHEMA = "app_jobs"


def psycopg_text(name: str) -> tuple[str, list[str]]:
    """The statement as SQLAlchemy hands it to psycopg (``%(name)s``), and its parameters."""
    compiled = clause(name).compile(dialect=_DIALECT)
    return str(compiled), list(compiled.params)


def numbered(name: str) -> str:
    """The statement with ``$n`` for its parameters, as the server prepares it."""
    sql, _ = psycopg_text(name)
    order: dict[str, int] = {}

    def number(match: re.Match[str]) -> str:
        return f"${order.setdefault(match[1], len(order) + 1)}"

    return _PARAMETER.sub(number, sql).replace("%%", "%")


def prepare_error(connection: psycopg.Connection[Any], sql: str) -> str | None:
    result = connection.pgconn.prepare(b"", sql.encode())
    if result.status == pq.ExecStatus.COMMAND_OK:
        return None
    message = result.error_field(pq.DiagnosticField.MESSAGE_PRIMARY) or b"(no message)"
    return message.decode()


@pytest.fixture
def other_schema_url(servers: Servers) -> Iterator[str]:
    url = databases.create_empty_database(servers.database_url, "jobrelay_prep")
    try:
        upgrade(url, configure_logger=False, schema=OTHER_SCHEMA)
        yield url
    finally:
        databases.drop_database(servers.database_url, url)


def test_the_numbering_takes_every_parameter_once() -> None:
    assert numbered("renew_lease").count("$2") >= 1
    assert ":lease_token" not in numbered("renew_lease")
    assert "%(" not in numbered("finish_jobs")


def test_every_named_statement_prepares_against_the_migrated_schema(
    direct_database_url: str,
) -> None:
    with psycopg.connect(libpq_url(direct_database_url), autocommit=True) as connection:
        failed = {name: prepare_error(connection, numbered(name)) for name in sorted(STATEMENTS)}
    assert {name: error for name, error in failed.items() if error} == {}
    assert len(failed) == len(STATEMENTS) > 100


def test_every_named_statement_prepares_in_another_schema(other_schema_url: str) -> None:
    translate = translator(OTHER_SCHEMA)
    assert translate is not None
    with psycopg.connect(libpq_url(other_schema_url), autocommit=True) as connection:
        connection.execute("SET search_path = public")  # nothing of jobrelay's on the path
        failed = {
            name: prepare_error(connection, translate(numbered(name)))
            for name in sorted(STATEMENTS)
        }
    assert {name: error for name, error in failed.items() if error} == {}


def test_a_statement_naming_a_missing_column_fails_to_prepare(direct_database_url: str) -> None:
    broken = numbered("renew_lease").replace("lease_until", "lease_ends", 1)
    with psycopg.connect(libpq_url(direct_database_url), autocommit=True) as connection:
        assert prepare_error(connection, broken) is not None


def test_psycopg_caches_the_conversion_of_the_longest_statement(direct_database_url: str) -> None:
    longest = max(STATEMENTS, key=lambda name: len(psycopg_text(name)[0].encode()))
    sql, parameters = psycopg_text(longest)
    # Longer than psycopg's own limit: only the raise in db/engine.py lets it be cached.
    assert 4096 < len(sql.encode()) <= engine.STATEMENT_CACHE_LENGTH
    arguments = dict.fromkeys(parameters)  # all NULL: the statement runs on no row
    with psycopg.connect(libpq_url(direct_database_url)) as connection:
        connection.execute(sql, arguments, prepare=True)  # type: ignore[call-overload]
        hits = psycopg_queries._query2pg.cache_info().hits
        connection.execute(sql, arguments, prepare=True)  # type: ignore[call-overload]
        assert psycopg_queries._query2pg.cache_info().hits == hits + 1
        connection.rollback()
