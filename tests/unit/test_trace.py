"""The trace of one job (core/trace.py) and how the CLI prints it (cli/output.py)."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime

from jobrelay.cli.output import render_trace
from jobrelay.core.failures import describe_failure
from jobrelay.core.jobs import Job, JournalEntry
from jobrelay.core.journal import QuarantineMarker
from jobrelay.core.states import JobEvent, JobState
from jobrelay.core.trace import (
    JobTrace,
    StoredResult,
    is_unclaimed_delivery,
    trace_document,
    why_it_stopped,
)

AT = datetime(2024, 5, 1, tzinfo=UTC)


def failure() -> dict[str, object]:
    try:
        raise RuntimeError("the shop is closed")
    except RuntimeError as error:
        return describe_failure(error).as_json()


def a_job(state: JobState, *, attempts: int = 2, code: str | None = None) -> Job:
    return Job(
        id=uuid.uuid4(),
        client_id=uuid.uuid4(),
        idempotency_key="k",
        type="shop.charge",
        payload={},
        state=state,
        attempts=attempts,
        max_attempts=2,
        available_at=AT,
        created_at=AT,
        updated_at=AT,
        last_error_code=code,
        last_error="RuntimeError: the shop is closed" if code else None,
    )


def entry(event: JobEvent, attempt: int, detail: str | None = None, **more: object) -> JournalEntry:
    return JournalEntry(AT, event.value, attempt, detail, **more)  # type: ignore[arg-type]


def exhausted_by_failures() -> list[JournalEntry]:
    """Two claims, each failed; the second (the last attempt) quarantines the job."""
    return [
        entry(JobEvent.RECEIVED, 0),
        entry(JobEvent.PUBLISHED, 0),
        entry(JobEvent.CLAIMED, 1),
        entry(JobEvent.RETRY_SCHEDULED, 1, "unexpected_error: retry at …", error=failure()),
        entry(JobEvent.PUBLISHED, 1),
        entry(JobEvent.CLAIMED, 2),
        entry(JobEvent.QUARANTINED, 2, QuarantineMarker.ATTEMPTS_EXHAUSTED.value, error=failure()),
    ]


def test_a_job_whose_last_attempt_failed_counts_each_delivery_once() -> None:
    # Guards issue 24 item 1: the failed last attempt's `attempts_exhausted` entry was counted
    # as one more delivery that ended without a claim (total 3 for 2 deliveries).
    job = a_job(JobState.QUARANTINED, code=QuarantineMarker.ATTEMPTS_EXHAUSTED.value)
    document = trace_document(JobTrace(job, "alice", [], exhausted_by_failures(), None))

    assert document["deliveries"] == {"total": 2, "claimed": 2, "duplicate": 0, "deferred": 0}


def test_a_delivery_with_no_attempt_left_to_claim_counts_as_a_delivery() -> None:
    # The last attempt's lease expired; its redelivery finds no attempt left and quarantines.
    events = [
        *exhausted_by_failures()[:6],
        entry(JobEvent.QUARANTINED, 2, QuarantineMarker.ATTEMPTS_EXHAUSTED.value),
    ]
    job = a_job(JobState.QUARANTINED, code=QuarantineMarker.ATTEMPTS_EXHAUSTED.value)
    document = trace_document(JobTrace(job, "alice", [], events, None))

    assert document["deliveries"]["total"] == 3
    assert [is_unclaimed_delivery(e) for e in events].count(True) == 1


def test_only_the_consumers_quarantines_without_an_attempt_are_unclaimed_deliveries() -> None:
    unclaimed = entry(JobEvent.QUARANTINED, 0, QuarantineMarker.UNKNOWN_JOB_TYPE.value)
    by_the_broker = entry(JobEvent.QUARANTINED, 1, QuarantineMarker.DELIVERY_LIMIT.value)
    failed = entry(JobEvent.QUARANTINED, 1, "card_declined", error=failure())

    assert is_unclaimed_delivery(unclaimed)
    assert not is_unclaimed_delivery(by_the_broker)
    assert not is_unclaimed_delivery(failed)


def test_the_state_line_of_a_quarantined_job_names_the_state_once() -> None:
    # Guards issue 24 item 17: "state      quarantined: quarantined: …" against the README.
    job = a_job(JobState.QUARANTINED, attempts=1, code="address_missing")
    job = Job(**{**vars(job), "last_error": "the order has no shipping address"})
    shown = render_trace(trace_document(JobTrace(job, "alice", [], [], None)))

    assert "  state      quarantined: address_missing: the order has no shipping address" in (
        shown.splitlines()
    )


def test_the_state_line_of_a_succeeded_job_is_as_before() -> None:
    job = a_job(JobState.SUCCEEDED)
    result = StoredResult({"charged": True}, 2, AT)
    shown = render_trace(trace_document(JobTrace(job, "alice", [], [], result)))

    assert "  state      succeeded: succeeded on attempt 2 of 2" in shown.splitlines()


def test_the_trace_prints_a_result_as_json_like_jobs_show() -> None:
    # Guards issue 24 item 17: the result was a Python repr ({'charged': True, 'note': None}).
    job = a_job(JobState.SUCCEEDED)
    result = StoredResult({"charged": True, "note": None, "café": "crème"}, 2, AT)
    shown = render_trace(trace_document(JobTrace(job, "alice", [], [], result)))

    (line,) = [line for line in shown.splitlines() if line.startswith("  result")]
    assert line.endswith('by attempt 2: {"charged": true, "note": null, "café": "crème"}')


# Issue 37 item 8.2: after a replay the trace says which run an attempt is in.
def test_a_replayed_jobs_why_counts_its_run_beside_its_life() -> None:
    replayed = replace(a_job(JobState.RUNNING, attempts=4), max_attempts=5, replayed_attempts=2)
    succeeded = replace(replayed, state=JobState.SUCCEEDED, finished_at=AT)

    assert (replayed.run_attempt, replayed.run_max_attempts) == (2, 3)
    assert why_it_stopped(replayed, None).startswith(
        "not stopped: running attempt 2 since its replay (attempt 4 of its life), lease until"
    )
    assert why_it_stopped(succeeded, StoredResult({}, 4, AT)) == (
        "succeeded on attempt 2 of 3 since its replay (attempt 4 of its life)"
    )
    never = a_job(JobState.SUCCEEDED)
    assert why_it_stopped(never, None) == "succeeded on attempt 2 of 2"
    assert trace_document(JobTrace(succeeded, "shop", [], [], None))["replayed_attempts"] == 2
