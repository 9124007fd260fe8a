"""Batch handlers without servers: the consumer's gatherer (``consumer/batches.py``) called by
events, never timed; the mapping of a returned list to each job's run; the testing kit's
``run_batch``."""

from __future__ import annotations

import asyncio
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from jobrelay import BatchContext, PermanentError, Registry
from jobrelay.consumer.batches import BATCH_RESULT_INVALID, Batches, runs_of
from jobrelay.consumer.handler_call import HandlerRun
from jobrelay.core.batches import BatchJob
from jobrelay.core.errors import TransientError
from jobrelay.core.jobs import Quarantine, RetryLater, Succeeded
from jobrelay.testing import run_batch, run_batch_async, run_job


class Mail(BaseModel):
    to: str
    tenant: str = "a"


class Calls:
    """What each call of a batch handler got; ``release`` holds the calls until set."""

    def __init__(self) -> None:
        self.payloads: list[list[str]] = []
        self.contexts: list[BatchContext] = []
        self.release = asyncio.Event()
        self.release.set()
        self.started = asyncio.Event()


calls = Calls()
registry = Registry()


@registry.job("mail.send", Mail, batch_size=3, batch_wait=60.0, max_attempts=3)
async def send(context: BatchContext, payloads: list[Mail]) -> list[dict[str, Any] | Exception]:
    calls.payloads.append([p.to for p in payloads])
    calls.contexts.append(context)
    calls.started.set()
    await calls.release.wait()
    answers: list[dict[str, Any] | Exception] = []
    for payload in payloads:
        if payload.to == "busy":
            answers.append(TransientError("the mail API is busy", code="mail_busy"))
        elif payload.to == "nobody":
            answers.append(PermanentError("no such mailbox", code="no_mailbox"))
        else:
            answers.append({"sent": payload.to})
    return answers


@registry.job("mail.keyed", Mail, batch_size=2, batch_wait=60.0, batch_key=lambda p: p.tenant)
async def keyed(context: BatchContext, payloads: list[Mail]) -> list[dict[str, Any]]:
    calls.payloads.append([f"{p.tenant}:{p.to}" for p in payloads])
    return [{"sent": p.to} for p in payloads]


@registry.job("mail.soon", Mail, batch_size=50, batch_wait=0.0)
def soon(context: BatchContext, payloads: list[Mail]) -> list[dict[str, Any]]:
    """A plain ``def``: run in a thread of its own."""
    return [{"sent": p.to, "thread": threading.current_thread().name} for p in payloads]


@registry.job("mail.wrong", Mail, batch_size=5, batch_wait=60.0)
async def wrong(context: BatchContext, payloads: list[Mail]) -> Any:
    if payloads[0].to == "short":
        return [{"sent": 1}]
    if payloads[0].to == "raise":
        raise RuntimeError("the mail API is down")
    if payloads[0].to == "durable":
        context.step("once", lambda: 1)
    return ["not a dict", {"bad": float("nan")}, {"ok": True}]


@registry.job("mail.slow", Mail, batch_size=2, batch_wait=60.0, timeout_seconds=0.05)
async def slow(context: BatchContext, payloads: list[Mail]) -> list[dict[str, Any]]:
    await asyncio.sleep(60)
    return []


@pytest.fixture(autouse=True)
def fresh_calls() -> None:
    global calls
    calls = Calls()


def job(attempt: int = 1) -> BatchJob:
    return BatchJob(uuid.uuid4(), attempt, 3)


def gathered(batches: Batches, name: str, *mails: str) -> list[asyncio.Task[HandlerRun]]:
    """A delivery's part of its batch for each mail: ``"to"``, or ``"tenant:to"``."""
    job_type = registry.get(name)
    payloads = [
        Mail(to=to, tenant=tenant or "a") for tenant, _, to in (m.rpartition(":") for m in mails)
    ]
    return [asyncio.create_task(batches.run(job_type, job(), p)) for p in payloads]


async def until(condition: Any) -> None:
    while not condition():
        await asyncio.sleep(0)


# --- the gatherer -------------------------------------------------------------------------------


async def test_a_full_batch_is_one_call_and_each_job_gets_its_own_result(tmp_path: Path) -> None:
    runs = await asyncio.gather(*gathered(Batches(tmp_path), "mail.send", "x", "y", "z"))
    assert calls.payloads == [["x", "y", "z"]]
    assert [run.result for run in runs] == [{"sent": "x"}, {"sent": "y"}, {"sent": "z"}]


async def test_the_call_of_a_batch_not_full_waits_for_batch_wait_and_takes_what_came(
    tmp_path: Path,
) -> None:
    runs = await asyncio.gather(*gathered(Batches(tmp_path), "mail.soon", "x", "y"))
    assert [run.result and run.result["sent"] for run in runs] == ["x", "y"]
    assert runs[0].result is not None and runs[0].result["thread"].startswith("jobrelay-handler-")


