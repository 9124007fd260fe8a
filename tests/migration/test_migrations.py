"""Alembic upgrade on an empty database equals the models; downgrade and upgrade round-trip."""

from __future__ import annotations

import psycopg
import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect, pool

from jobrelay.db.engine import libpq_url
from jobrelay.db.tables import metadata
from tests.support import databases

TABLES = {
    "clients",
    "jobs",
    "outbox",
    "job_results",
    "job_events",
    "job_totals",
    "job_count_deltas",
    "rate_limits",
    "broker_blocks",
    "console_keys",
    "queues",
    "type_limits",
    "type_rate_buckets",
    "workflows",
    "job_dependencies",
    "job_types",
    "job_steps",
    "job_signals",
    "throttle_accepts",
}
# Written often, worthless after a crash (docs/overload.md): no WAL for them.
UNLOGGED = {"rate_limits", "broker_blocks", "type_rate_buckets"}


def schema_differences(url: str) -> list[object]:
    engine = create_engine(url, poolclass=pool.NullPool)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(
                connection,
                opts={
                    "compare_type": True,
                    # jobrelay's schema only: the models name it, public must stay empty.
                    "include_schemas": True,
                    "include_name": _only_jobrelay_schema,
                    "version_table_schema": "jobrelay",
                },
            )
            return list(compare_metadata(context, metadata))
    finally:
        engine.dispose()


def _only_jobrelay_schema(name: str | None, type_: str, _parent: object) -> bool:
    return type_ != "schema" or name == "jobrelay"


def table_names(url: str, schema: str = "jobrelay") -> set[str]:
    engine = create_engine(url, poolclass=pool.NullPool)
    try:
        return set(inspect(engine).get_table_names(schema=schema)) - {"alembic_version"}
    finally:
        engine.dispose()


def test_upgrade_on_an_empty_database_matches_the_models(empty_database: str) -> None:
    databases.migrate(empty_database)

    assert table_names(empty_database) == TABLES
    assert table_names(empty_database, "public") == set()
    assert schema_differences(empty_database) == []


def test_downgrade_to_base_and_up_again_round_trips(empty_database: str) -> None:
    config = databases.alembic_config(empty_database)
    command.upgrade(config, "head")
    command.downgrade(config, "base")
    assert table_names(empty_database) == set()
    command.upgrade(config, "head")
    assert table_names(empty_database) == TABLES
    assert schema_differences(empty_database) == []


def test_the_check_constraints_make_nonsense_unrepresentable(empty_database: str) -> None:
    databases.migrate(empty_database)
    nonsense = {
        "running without a lease": "state = 'running', lease_token = NULL, lease_until = NULL",
        "queued with a lease": "lease_token = gen_random_uuid(), lease_until = now()",
        "attempts above the limit": "attempts = max_attempts + 1",
        "negative attempts": "attempts = -1",
        "more attempts before a replay than in all": "replayed_attempts = attempts + 1",
        "unknown state": "state = 'lost'",
        "finished but queued": "finished_at = now()",
        "succeeded without finished_at": "state = 'succeeded'",
        "priority above the range": "priority = 101",
        "priority below the range": "priority = -101",
        "concurrency key too long": "concurrency_key = repeat('k', 201)",
        "unique key too long": "unique_key = repeat('k', 201)",
    }
    with psycopg.connect(databases.libpq_url(empty_database), autocommit=True) as connection:
        client = connection.execute(
            "INSERT INTO jobrelay.clients (id, name, token_hash) "
            "VALUES (gen_random_uuid(), 'c', 'h') RETURNING id"
        ).fetchone()
        assert client is not None
        connection.execute(
            "INSERT INTO jobrelay.jobs (id, client_id, idempotency_key, request_hash, type, "
            "payload, "
            "max_attempts) VALUES (gen_random_uuid(), %s, 'k', 'h', 't', '{}', 3)",
            (client[0],),
        )
        for case, assignment in nonsense.items():
            with pytest.raises(psycopg.errors.CheckViolation):
                connection.execute(f"UPDATE jobrelay.jobs SET {assignment}")  # type: ignore[arg-type]
                pytest.fail(f"accepted: {case}")
        # ... and a duplicate key for the same client is refused.
        with pytest.raises(psycopg.errors.UniqueViolation):
            connection.execute(
                "INSERT INTO jobrelay.jobs (id, client_id, idempotency_key, request_hash, type, "
                "payload, "
                "max_attempts) VALUES (gen_random_uuid(), %s, 'k', 'h2', 't', '{}', 3)",
                (client[0],),
            )


def test_the_pressure_tables_are_unlogged(empty_database: str) -> None:
    databases.migrate(empty_database)
    with psycopg.connect(libpq_url(empty_database)) as conn:
        rows = conn.execute(
            "SELECT relname FROM pg_class WHERE relkind = 'r' AND relpersistence = 'u'"
        ).fetchall()
    assert {name for (name,) in rows} == UNLOGGED
