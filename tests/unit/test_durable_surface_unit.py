"""What users and operators see of a durable job, without servers: the trace's steps and
signals in time order among the journal (core/trace.py, cli/output.py), a sleeper's ``why``,
the CLI's job lines, and ``Client.signal`` over ``httpx.MockTransport`` (the request it sends,
one key for all its tries, 409 job_finished raised as ``JobFinished``)."""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from jobrelay.cli.output import render_job, render_trace
from jobrelay.client import AsyncClient, Client, JobFinished
from jobrelay.core.durable import StepKind, StepRecord, StepStatus
from jobrelay.core.jobs import Job, JournalEntry
from jobrelay.core.states import JobState
from jobrelay.core.trace import JobTrace, SignalEntry, timeline, trace_document, why_it_stopped

AT = datetime(2026, 12, 5, 8, 0, tzinfo=UTC)
BASE = "http://jobrelay.test"
JOB_ID = uuid.UUID("01a24511-c9aa-7f84-b910-f7fbb525b025")


def sleeper(**changes: object) -> Job:
    job = Job(
        id=JOB_ID,
        client_id=uuid.uuid4(),
        idempotency_key="k",
        type="shop.order",
        payload={},
        state=JobState.SLEEPING,
        attempts=1,
        max_attempts=4,
        available_at=AT,
        created_at=AT,
        updated_at=AT,
    )
    return replace(job, **changes)  # type: ignore[arg-type]


def later(seconds: float) -> datetime:
    return AT + timedelta(seconds=seconds)


def a_trace() -> JobTrace:
    """Claimed, a step, a wait for a signal (asleep), the signal sent (woken): each recorded by
    its own transaction; the signal and the entries it made share one instant."""
    steps = (
        StepRecord("charge", StepKind.STEP, 1, later(1), value={"card": "secret"}),
        StepRecord("signal:approved", StepKind.SIGNAL, 1, later(2), status=StepStatus.WAITING),
    )
    events = [
        JournalEntry(AT, "received", 0, None),
        JournalEntry(later(0.5), "claimed", 1, None),
        JournalEntry(later(2), "sleeping", 1, "waiting for signal approved"),
        JournalEntry(later(3), "signalled", 1, "signal approved"),
        JournalEntry(later(3), "woke", 1, "signal approved arrived"),
    ]
    return JobTrace(
        job=sleeper(state=JobState.QUEUED, steps=steps),
        client_name="shop",
        outbox=[],
        events=events,
        result=None,
        signals=[SignalEntry("approved", later(3), None, None)],
    )


def test_the_timeline_puts_steps_and_signals_among_the_journal_causes_first() -> None:
    lines = timeline(trace_document(a_trace()))

    assert [(line["line"], line.get("event") or line.get("name")) for line in lines] == [
        ("event", "received"),
        ("event", "claimed"),
        ("step", "charge"),
        ("step", "signal:approved"),  # the step before the sleep it began
        ("event", "sleeping"),
        ("signal", "approved"),  # the signal before the entries it made
        ("event", "signalled"),
        ("event", "woke"),
    ]


def test_the_trace_shows_steps_without_their_values() -> None:
    document = trace_document(a_trace())
    printed = render_trace(document)

    assert [step["name"] for step in document["steps"]] == ["charge", "signal:approved"]
    assert "secret" not in json.dumps(document) and "secret" not in printed
    assert "#1  step 'charge' done" in printed
    assert "#1  signal 'signal:approved' waiting" in printed
    assert "signal 'approved' sent" in printed


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"wake_at": AT}, "not stopped: sleeping until 2026-12-05T08:00:00+00:00"),
        (
            {"waiting_for": {"signal": "approved"}},
            "not stopped: sleeping, waiting for signal 'approved'",
        ),
        (
            {"waiting_for": {"signal": "approved"}, "wake_at": AT},
            "not stopped: sleeping, waiting for signal 'approved' until 2026-12-05T08:00:00+00:00",
        ),
        (
            {"waiting_for": {"child": str(JOB_ID)}},
            f"not stopped: sleeping, waiting for child job {JOB_ID}",
        ),
    ],
)
def test_a_sleepers_why_says_what_it_waits_for(changes: dict[str, object], why: str) -> None:
    assert why_it_stopped(sleeper(**changes), None) == why


def test_the_cli_shows_a_sleepers_wait_and_steps_with_values_only_when_read() -> None:
    view = {
        "id": str(JOB_ID),
        "state": "sleeping",
        "waiting_for": {"child": "c"},
        "steps": [
            {"name": "charge", "kind": "step", "status": "done", "at": "t", "attempt": 1},
            {"name": "n", "kind": "step", "status": "done", "at": "t", "attempt": 2, "value": 3},
        ],
    }

    printed = render_job(view)

    assert 'waiting_for      {"child": "c"}' in printed
    assert "  t  #1  step 'charge' done\n" in printed + "\n"
    assert "  t  #2  step 'n' done: 3" in printed


# --- the client -----------------------------------------------------------------------------


def test_client_signal_sends_the_value_under_one_key_for_every_try() -> None:
    seen: list[httpx.Request] = []

    def server(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if len(seen) == 1:
            return httpx.Response(503, headers={"Retry-After": "0"})
        body = {"job_id": str(JOB_ID), "name": "order paid", "status": "sent"}
        return httpx.Response(202, json=body)

    with Client(BASE, "t", transport=httpx.MockTransport(server)) as client:
        client._sleep = lambda seconds: None  # type: ignore[method-assign]
        answer = client.signal(JOB_ID, "order paid", None)

    assert (answer.job_id, answer.name, answer.status) == (JOB_ID, "order paid", "sent")
    assert [r.url.raw_path for r in seen] == [
        f"/v1/jobs/{JOB_ID}/signals/order%20paid".encode()
    ] * 2
    assert [r.content for r in seen] == [b"null", b"null"]  # a JSON null is a value
    keys = {r.headers["Idempotency-Key"] for r in seen}
    assert len(keys) == 1 and all(r.headers["Content-Type"] == "application/json" for r in seen)


async def test_async_client_raises_job_finished_for_409_job_finished() -> None:
    def server(request: httpx.Request) -> httpx.Response:
        problem = {"status": 409, "code": "job_finished", "title": "The job has finished"}
        return httpx.Response(409, json=problem)

    async with AsyncClient(BASE, "t", transport=httpx.MockTransport(server)) as client:
        with pytest.raises(JobFinished) as raised:
            await client.signal(str(JOB_ID), "go", {"a": 1}, idempotency_key="k-1")

    assert (raised.value.status, raised.value.code) == (409, "job_finished")


def test_client_signal_refuses_a_bad_name_or_key_before_sending() -> None:
    def server(request: httpx.Request) -> httpx.Response:
        raise AssertionError("nothing is sent")

    with Client(BASE, "t", transport=httpx.MockTransport(server)) as client:
        with pytest.raises(ValueError, match="1 to 200"):
            client.signal(JOB_ID, "", 1)
        with pytest.raises(ValueError, match="key"):
            client.signal(JOB_ID, "go", 1, idempotency_key="a b")