async def test_jobs_past_a_full_batch_open_the_next_one(tmp_path: Path) -> None:
    batches = Batches(tmp_path)
    first = gathered(batches, "mail.send", "a", "b", "c", "d")
    await asyncio.gather(*first[:3])
    assert calls.payloads == [["a", "b", "c"]]
    assert not first[3].done()  # waits for two more, or its batch_wait
    batches.drain()
    assert (await first[3]).result == {"sent": "d"}
    assert calls.payloads == [["a", "b", "c"], ["d"]]


async def test_a_batch_key_never_mixes_keys(tmp_path: Path) -> None:
    batches = Batches(tmp_path)
    tasks = gathered(batches, "mail.keyed", "a:1", "b:2", "a:3", "b:4", "a:5")
    await asyncio.gather(*tasks[:4])
    batches.drain()
    await tasks[4]
    assert sorted(calls.payloads) == [["a:1", "a:3"], ["a:5"], ["b:2", "b:4"]]


async def test_draining_calls_the_open_batches_at_once_and_every_later_one_too(
    tmp_path: Path,
) -> None:
    batches = Batches(tmp_path)
    [waiting] = gathered(batches, "mail.send", "x")
    await until(lambda: batches.open)
    batches.drain()
    assert (await waiting).result == {"sent": "x"}
    [later] = gathered(batches, "mail.send", "y")
    assert (await later).result == {"sent": "y"}
    assert calls.payloads == [["x"], ["y"]]


async def test_a_job_that_leaves_before_the_call_is_not_in_it(tmp_path: Path) -> None:
    batches = Batches(tmp_path)
    leaving, staying = gathered(batches, "mail.send", "x", "y")
    await until(lambda: batches.open and len(next(iter(batches.open.values())).members) == 2)
    leaving.cancel()
    with pytest.raises(asyncio.CancelledError):
        await leaving
    batches.drain()
    assert (await staying).result == {"sent": "y"}
    assert calls.payloads == [["y"]]


async def test_a_batch_all_of_whose_jobs_left_is_dropped(tmp_path: Path) -> None:
    batches = Batches(tmp_path)
    [leaving] = gathered(batches, "mail.send", "x")
    await until(lambda: batches.open)
    leaving.cancel()
    with pytest.raises(asyncio.CancelledError):
        await leaving
    assert batches.open == {}
    batches.drain()
    assert calls.payloads == []


async def test_a_job_that_leaves_during_the_call_shows_as_cancelled_and_the_last_stops_it(
    tmp_path: Path,
) -> None:
    calls.release.clear()
    batches = Batches(tmp_path)
    first, second, third = gathered(batches, "mail.send", "x", "y", "z")
    await calls.started.wait()
    [context] = calls.contexts
    assert [context.cancelled(i) for i in range(3)] == [False, False, False]
    first.cancel()
    await asyncio.wait({first})
    assert [context.cancelled(i) for i in range(3)] == [True, False, False]
    [call] = batches.calls
    second.cancel()
    third.cancel()
    await asyncio.wait({second, third, call})
    assert call.cancelled()


async def test_the_context_names_each_job_in_the_payloads_order(tmp_path: Path) -> None:
    batches = Batches(tmp_path)
    job_type = registry.get("mail.send")
    jobs = [job(attempt=n) for n in (1, 2, 3)]
    await asyncio.gather(*(batches.run(job_type, j, Mail(to=str(n))) for n, j in enumerate(jobs)))
    [context] = calls.contexts
    assert context.jobs == tuple(jobs)
    assert [j.attempt for j in context.jobs] == [1, 2, 3]
    assert context.jobs[0].idempotency_key == f"jobrelay:{jobs[0].job_id}"
    assert context.job_type == "mail.send"


async def test_a_batch_key_that_fails_on_the_payload_fails_that_job_alone(tmp_path: Path) -> None:
    reg = Registry()

    @reg.job("mail.broken_key", Mail, batch_size=2, batch_key=lambda p: 1 / 0)
    async def broken(context: BatchContext, payloads: list[Mail]) -> list[dict[str, Any]]:
        return [{} for _ in payloads]

    run = await Batches(tmp_path).run(reg.get("mail.broken_key"), job(), Mail(to="x"))
    assert isinstance(run.error, PermanentError)
    assert run.error.code == "batch_key_failed"


# --- what the call returned, job by job ------------------------------------------------------


