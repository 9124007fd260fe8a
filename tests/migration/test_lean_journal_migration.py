"""Revision 0018, the lean journal: a job journaled before it reads the same after it, and the
downgrade writes back, as rows, every entry the rows told (docs/life-of-a-job.md, "The
journal")."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
from alembic import command

from jobrelay.db.engine import libpq_url
from tests.support import databases

CLIENT = uuid.UUID("00000000-0000-4000-8000-000000000001")
OLD_JOB = uuid.UUID("00000000-0000-7000-8000-000000000001")
NEW_JOB = uuid.UUID("00000000-0000-7000-8000-000000000002")
STORY = [("received", 0), ("published", 1), ("claimed", 1), ("succeeded", 1)]

# A succeeded job as the revisions before 0018 wrote it: four journal rows.
OLD_WAY = """
INSERT INTO jobrelay.clients (id, name, token_hash) VALUES (%(client)s, 'm', 'h');
INSERT INTO jobrelay.jobs (id, client_id, idempotency_key, request_hash, type, payload, state,
                           attempts, max_attempts, finished_at)
VALUES (%(job)s, %(client)s, 'old', 'x', 'demo.sleep', '{}', 'succeeded', 1, 3, now());
INSERT INTO jobrelay.outbox (job_id, published_at) VALUES (%(job)s, now());
INSERT INTO jobrelay.job_events (job_id, event, attempt, detail)
VALUES (%(job)s, 'received', 0, NULL), (%(job)s, 'published', 1, 'outbox 1'),
       (%(job)s, 'claimed', 1, 'consumer c'), (%(job)s, 'succeeded', 1, NULL);
"""

# A succeeded job as 0018 writes it: no journal row, its entries in its rows.
NEW_WAY = """
INSERT INTO jobrelay.jobs (id, client_id, idempotency_key, request_hash, type, payload, state,
                           attempts, max_attempts, finished_at, claimed_seq, claimed_at,
                           claimed_by, finished_seq)
VALUES (%(job)s, %(client)s, 'new', 'x', 'demo.sleep', '{}', 'succeeded', 1, 3, now(),
        1000002, now(), 'consumer c', 1000003);
INSERT INTO jobrelay.outbox (job_id, published_at, journal_id, leased_at, delivers_attempt)
VALUES (%(job)s, now(), 1000001, now(), 1);
"""


def run(url: str, sql: str, **params: Any) -> list[tuple[Any, ...]]:
    """Each statement of ``sql`` in turn; the last one's rows."""
    found: list[tuple[Any, ...]] = []
    with psycopg.connect(libpq_url(url), autocommit=True) as connection:
        for statement in filter(str.strip, sql.split(";")):
            cursor = connection.execute(statement, params)
            found = cursor.fetchall() if cursor.description else []
    return found


def story(url: str, job_id: uuid.UUID, source: str) -> list[tuple[str, int]]:
    order = "seq" if source == "job_journal" else "id"
    rows = run(
        url,
        f"SELECT event, attempt FROM jobrelay.{source} WHERE job_id = %(job)s ORDER BY {order}",
        job=job_id,
    )
    return [(event, attempt) for event, attempt in rows]


def test_the_journal_reads_the_same_across_the_upgrade_and_back(empty_database: str) -> None:
    config = databases.alembic_config(empty_database)
    command.upgrade(config, "0018")
    command.downgrade(config, "-1")
    run(empty_database, OLD_WAY, client=CLIENT, job=OLD_JOB)

    command.upgrade(config, "0018")
    assert story(empty_database, OLD_JOB, "job_journal") == STORY
    run(empty_database, NEW_WAY, client=CLIENT, job=NEW_JOB)
    assert story(empty_database, NEW_JOB, "job_journal") == STORY
    assert story(empty_database, NEW_JOB, "job_events") == []

    command.downgrade(config, "-1")
    assert story(empty_database, OLD_JOB, "job_events") == STORY
    assert story(empty_database, NEW_JOB, "job_events") == STORY
