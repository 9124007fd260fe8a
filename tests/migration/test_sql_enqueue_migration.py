"""Revision 0010 installs jobrelay_enqueue and its helpers, and its downgrade drops them; the
limits frozen into the function (``db/history.py``) are still the live ones."""

from __future__ import annotations

import sys

import psycopg
import pytest
from alembic import command

from jobrelay.core import bounds
from jobrelay.db import history
from jobrelay.db.engine import libpq_url
from tests.support import databases

INSTALLED_BY_0010 = {
    "jobrelay_enqueue",
    "jobrelay_enqueue_check",
    "jobrelay_request_hash",
    "jobrelay_canonical_json",
    "jobrelay_json_number",
    "jobrelay_float_digits",
    "jobrelay_reads_back",
    "jobrelay_type_defaults",
}


def functions(url: str) -> set[str]:
    """The names of the functions in jobrelay's schema whose names start with jobrelay_."""
    with psycopg.connect(libpq_url(url), autocommit=True) as connection:
        rows = connection.execute(
            "SELECT proname FROM pg_proc WHERE proname LIKE 'jobrelay\\_%' "
            "AND pronamespace = 'jobrelay'::regnamespace"
        ).fetchall()
    return {name for (name,) in rows}


def test_0010_installs_the_enqueue_functions_and_its_downgrade_drops_them(
    empty_database: str,
) -> None:
    config = databases.alembic_config(empty_database)
    command.upgrade(config, "0009")
    before = functions(empty_database)
    command.upgrade(config, "0010")
    assert functions(empty_database) - before == INSTALLED_BY_0010

    command.downgrade(config, "0009")
    assert functions(empty_database) == before

    command.upgrade(config, "head")
    assert functions(empty_database) >= INSTALLED_BY_0010


def search_paths(url: str) -> dict[str, list[str]]:
    """Each jobrelay function's own search_path setting (from ``proconfig``), by name."""
    with psycopg.connect(libpq_url(url), autocommit=True) as connection:
        rows = connection.execute(
            "SELECT proname, proconfig FROM pg_proc WHERE proname LIKE 'jobrelay\\_%' "
            "AND pronamespace = 'jobrelay'::regnamespace"
        ).fetchall()
    return {
        name: [entry for entry in config or () if entry.startswith("search_path=")]
        for name, config in rows
    }


def test_0012_pins_every_function_to_the_schema_and_its_downgrade_frees_the_triggers(
    empty_database: str,
) -> None:
    config = databases.alembic_config(empty_database)
    command.upgrade(config, "0012")
    pinned = ["search_path=pg_catalog, jobrelay, pg_temp"]
    assert search_paths(empty_database) == dict.fromkeys(history.FUNCTIONS_0011, pinned)

    command.downgrade(config, "0011")
    after = search_paths(empty_database)
    assert {name for name, config in after.items() if not config} == set(
        history.TRIGGER_FUNCTIONS_0011
    )
    assert all(after[name] == pinned for name in INSTALLED_BY_0010)


def type_defaults(url: str, job_type: str) -> tuple[int, int]:
    with psycopg.connect(libpq_url(url), autocommit=True) as connection:
        row = connection.execute(
            "SELECT * FROM jobrelay.jobrelay_type_defaults(%s)", [job_type]
        ).fetchone()
    assert row is not None
    return row[0], row[1]


def test_0011_has_the_sql_defaults_read_the_registered_types_and_its_downgrade_not(
    empty_database: str,
) -> None:
    config = databases.alembic_config(empty_database)
    command.upgrade(config, "0011")
    with psycopg.connect(libpq_url(empty_database), autocommit=True) as connection:
        connection.execute(
            "INSERT INTO jobrelay.job_types (name, payload_schema, max_attempts, priority, "
            "timeout_seconds, registered_by) VALUES ('shop.charge', '{}', 7, 40, 30, 'test')"
        )
    assert type_defaults(empty_database, "shop.charge") == (7, 40)
    assert type_defaults(empty_database, "catalog.export") == (3, 0)

    command.downgrade(config, "0010")  # the table goes, and the function stops reading it
    assert type_defaults(empty_database, "shop.charge") == (3, 0)


def test_the_limits_frozen_into_jobrelay_enqueue_are_the_live_ones() -> None:
    """A change to core/bounds.py needs a revision that replaces jobrelay_enqueue (and a new
    frozen copy in history.py): until then the SQL path would accept what the API refuses."""
    assert history.IDEMPOTENCY_KEY_MAX_0010 == bounds.IDEMPOTENCY_KEY_MAX
    assert history.TYPE_NAME_MAX_0010 == bounds.TYPE_NAME_MAX
    assert history.PRIORITY_RANGE_0010 == (bounds.PRIORITY_MIN, bounds.PRIORITY_MAX)
    assert history.DEFAULT_MAX_ATTEMPTS_0010 == bounds.DEFAULT_MAX_ATTEMPTS
    assert sys.int_info.default_max_str_digits == history.PYTHON_INT_DIGITS_MAX_0010


def test_0013_has_the_sql_enqueue_honour_client_patterns_and_its_downgrade_not(
    empty_database: str,
) -> None:
    config = databases.alembic_config(empty_database)
    command.upgrade(config, "0013")
    call = "SELECT jobrelay.jobrelay_enqueue('shop', 'catalog.export', '{}'::jsonb, %s)"
    with psycopg.connect(libpq_url(empty_database), autocommit=True) as connection:
        connection.execute(
            "INSERT INTO jobrelay.clients (id, name, token_hash, type_patterns) "
            "VALUES (gen_random_uuid(), 'shop', 'h', ARRAY['shop.*'])"
        )
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="type_not_allowed"):
            connection.execute(call, ["k-1"])

    command.downgrade(config, "0012")  # the patterns go, and the function stops reading them
    with psycopg.connect(libpq_url(empty_database), autocommit=True) as connection:
        assert connection.execute(call, ["k-2"]).fetchone() is not None