def test_a_list_of_the_wrong_length_fails_every_job_with_batch_result_invalid() -> None:
    runs = runs_of([{"a": 1}], 3, 0.1)
    assert len(runs) == 3
    assert all(isinstance(r.error, TransientError) for r in runs)
    assert {r.error.code for r in runs if isinstance(r.error, TransientError)} == {
        BATCH_RESULT_INVALID
    }
    assert "1 results for 3 jobs" in str(runs[0].error)


def test_no_list_at_all_fails_every_job() -> None:
    runs = runs_of({"a": 1}, 2, 0.1)
    assert [str(r.error) for r in runs] == [str(runs[0].error)] * 2
    assert "returned a dict for 2 jobs" in str(runs[0].error)


def test_each_element_is_its_own_jobs_run() -> None:
    boom = ValueError("boom")
    ok, failed, invalid, unstorable = runs_of([{"a": 1}, boom, 7, {"x": float("nan")}], 4, 0.1)
    assert (ok.result, ok.error) == ({"a": 1}, None)
    assert failed.error is boom
    assert isinstance(invalid.error, TransientError)
    assert invalid.error.code == BATCH_RESULT_INVALID
    assert "result 2 is a int" in str(invalid.error)
    assert isinstance(unstorable.error, PermanentError)
    assert unstorable.error.code == "invalid_result"


# --- the testing kit --------------------------------------------------------------------------


def test_run_batch_gives_each_job_its_own_verdict() -> None:
    sent, busy, nobody = run_batch(send, [Mail(to="x"), {"to": "busy"}, Mail(to="nobody")])
    assert calls.payloads == [["x", "busy", "nobody"]]
    assert isinstance(sent.outcome, Succeeded) and sent.result == {"sent": "x"}
    assert isinstance(busy.outcome, RetryLater) and busy.error_code == "mail_busy"
    assert isinstance(nobody.outcome, Quarantine) and nobody.error_code == "no_mailbox"
    assert len({v.context.job_id for v in (sent, busy, nobody)}) == 3


def test_run_batch_on_the_last_attempt_quarantines_what_would_be_retried() -> None:
    [busy] = run_batch(registry, "mail.send", [{"to": "busy"}], attempt=3)
    assert busy.quarantined and busy.error_code == "attempts_exhausted"


def test_run_batch_leaves_a_payload_that_does_not_match_out_of_the_call() -> None:
    bad, good = run_batch(send, [{"too": "x"}, {"to": "y"}])
    assert bad.quarantined and bad.error_code == "invalid_payload"
    assert good.result == {"sent": "y"}
    assert calls.payloads == [["y"]]


def test_run_batch_the_whole_call_raising_is_every_jobs_failure() -> None:
    verdicts = run_batch(wrong, [{"to": "raise"}, {"to": "b"}])
    assert [v.error_code for v in verdicts] == ["unexpected_error"] * 2
    assert all("the mail API is down" in (v.message or "") for v in verdicts)


def test_run_batch_maps_a_wrong_answer_to_clear_errors() -> None:
    short = run_batch(wrong, [{"to": "short"}, {"to": "b"}])
    assert [v.error_code for v in short] == [BATCH_RESULT_INVALID] * 2
    assert all(v.retrying for v in short)
    mixed = run_batch(wrong, [{"to": "m"}, {"to": "n"}, {"to": "o"}])
    assert [v.error_code for v in mixed] == [BATCH_RESULT_INVALID, "invalid_result", None]


def test_run_batch_a_durable_call_is_refused_clearly() -> None:
    verdicts = run_batch(wrong, [{"to": "durable"}])
    assert [v.error_code for v in verdicts] == ["batch_durable_call"]
    assert verdicts[0].quarantined
    assert "a batch handler has no durable calls" in (verdicts[0].message or "")


async def test_run_batch_the_types_timeout_is_the_whole_calls() -> None:
    verdicts = await run_batch_async(slow, [{"to": "x"}, {"to": "y"}])
    assert [v.error_code for v in verdicts] == ["timeout", "timeout"]


def test_run_batch_refuses_what_no_consumer_would_call() -> None:
    with pytest.raises(ValueError, match="1 to 3 jobs"):
        run_batch(send, [{"to": str(n)} for n in range(4)])
    with pytest.raises(TypeError, match="a list of payloads"):
        run_batch(send, {"to": "x"})
    one = Registry()

    @one.job("mail.one", Mail)
    async def single(context: Any, payload: Mail) -> dict[str, Any]:
        return {}

    with pytest.raises(TypeError, match="run it with run_job"):
        run_batch(single, [{"to": "x"}])
    assert run_job(single, {"to": "x"}).succeeded


def test_a_consumers_prefetch_is_raised_by_the_largest_batch_of_the_types_it_takes() -> None:
    assert registry.largest_batch(["mail.send", "mail.keyed"]) == 3
    assert registry.largest_batch(["mail.keyed"]) == 2
    assert registry.largest_batch([]) == 0
