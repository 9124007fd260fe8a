"""The trace of a job that used up its attempts, through the real system (dispatcher, consumer,
CLI on PostgreSQL and RabbitMQ): each delivery is counted once (issue 24 item 1: the failed
last attempt's ``attempts_exhausted`` entry was counted as one more delivery)."""

from __future__ import annotations

from tests.support.system import System

FAILS_TWICE = {"type": "demo.fail", "payload": {"mode": "transient", "times": 5}, "max_attempts": 2}


async def test_a_job_that_used_up_its_attempts_counts_its_real_deliveries(system: System) -> None:
    with system.running():
        job_id = await system.submit(FAILS_TWICE)
        await system.wait_for("quarantined", job_id, what="the quarantine")

    trace = system.cli_json("jobs", "trace", job_id)

    assert trace["attempts"] == 2 and trace["why"].startswith("quarantined: attempts_exhausted")
    assert trace["deliveries"] == {"total": 2, "claimed": 2, "duplicate": 0, "deferred": 0}
    readable = system.cli("jobs", "trace", job_id).stdout
    assert "  state      quarantined: attempts_exhausted: " in readable
