"""The lean journal through the real system (docs/life-of-a-job.md, "The journal"): a plain job
writes no journal row, yet its trace tells received, published, claimed and succeeded in order;
a retried job writes only what its row cannot tell."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import text

from tests.acceptance.test_trace_order import CAUSAL, FAILS_ONCE, delivery_story
from tests.conftest import auth
from tests.support.system import System

PLAIN = {"type": "demo.sleep", "payload": {"seconds": 0}}


async def written_rows(system: System, job_id: str) -> list[tuple[str, int]]:
    """The job's ``job_events`` rows, as written, in journal order."""
    rows = await system.store.fetch_all(
        text(
            "SELECT event, attempt FROM jobrelay.job_events WHERE job_id = :id"
            " ORDER BY coalesce(seq, id)"
        ),
        id=uuid.UUID(job_id),
    )
    return [(row.event, row.attempt) for row in rows]


async def traced(system: System, job_id: str) -> list[dict[str, Any]]:
    response = await system.api.get(f"/v1/jobs/{job_id}/trace", headers=auth(system.alice))
    assert response.status_code == 200, response.text
    events: list[dict[str, Any]] = response.json()["events"]
    return events


async def test_a_plain_job_writes_no_journal_row_and_its_trace_tells_its_whole_life(
    system: System,
) -> None:
    with system.running():
        job_id = await system.submit(PLAIN)
        await system.wait_for("succeeded", job_id, what="the plain job's success")

    assert await written_rows(system, job_id) == []
    events = await traced(system, job_id)
    assert [(e["event"], e["attempt"]) for e in events] == [
        ("received", 0),
        ("published", 1),
        ("claimed", 1),
        ("succeeded", 1),
    ]
    times = [e["at"] for e in events]
    assert times == sorted(times), "each entry is dated no earlier than the one before"
    published, claimed = events[1], events[2]
    assert published["detail"].startswith("outbox ")
    assert claimed["detail"], "the claim names the consumer that made it"


async def test_a_retried_job_journals_the_claim_its_row_forgets_and_its_retry(
    system: System,
) -> None:
    with system.running():
        job_id = await system.submit(FAILS_ONCE)
        await system.wait_for("succeeded", job_id, what="the success on attempt 2")

    # The first claim was written by the second, which replaced it in the row; the second
    # claim, the publishes and the success are told by the rows.
    assert await written_rows(system, job_id) == [("claimed", 1), ("retry_scheduled", 1)]
    events = await traced(system, job_id)
    assert delivery_story(events) == CAUSAL
