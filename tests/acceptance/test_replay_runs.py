"""A replay starts a fresh run (issue 37 item 8.2), through the real system: a job that used 2
of 2 attempts and is replayed runs with the type's budget again, its backoff starts again from
the first retry's, and the views count its run's attempts beside the life's (which the journal
and the handler keep, unique per job)."""

from __future__ import annotations

import uuid
from datetime import datetime

from tests.conftest import auth
from tests.support.system import System

# Fails the attempts 1 to 4 of its life: both of its first run, two of the run after a replay.
FAILS_FOUR_TIMES = {
    "type": "demo.fail",
    "payload": {"mode": "transient", "times": 4},
    "max_attempts": 2,
}
BASE_SECONDS = 1.0  # the first retry waits at most this; the life's third would wait up to 4


def retry_delays(events: list[dict[str, str]]) -> list[float]:
    """Each retry's delay as the journal recorded it: its "retry at" time minus its entry's."""
    delays = []
    for event in events:
        if event["event"] == "retry_scheduled":
            due = datetime.fromisoformat(event["detail"].rsplit("retry at ", 1)[1])
            delays.append((due - datetime.fromisoformat(event["at"])).total_seconds())
    return delays


async def test_a_replayed_job_gets_a_fresh_run_with_its_backoff_from_the_start(
    system: System,
) -> None:
    system.configure(retry_base_seconds=BASE_SECONDS, retry_max_seconds=30.0)
    with system.running():
        job_id = await system.submit(FAILS_FOUR_TIMES)
        await system.wait_for("quarantined", job_id, what="the first run's end")
        replay = system.cli("quarantine", "replay", job_id)
        assert replay.returncode == 0, replay.stderr
        await system.wait_for("succeeded", job_id, what="the success of the replay's run")

    view = (await system.api.get(f"/v1/jobs/{job_id}", headers=auth(system.alice))).json()
    assert (view["attempts"], view["max_attempts"], view["replayed_attempts"]) == (5, 5, 2)
    assert view["result"] == {"succeeded_on_attempt": 5}  # the handler numbers its life

    trace = system.cli_json("jobs", "trace", job_id)
    assert trace["why"] == "succeeded on attempt 3 of 3 since its replay (attempt 5 of its life)"
    assert trace["replayed_attempts"] == 2
    (replayed,) = [e for e in trace["events"] if e["event"] == "replayed"]
    assert replayed["attempt"] == 2
    assert replayed["detail"].endswith("after 2 attempt(s); a fresh run of 3 attempt(s)")
    # One retry in the first run; two in the replay's, whose backoff starts from the first's
    # ceiling again (equal jitter: each delay is within [ceiling/2, ceiling]).
    first_run, first_after_replay, second_after_replay = retry_delays(trace["events"])
    assert first_run <= BASE_SECONDS and first_after_replay <= BASE_SECONDS
    assert second_after_replay <= 2 * BASE_SECONDS

    readable = system.cli("jobs", "trace", job_id).stdout
    assert "attempts 5 of 5 (2 before its latest replay)" in readable
    shown = system.cli("jobs", "show", job_id)
    assert shown.returncode == 0, shown.stderr
    assert "replayed_attempts 2" in " ".join(shown.stdout.split())

    job = await system.store.get_job(uuid.UUID(job_id))
    assert job is not None and (job.run_attempt, job.run_max_attempts) == (3, 3)
