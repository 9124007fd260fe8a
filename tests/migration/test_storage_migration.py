"""Migration 0003 carries a database holding jobs forward: every job is kept, the totals start
equal to a full count, and the indexes it swaps are in place afterwards (and back after a
downgrade)."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from alembic import command

from tests.support import databases
from tests.support.servers import Servers

# (state, last_error_code, how many) as a database of revision 0002 holds them.
JOBS_0002 = [
    ("queued", None, 5),
    ("running", None, 2),
    ("retrying", "unexpected_error", 3),
    ("succeeded", None, 40),
    ("succeeded", "unexpected_error", 4),
    ("quarantined", "permanent_error", 6),
    ("quarantined", None, 1),
    ("cancelled", None, 2),
]
FINISHED = {"succeeded", "quarantined", "cancelled"}

# Before revision 0012 jobrelay's trigger functions run with the caller's search_path: these
# revisions' own clients had jobrelay's schema on it.
BEFORE_0012 = "-c search_path=jobrelay"


@pytest.fixture
def database_0002(servers: Servers) -> Iterator[str]:
    url = databases.create_empty_database(servers.database_url, "jobrelay_mig")
    databases.migrate(url, "0002")
    yield url
    databases.drop_database(servers.database_url, url)


def fill_as_of_0002(url: str) -> None:
    with psycopg.connect(
        databases.libpq_url(url), autocommit=True, options=BEFORE_0012
    ) as connection:
        connection.execute(
            "INSERT INTO jobrelay.clients (id, name, token_hash) VALUES (gen_random_uuid(), 'c', "
            "'h')"
        )
        for state, code, n in JOBS_0002:
            connection.execute(
                """
                INSERT INTO jobrelay.jobs (id, client_id, idempotency_key, request_hash, type,
                    payload,
                                  state, attempts, max_attempts, lease_token, lease_until,
                                  last_error_code, finished_at)
                SELECT gen_random_uuid(), (SELECT id FROM jobrelay.clients),
                       %(state)s || i || coalesce(%(code)s, ''),
                       'h', 'demo.sleep', '{}', %(state)s, 1, 3,
                       CASE WHEN %(state)s = 'running' THEN gen_random_uuid() END,
                       CASE WHEN %(state)s = 'running' THEN now() + interval '30 s' END,
                       %(code)s,
                       CASE WHEN %(state)s IN ('succeeded', 'quarantined', 'cancelled')
                            THEN now() END
                FROM generate_series(1, %(n)s) AS i
                """,
                {"state": state, "code": code, "n": n},
            )
        connection.execute("INSERT INTO jobrelay.outbox (job_id) SELECT id FROM jobrelay.jobs")
        connection.execute(
            "INSERT INTO jobrelay.job_events (job_id, event) SELECT id, 'received' FROM "
            "jobrelay.jobs"
        )


def rows(url: str, sql: str) -> list[tuple[object, ...]]:
    with psycopg.connect(databases.libpq_url(url), options=BEFORE_0012) as connection:
        return connection.execute(sql).fetchall()  # type: ignore[arg-type]


def index_names(url: str) -> set[str]:
    return {str(row[0]) for row in rows(url, "SELECT indexname FROM pg_indexes")}


def test_0003_keeps_every_job_and_starts_the_totals_at_a_full_count(database_0002: str) -> None:
    fill_as_of_0002(database_0002)
    before = rows(database_0002, "SELECT id, state, last_error_code FROM jobrelay.jobs ORDER BY id")

    databases.migrate(database_0002, "0003")

    assert (
        rows(database_0002, "SELECT id, state, last_error_code FROM jobrelay.jobs ORDER BY id")
        == before
    )
    totals = rows(
        database_0002,
        "SELECT state, code, sum(n)::int FROM jobrelay.job_totals GROUP BY 1, 2 ORDER BY 1, 2",
    )
    expected = sorted((s, c or "", n) for s, c, n in JOBS_0002 if s in FINISHED)
    assert totals == expected
    assert {"ix_jobs_live_state_available_at", "ix_jobs_state_finished_at"} <= index_names(
        database_0002
    )
    assert "ix_jobs_state_available_at" not in index_names(database_0002)
    assert "ix_job_events_at" not in index_names(database_0002)
    invalid = rows(database_0002, "SELECT indexrelid FROM pg_index WHERE NOT indisvalid")
    assert invalid == []  # every CONCURRENTLY build finished

    # From now on the triggers keep the totals: a finish is counted.
    with psycopg.connect(
        databases.libpq_url(database_0002), autocommit=True, options=BEFORE_0012
    ) as connection:
        connection.execute(
            "UPDATE jobrelay.jobs SET state = 'cancelled', finished_at = now() WHERE state = "
            "'queued'"
        )
    cancelled = rows(
        database_0002,
        "SELECT sum(n)::int FROM (SELECT state, n FROM jobrelay.job_totals UNION ALL "
        "SELECT state, n FROM jobrelay.job_count_deltas) AS c WHERE state = 'cancelled'",
    )
    assert cancelled == [(2 + 5,)]


def test_0003_downgrades_and_upgrades_again(database_0002: str) -> None:
    fill_as_of_0002(database_0002)
    databases.migrate(database_0002, "0003")
    command.downgrade(databases.alembic_config(database_0002), "0002")
    assert "ix_jobs_state_available_at" in index_names(database_0002)
    assert rows(database_0002, "SELECT to_regclass('jobrelay.job_totals')") == [(None,)]
    databases.migrate(database_0002, "head")
    assert rows(database_0002, "SELECT count(*)::int FROM jobrelay.jobs") == [(63,)]
    total = rows(
        database_0002, "SELECT sum(n)::int FROM jobrelay.job_totals"
    )  # nothing moved since
    assert total == [(sum(n for s, _, n in JOBS_0002 if s in FINISHED),)]
