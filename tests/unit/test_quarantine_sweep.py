"""Which quarantine messages the sweep removes (``jobrelay.broker.quarantine.plan_sweep``):
one message stays per quarantined job; nothing that a later quarantine needs ever goes."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

from jobrelay.broker.quarantine import (
    RESTORE_GRACE_SECONDS,
    RESTORED_HEADER,
    QuarantinedMessage,
    describe,
    outbox_id,
    plan_sweep,
    restored_message,
)
from jobrelay.core.jobs import QuarantinedJob
from jobrelay.core.message import Envelope
from jobrelay.core.states import JobState

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def message(
    job_id: uuid.UUID | None, message_id: str | None = "1", reason: str = "rejected"
) -> QuarantinedMessage:
    return QuarantinedMessage(
        message_id=message_id,
        job_id=job_id,
        job_type="demo.fail" if job_id else None,
        malformed=None if job_id else "not JSON",
        reason=reason,
        queue="jobrelay.jobs.default",
        deaths=1,
        died_at=None,
    )


def test_a_quarantined_job_keeps_the_message_of_its_latest_publish_and_loses_the_copies() -> None:
    job = uuid.uuid4()
    held = [message(job, "7"), message(job, "9"), message(job, "9"), message(job, None)]
    plan = plan_sweep(held, {job: JobState.QUARANTINED})
    assert plan.remove == [0, 2, 3]  # the first message of outbox row 9 stays
    assert (plan.surplus, plan.stale) == (3, 0)


def test_a_single_message_of_a_quarantined_job_always_stays() -> None:
    job = uuid.uuid4()
    for reason in ("rejected", "delivery_limit"):
        plan = plan_sweep([message(job, "3", reason)], {job: JobState.QUARANTINED})
        assert plan.remove == [] and plan.removed == 0


def test_messages_of_jobs_no_longer_quarantined_are_stale() -> None:
    jobs = {state: uuid.uuid4() for state in JobState if state != JobState.QUARANTINED}
    held = [message(job_id, str(n)) for n, job_id in enumerate(jobs.values())]
    plan = plan_sweep(held, {job_id: state for state, job_id in jobs.items()})
    assert plan.remove == list(range(len(held)))
    assert (plan.surplus, plan.stale) == (0, len(held))


def test_a_delivery_limit_death_of_a_live_job_waits_for_reconciliation() -> None:
    live = {state: uuid.uuid4() for state in (JobState.QUEUED, JobState.RETRYING, JobState.RUNNING)}
    done = {state: uuid.uuid4() for state in (JobState.SUCCEEDED, JobState.CANCELLED)}
    held = [message(job_id, reason="delivery_limit") for job_id in [*live.values(), *done.values()]]
    states = {job_id: state for state, job_id in [*live.items(), *done.items()]}
    plan = plan_sweep(held, states)
    assert plan.remove == [3, 4]  # only those of the finished jobs


def test_garbage_and_messages_of_unknown_jobs_stay_for_an_operator() -> None:
    held = [message(None, None), message(uuid.uuid4(), "5")]
    assert plan_sweep(held, {}).remove == []


def test_the_outbox_id_is_the_message_id_when_it_is_a_number() -> None:
    assert outbox_id("42") == 42
    assert [outbox_id(value) for value in (None, "", "x1", "-3", "١٢")] == [None] * 5


def quarantined(seconds_ago: float, job_id: uuid.UUID | None = None) -> QuarantinedJob:
    return QuarantinedJob(
        job_id or uuid.uuid4(), "demo.fail", NOW - timedelta(seconds=seconds_ago), 12, None
    )


def test_a_quarantined_job_with_no_message_gets_it_back_once_the_grace_has_passed() -> None:
    grace = timedelta(seconds=RESTORE_GRACE_SECONDS)
    old, recent = quarantined(RESTORE_GRACE_SECONDS + 5), quarantined(RESTORE_GRACE_SECONDS - 10)
    # A first look: both missing, neither restored (one look can miss a message).
    first = plan_sweep([], {}, [old, recent], now=NOW)
    assert first.restore == [] and first.missing_since == {old.job_id: NOW, recent.job_id: NOW}
    assert first.due_in == RESTORE_GRACE_SECONDS
    # A grace later, still missing: both have waited long enough since quarantine and sighting.
    later = plan_sweep([], {}, [old, recent], now=NOW + grace, missing_since=first.missing_since)
    assert later.restore == [old, recent] and later.waiting == 0 and later.due_in is None
    assert later.remove == [] and (later.surplus, later.stale) == (0, 0)


def test_a_recent_quarantine_waits_its_grace_even_when_seen_missing_long_ago() -> None:
    recent = quarantined(5)
    seen_long_ago = {recent.job_id: NOW - timedelta(hours=1)}
    plan = plan_sweep([], {}, [recent], now=NOW, missing_since=seen_long_ago)
    assert plan.restore == [] and plan.due_in == RESTORE_GRACE_SECONDS - 5
    assert plan.missing_since == seen_long_ago  # its first sighting is kept


def test_a_message_seen_again_starts_the_wait_afresh() -> None:
    job = quarantined(3600)
    first = plan_sweep([], {}, [job], now=NOW)
    again = plan_sweep(
        [message(job.job_id, "12")],
        {job.job_id: JobState.QUARANTINED},
        [],
        now=NOW + timedelta(seconds=5),
        missing_since=first.missing_since,
    )
    assert again.missing_since == {} and again.restore == []


def test_a_job_with_a_held_message_is_never_restored_whatever_its_reason() -> None:
    job = uuid.uuid4()
    for reason in ("rejected", "delivery_limit"):
        plan = plan_sweep(
            [message(job, "3", reason)],
            {job: JobState.QUARANTINED},
            [quarantined(3600, job)],
            now=NOW,
            missing_since={job: NOW - timedelta(hours=1)},
        )
        assert plan.restore == [] and plan.waiting == 0 and plan.due_in is None


def test_nothing_is_restored_without_the_database_clock() -> None:
    job = quarantined(3600)
    plan = plan_sweep([], {}, [job], missing_since={job.job_id: NOW - timedelta(hours=1)})
    assert plan.restore == [] and plan.waiting == 0


def test_a_restored_message_reads_as_a_dead_lettered_one_of_its_job() -> None:
    job = quarantined(3600)
    built = restored_message(job, "jobrelay.jobs.default", NOW)
    assert Envelope.decode(built.body) == Envelope(job.job_id, job.job_type)
    fields = ("body", "headers", "message_id", "correlation_id")
    delivered = SimpleNamespace(**{name: getattr(built, name) for name in fields})
    seen = describe(delivered)  # type: ignore[arg-type]  # what describe reads of a delivery
    assert (seen.job_id, seen.job_type, seen.outbox_id) == (job.job_id, "demo.fail", 12)
    assert (seen.reason, seen.queue) == ("rejected", "jobrelay.jobs.default")
    assert built.headers[RESTORED_HEADER] == NOW.isoformat()
    assert "x-death" not in built.headers  # the broker's alone
    assert built.delivery_mode == 2  # persistent
