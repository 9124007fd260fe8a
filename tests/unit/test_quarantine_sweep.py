"""Which quarantine messages the sweep removes (``jobrelay.broker.quarantine.plan_sweep``):
one message stays per quarantined job; nothing that a later quarantine needs ever goes."""

from __future__ import annotations

import uuid

from jobrelay.broker.quarantine import QuarantinedMessage, outbox_id, plan_sweep
from jobrelay.core.states import JobState


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
