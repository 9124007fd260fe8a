"""What the CLI prints, from the documents its commands read (pure: no servers)."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

from jobrelay.cli.jobs import render_listing
from jobrelay.cli.quarantine import render_report, replay_summary
from jobrelay.cli.stats import render_stats
from jobrelay.cli.submit import _refusal
from jobrelay.client import ApiError
from jobrelay.core.stats import OutboxBacklog, RetryingSummary, SystemStats


def test_stats_say_there_is_no_next_retry_instead_of_none() -> None:
    # Guards issue 24 item 17: `retrying     0 next_due_at=None`.
    stats = SystemStats(
        jobs_by_state={},
        outbox=OutboxBacklog(unpublished=0, due=0, oldest_due_age_seconds=None),
        expired_leases=0,
        retrying=RetryingSummary(count=0, next_due_at=None),
        quarantined_by_code={},
        failed_by_code={},
        published_never_claimed=0,
        published_never_claimed_after_seconds=300.0,
        redispatched_last_hour=0,
    )
    shown = render_stats(stats.as_document())

    assert "None" not in shown
    assert "retrying     0 next_due_at=-" in shown.splitlines()


def test_a_replay_that_replayed_nothing_says_so() -> None:
    # Guards issue 24 item 17: "replayed 0 of 1 job(s): queued again with a fresh budget…".
    assert replay_summary(0, 1) == "replayed none of 1 job(s): nothing was queued again"
    assert "queued again with a fresh attempt budget" in replay_summary(1, 2)
    assert replay_summary(0, 0) == "no quarantined job to replay: nothing was queued again"


def quarantined(code: str, messages: int) -> dict[str, Any]:
    return {
        "job_id": str(uuid.uuid4()),
        "type": "demo.fail",
        "reason": code,
        "error": None,
        "attempts": 1,
        "max_attempts": 1,
        "messages": [{"reason": "rejected"}] * messages,
    }


def test_a_listing_by_code_counts_the_messages_of_that_code() -> None:
    # Guards issue 24 item 17: `--code X` counted its jobs beside every message in the queue.
    other = {
        "message_id": "m1",
        "malformed": None,
        "job_id": str(uuid.uuid4()),
        "job_state": "succeeded",
        "reason": "rejected",
    }
    report = {
        "jobs": [quarantined("card_declined", 1)],  # as listed with --code card_declined
        "other_messages": [other],
        "messages_in_queue": 5,
        "broker": "ok",
    }

    by_code = render_report(report, code="card_declined").splitlines()
    everything = render_report(report).splitlines()

    assert by_code[-1] == (
        "1 quarantined job(s) with code card_declined, 1 message(s) of theirs in "
        "jobrelay.quarantine"
    )
    assert not any(line.startswith("message m1") for line in by_code)
    assert everything[-1] == "1 quarantined job(s), 5 message(s) in jobrelay.quarantine"
    assert any(line.startswith("message m1") for line in everything)


def problem(status: int, code: str, detail: str, **more: Any) -> ApiError:
    body = json.dumps({"status": status, "code": code, "detail": detail, **more}).encode()
    return ApiError.from_answer(status, body, reason="")


def test_a_conflict_names_the_job_that_has_the_key() -> None:
    # Guards issue 24 item 17: the CLI's 409 did not name the existing job.
    existing = uuid.uuid4()
    error = problem(409, "idempotency_conflict", "the key was used", job_id=str(existing))

    assert _refusal(error, None) == (
        f"409 idempotency_conflict: the key was used (job {existing} has this key)"
    )


def test_a_throttle_says_when_one_more_is_taken_in_its_line() -> None:
    body = json.dumps({"status": 429, "code": "throttled", "detail": "the throttle is 5/m"})
    error = ApiError.from_answer(429, body.encode(), reason="", retry_after=7.0)

    assert _refusal(error, None) == "429 throttled: the throttle is 5/m; one more is taken in 7 s"


def test_a_failure_worth_retrying_prints_the_key_the_command_made() -> None:
    # Guards issue 24 item 17: "retry with the same key" without the key it had made up.
    error = problem(
        503, "database_unavailable", "The database is unavailable; retry with the same key"
    )

    assert _refusal(error, "k-made-1") == (
        "503 database_unavailable: The database is unavailable; retry with the same key; "
        "the key was k-made-1: retry with --key k-made-1"
    )
    assert _refusal(error, None).endswith("retry with the same key")  # the user's own --key
    assert "k-made-1" not in _refusal(problem(422, "validation_error", "no"), "k-made-1")


def test_a_job_listing_is_a_line_a_job_then_the_next_page() -> None:
    at = datetime(2024, 5, 1, 12, tzinfo=UTC).isoformat()
    job = {
        "id": "5b0c9f6e-0000-0000-0000-000000000001",
        "state": "queued",
        "type": "demo.sleep",
        "client": "shop",
        "attempts": 0,
        "max_attempts": 3,
        "created_at": at,
        "updated_at": at,
    }

    shown = render_listing({"jobs": [job], "next_cursor": "abc"}).splitlines()

    assert shown[0].split() == [
        job["id"],
        "queued",
        "demo.sleep",
        "shop",
        "attempts",
        "0/3",
        "updated",
        at,
    ]
    assert shown[1] == "more: add --cursor abc"
    assert render_listing({"jobs": [], "next_cursor": None}) == "no job"
