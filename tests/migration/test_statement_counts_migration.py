"""Migration 0017 swaps the row triggers that count finished jobs for statement triggers: the
counts stay exact across it, one statement appends one delta per bucket, and its downgrade
brings the row triggers back."""

from __future__ import annotations

import psycopg
from alembic import command

from tests.support import databases

# A bulk move in each bucket: a statement each.
FINISHES = [
    "UPDATE jobrelay.jobs SET state = 'succeeded', finished_at = now() WHERE payload->>'n' < '3'",
    "UPDATE jobrelay.jobs SET state = 'cancelled', finished_at = now(), "
    "last_error_code = 'operator' WHERE state = 'queued' AND payload->>'n' < '6'",
]


def run(url: str, *statements: str) -> None:
    with psycopg.connect(databases.libpq_url(url), autocommit=True) as connection:
        for statement in statements:
            connection.execute(statement)  # type: ignore[arg-type]


def counted(url: str) -> tuple[list[tuple[object, ...]], int]:
    """The counts the totals and deltas tell, and how many delta rows tell them."""
    with psycopg.connect(databases.libpq_url(url)) as connection:
        counts = connection.execute(
            "SELECT state, code, sum(n)::int FROM (SELECT state, code, n FROM "
            "jobrelay.job_totals UNION ALL SELECT state, code, n FROM jobrelay.job_count_deltas) "
            "AS c GROUP BY 1, 2 HAVING sum(n) <> 0 ORDER BY 1, 2"
        ).fetchall()
        deltas = connection.execute("SELECT count(*)::int FROM jobrelay.job_count_deltas")
        row = deltas.fetchone()
    assert row is not None
    return counts, row[0]


def fill(url: str, n: int) -> None:
    run(
        url,
        "WITH c AS (INSERT INTO jobrelay.clients (id, name, token_hash) "
        "VALUES (gen_random_uuid(), 'counts', 'h') RETURNING id) "
        "INSERT INTO jobrelay.jobs (id, client_id, idempotency_key, request_hash, type, payload, "
        "max_attempts) SELECT gen_random_uuid(), c.id, 'k' || i, 'h', 't', "
        f"jsonb_build_object('n', (i % 9)::text), 3 FROM c, generate_series(1, {n}) AS i",
    )


def test_0017_counts_per_statement_exactly_and_its_downgrade_counts_per_row(
    empty_database: str,
) -> None:
    config = databases.alembic_config(empty_database)
    command.upgrade(config, "0016")
    fill(empty_database, 90)
    run(empty_database, FINISHES[0])  # 30 jobs: counted row by row
    assert counted(empty_database) == ([("succeeded", "", 30)], 30)

    command.upgrade(config, "0017")
    run(empty_database, FINISHES[1])  # 30 jobs, one statement: one delta
    run(empty_database, "UPDATE jobrelay.jobs SET updated_at = now()")  # no bucket changes
    expected = [("cancelled", "operator", 30), ("succeeded", "", 30)]
    assert counted(empty_database) == (expected, 31)
    run(empty_database, "DELETE FROM jobrelay.jobs WHERE state = 'succeeded'")
    assert counted(empty_database) == (expected[:1], 32)

    command.downgrade(config, "0016")
    run(
        empty_database,
        "UPDATE jobrelay.jobs SET state = 'queued', finished_at = NULL, "
        "last_error_code = NULL WHERE state = 'cancelled' AND payload->>'n' = '3'",
    )
    assert counted(empty_database) == ([("cancelled", "operator", 20)], 42)
