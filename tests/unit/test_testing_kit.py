"""``jobrelay.testing``: a handler's verdict as the consumer decides it, a context that keeps
progress, and the in-memory recorder standing in for the client and ``jobrelay.enqueue``."""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import BaseModel

import jobrelay
from jobrelay import JobContext, PermanentError, Registry, TransientError
from jobrelay.core.errors import DuplicateJob, InvalidPayload, UnknownJobType
from jobrelay.core.registry import (
    PROGRESS_MESSAGE_MAX,
    JobType,
    NotConfigured,
    configured_enqueuer,
    install_enqueuer,
    installed_enqueuer,
)
from jobrelay.core.retry import RetryPolicy
from jobrelay.core.states import JobState
from jobrelay.testing import (
    Progress,
    Recorder,
    make_context,
    recording,
    run_job,
    run_job_async,
)


class Charge(BaseModel):
    order_id: str
    amount_cents: int


class Empty(BaseModel):
    pass


registry = Registry()


@registry.job("shop.charge", Charge, max_attempts=4)
async def charge(context: JobContext, payload: Charge) -> dict[str, Any]:
    context.progress(0.5, "asking the gateway")
    if payload.amount_cents == 0:
        raise TransientError("the payment gateway is busy", code="gateway_busy")
    if payload.amount_cents < 0:
        raise PermanentError("the card was declined", code="card_declined")
    context.progress(1.0)
    return {"charged": payload.amount_cents}


@registry.job("shop.receipt", Charge)
def receipt(context: JobContext, payload: Charge) -> dict[str, Any]:
    return {"thread": threading.current_thread().name}


@registry.job("shop.broken", Empty)
def broken(context: JobContext, payload: Empty) -> dict[str, Any]:
    raise ValueError("no receipt printer")


# The slow handlers' ends, by type: a verdict given while a handler is still running is its
# timeout's, not its end's. The plain one blocks until the test lets it go.
SLOW_ENDED: set[str] = set()
SLOW_PLAIN_RELEASE = threading.Event()


@registry.job("shop.slow", Empty, timeout_seconds=0.05)
async def slow(context: JobContext, payload: Empty) -> dict[str, Any]:
    await asyncio.sleep(5)
    SLOW_ENDED.add("shop.slow")
    return {}


@registry.job("shop.slow_plain", Empty, timeout_seconds=0.05)
def slow_plain(context: JobContext, payload: Empty) -> dict[str, Any]:
    SLOW_PLAIN_RELEASE.wait(60)
    SLOW_ENDED.add("shop.slow_plain")
    return {}


@registry.job("shop.no_dict", Empty)
def no_dict(context: JobContext, payload: Empty) -> Any:
    return ["not", "an", "object"]


@registry.job("shop.nan", Empty)
def nan(context: JobContext, payload: Empty) -> dict[str, Any]:
    return {"ratio": float("nan")}


@registry.job("shop.nul", Empty)
def nul(context: JobContext, payload: Empty) -> dict[str, Any]:
    return {"text": "a\x00b"}


@registry.job("shop.order", Charge)
async def order(context: JobContext, payload: Charge) -> dict[str, Any]:
    """Takes an order and enqueues its charge: what run_all follows."""
    job = await charge.enqueue_async(payload, key=f"charge:{payload.order_id}")
    return {"charge_job": str(job.id)}


@registry.job("shop.leaky", Empty)
def leaky(context: JobContext, payload: Empty) -> dict[str, Any]:
    raise TransientError("gateway refused token=s3cr3t-value and jr_abcdefgh12345678")


registry.register(JobType("shop.api_only", Empty))  # a type the API knows, no handler here

PAYLOAD = Charge(order_id="o-1", amount_cents=1999)


@pytest.fixture(autouse=True)
def nothing_configured() -> Iterator[None]:
    previous = install_enqueuer(None)
    yield
    install_enqueuer(previous)


# --- verdicts -------------------------------------------------------------------------------


def test_a_handler_that_returns_a_dict_succeeded_with_its_result_and_its_progress() -> None:
    verdict = run_job(charge, PAYLOAD)
    assert verdict.state is JobState.SUCCEEDED and verdict.succeeded
    assert verdict.result == {"charged": 1999}
    assert (verdict.error_code, verdict.message, verdict.retry_delay) == (None, None, None)
    assert verdict.progress == [Progress(0.5, "asking the gateway"), Progress(1.0, None)]


def test_a_plain_handler_runs_in_a_thread_as_on_the_consumer() -> None:
    verdict = run_job(receipt, PAYLOAD)
    assert verdict.result is not None
    assert verdict.result["thread"].startswith("jobrelay-handler-")


def test_a_transient_error_retries_with_its_code_and_the_policys_delay() -> None:
    policy = RetryPolicy(base_seconds=2.0, max_seconds=60.0)
    verdict = run_job(
        charge,
        {"order_id": "o-1", "amount_cents": 0},
        attempt=3,
        policy=policy,
        rng=random.Random(7),
    )
    assert verdict.state is JobState.RETRYING and verdict.retrying
    assert (verdict.error_code, verdict.message) == ("gateway_busy", "the payment gateway is busy")
    assert verdict.retry_delay == policy.delay(3, random.Random(7))
    assert policy.ceiling(3) / 2 <= verdict.retry_delay <= policy.ceiling(3) == 8.0
    assert isinstance(verdict.exception, TransientError)


def test_the_last_attempt_of_the_types_limit_is_quarantined_as_attempts_exhausted() -> None:
    verdict = run_job(charge, {"order_id": "o-1", "amount_cents": 0}, attempt=4)  # max 4
    assert verdict.state is JobState.QUARANTINED
    assert verdict.error_code == "attempts_exhausted"
    assert verdict.message == "gateway_busy: the payment gateway is busy"
    assert run_job(charge, {"order_id": "o-1", "amount_cents": 0}, attempt=3).retrying


def test_a_permanent_error_is_quarantined_at_once_with_its_code() -> None:
    verdict = run_job(charge, Charge(order_id="o-1", amount_cents=-5))
    assert verdict.quarantined and verdict.context.attempt == 1
    assert (verdict.error_code, verdict.message) == ("card_declined", "the card was declined")
    assert (
        verdict.failure is not None
        and verdict.failure.error_class == "jobrelay.core.errors.PermanentError"
    )


def test_any_other_exception_is_an_unexpected_error_with_its_traceback_for_operators() -> None:
    verdict = run_job(registry, "shop.broken", {})
    assert verdict.retrying
    assert (verdict.error_code, verdict.message) == (
        "unexpected_error",
        "ValueError: no receipt printer",
    )
    assert verdict.failure is not None and verdict.failure.traceback is not None
    assert "raise ValueError" in verdict.failure.traceback


def test_secrets_in_a_handlers_message_are_masked_as_the_consumer_masks_them() -> None:
    verdict = run_job(registry, "shop.leaky", {})
    assert verdict.message == "gateway refused token=*** and jr_***"
    assert verdict.failure is not None and "s3cr3t" not in (verdict.failure.traceback or "")


def test_a_type_without_a_handler_is_quarantined_as_no_handler() -> None:
    verdict = run_job(registry, "shop.api_only", {})
    assert verdict.quarantined and verdict.error_code == "no_handler"
    assert verdict.message == "no handler for job type 'shop.api_only'"


@pytest.mark.parametrize("name", ["shop.slow", "shop.slow_plain"])
def test_the_types_timeout_is_enforced_on_async_and_plain_handlers(name: str) -> None:
    SLOW_PLAIN_RELEASE.clear()
    try:
        verdict = run_job(registry, name, {})
        assert name not in SLOW_ENDED  # answered while the handler ran on: by its timeout
    finally:
        SLOW_PLAIN_RELEASE.set()  # the plain handler's thread may end now
    assert verdict.retrying
    assert (verdict.error_code, verdict.message) == ("timeout", "handler timed out after 0.05s")


def test_an_invalid_payload_is_quarantined_without_running_the_handler() -> None:
    verdict = run_job(charge, {"order_id": "o-1", "amount_cents": "lots"})
    assert verdict.quarantined and verdict.error_code == "invalid_payload"
    assert verdict.message is not None
    assert verdict.message.startswith("payload does not match the schema of 'shop.charge': ")
    assert '"loc": ["amount_cents"]' in verdict.message and "lots" not in verdict.message
    assert verdict.progress == [] and verdict.exception is None


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("shop.no_dict", "the handler returned no dict"),
        ("shop.nan", "the handler's result is not JSON"),
        ("shop.nul", "the handler's result cannot be stored as JSON: "),
    ],
)
def test_a_result_jsonb_cannot_store_is_quarantined_as_invalid_result(
    name: str, message: str
) -> None:
    verdict = run_job(registry, name, {})
    assert verdict.quarantined and verdict.error_code == "invalid_result"
    assert verdict.message is not None and verdict.message.startswith(message)


def test_a_payload_that_is_not_json_is_the_tests_mistake_not_a_verdict() -> None:
    with pytest.raises(TypeError, match="payload is not JSON"):
        run_job(charge, {"order_id": "o-1", "amount_cents": 1, "at": datetime.now(UTC)})
    with pytest.raises(UnknownJobType):
        run_job(registry, "shop.nothing", {})
    with pytest.raises(TypeError, match=r"run_job\(registry, type_name, payload\)"):
        run_job(registry, {})  # type: ignore[call-overload]


def test_a_given_context_decides_the_attempt_and_a_different_attempt_is_refused() -> None:
    context = make_context(charge, attempt=4, max_attempts=4)
    verdict = run_job(charge, {"order_id": "o-1", "amount_cents": 0}, context=context)
    assert verdict.error_code == "attempts_exhausted" and verdict.context is context
    with pytest.raises(ValueError, match="attempt=1 but the context's is 4"):
        run_job(charge, PAYLOAD, context=context, attempt=1)


async def test_run_job_async_is_the_same_verdict_inside_a_running_loop() -> None:
    verdict = await run_job_async(registry, "shop.charge", PAYLOAD)
    assert verdict.result == {"charged": 1999}
    with pytest.raises(RuntimeError, match="await run_job_async"):
        run_job(charge, PAYLOAD)


# --- contexts -------------------------------------------------------------------------------


def test_make_context_gives_a_context_like_the_consumers(caplog: pytest.LogCaptureFixture) -> None:
    job_id = uuid.uuid4()
    context = make_context("shop.charge", attempt=2, max_attempts=5, job_id=job_id)
    assert (context.job_id, context.job_type, context.attempt, context.max_attempts) == (
        job_id,
        "shop.charge",
        2,
        5,
    )
    assert context.results_dir.is_dir() and context.parent_results == {}
    assert context.idempotency_key == f"jobrelay:{job_id}"
    with caplog.at_level(logging.INFO, logger="jobrelay.handler"):
        context.logger.info("charging")
    [line] = caplog.records
    assert (line.job_id, line.attempt, line.type) == (str(job_id), 2, "shop.charge")  # type: ignore[attr-defined]


def test_make_context_refuses_an_attempt_no_consumer_runs() -> None:
    with pytest.raises(ValueError, match="attempt is a whole number of at least 1, not 0"):
        make_context(attempt=0)
    with pytest.raises(ValueError, match="attempt 5 of 4: a consumer never runs"):
        run_job(charge, PAYLOAD, attempt=5)  # the type's limit is 4


def test_the_results_dirs_made_for_contexts_share_one_folder_removed_at_exit() -> None:
    first, second = make_context().results_dir, run_job(charge, PAYLOAD).context.results_dir
    assert first != second and first.parent == second.parent
    assert first.parent.name.startswith("jobrelay-test-") and first.is_dir()


def test_progress_is_checked_and_cut_as_on_the_consumer() -> None:
    context = make_context(parent_results={"quote": {"cents": 5}})
    context.progress(0.25, "m" * (PROGRESS_MESSAGE_MAX + 10))
    with pytest.raises(ValueError, match="fraction is from 0 to 1"):
        context.progress(2)
    assert context.reports == [Progress(0.25, "m" * PROGRESS_MESSAGE_MAX)]
    assert context.parent_results == {"quote": {"cents": 5}}


# --- the recorder ---------------------------------------------------------------------------


def test_a_definitions_enqueue_is_recorded_while_the_recorder_is_installed() -> None:
    with recording() as recorder:
        job = charge.enqueue(PAYLOAD, key="charge:o-1", priority=5)
    assert recorder.jobs == [job]
    assert (job.type, job.payload, job.key, job.priority, job.max_attempts, job.state) == (
        "shop.charge",
        {"order_id": "o-1", "amount_cents": 1999},
        "charge:o-1",
        5,
        4,
        "queued",
    )
    assert recorder.assert_enqueued("shop.charge", PAYLOAD, key="charge:o-1") is job
    with pytest.raises(NotConfigured):
        charge.enqueue(PAYLOAD)  # uninstalled: nothing configured again


def test_a_recording_takes_enqueues_even_when_the_code_calls_configure_and_restores_it() -> None:
    jobrelay.configure(client_name="before")
    before = configured_enqueuer()
    other = Recorder()
    with pytest.raises(RuntimeError, match="startup failed"), recording() as recorder:
        jobrelay.configure(client=other)  # an application's startup, inside the test
        job = charge.enqueue(PAYLOAD)
        raise RuntimeError("startup failed")
    assert recorder.jobs == [job] and other.jobs == []
    assert configured_enqueuer() is installed_enqueuer() is before  # and no recorder
    with pytest.raises(TypeError, match="enqueue needs a psycopg Connection"):
        charge.enqueue(PAYLOAD, connection=object())  # through jobrelay.enqueue again


def test_recordings_nest_and_each_exit_puts_back_the_one_outside() -> None:
    with recording() as outer:
        with recording() as inner:
            made_inside = charge.enqueue(PAYLOAD)
            jobrelay.enqueue(object(), client="shop", type="t.x", payload={}, key="k")
        made_outside = charge.enqueue(PAYLOAD)
        jobrelay.enqueue(object(), client="shop", type="t.y", payload={}, key="k")
    assert [job.type for job in inner.jobs] == ["shop.charge", "t.x"]
    assert [job.type for job in outer.jobs] == ["shop.charge", "t.y"]
    assert inner.jobs[0] is made_inside and outer.jobs[0] is made_outside
    assert "enqueue" not in vars(jobrelay)  # back to the module's lazy import
    with pytest.raises(NotConfigured):
        charge.enqueue(PAYLOAD)


def test_the_recorder_refuses_what_jobrelay_enqueue_refuses() -> None:
    recorder = Recorder()
    with pytest.raises(ValueError, match="max_attempts must be an integer from 1 to 100"):
        recorder.submit("shop.charge", {}, max_attempts=0)
    with pytest.raises(ValueError, match="type must be a string of 1 to"):
        recorder.submit("", {})
    assert recorder.submit("shop.charge", {"items": (1, 2)}, key="k").payload == {"items": [1, 2]}


def test_the_same_key_and_request_is_the_same_job_and_another_request_conflicts() -> None:
    recorder = Recorder()
    made = recorder.submit("shop.charge", {"order_id": "o-1", "amount_cents": 5}, key="k")
    again = recorder.submit("shop.charge", {"amount_cents": 5, "order_id": "o-1"}, key="k")
    assert again.id == made.id and len(recorder.jobs) == 1 and len(recorder.calls) == 2
    for other in (
        {"payload": {"order_id": "o-1", "amount_cents": 6}},
        {"payload": {"order_id": "o-1", "amount_cents": 5}, "priority": 1},
        {"payload": {"order_id": "o-1", "amount_cents": 5}, "delay": 60},
    ):
        with pytest.raises(jobrelay.IdempotencyConflict) as raised:
            recorder.submit("shop.charge", key="k", **other)
        assert raised.value.job_id == made.id and raised.value.status == 409
    assert recorder.jobs == [made]


def test_jobrelay_enqueue_is_replaced_while_installed_and_restored_after() -> None:
    real = jobrelay.enqueue
    with recording() as recorder:
        job = jobrelay.enqueue(
            object(),
            client="shop",
            type="shop.charge",
            payload={"order_id": "o-1", "amount_cents": 5},
            key="k",
            registry=registry,
        )
        with pytest.raises(InvalidPayload):
            jobrelay.enqueue(
                object(), client="shop", type="shop.charge", payload={}, key="k2", registry=registry
            )
    assert jobrelay.enqueue is real
    assert (job.client, job.in_transaction, job.max_attempts) == ("shop", True, 4)
    assert recorder.of_type("shop.charge") == [job] and recorder.of_type("shop.receipt") == []


async def test_the_async_twins_are_recorded_too() -> None:
    with recording() as recorder:
        through_definition = await charge.enqueue_async(PAYLOAD, connection=object())
        through_function = await jobrelay.enqueue_async(
            object(), client="shop", type="shop.receipt", payload={"x": 1}, key="r"
        )
    jobrelay.configure(async_client=recorder.async_client)
    through_client = await receipt.enqueue_async(PAYLOAD)
    assert recorder.jobs == [through_definition, through_function, through_client]
    assert through_definition.in_transaction and not through_client.in_transaction


def test_a_unique_key_a_recorded_job_holds_answers_that_job() -> None:
    recorder = Recorder()
    made = recorder.submit("shop.charge", {"order_id": "o-1"}, key="a", unique_key="o-1")
    deduplicated = recorder.submit("shop.charge", {"order_id": "o-1"}, key="b", unique_key="o-1")
    assert deduplicated.id == made.id and deduplicated.deduplicated and not made.deduplicated
    other_type = recorder.submit("shop.receipt", {}, key="c", unique_key="o-1")
    assert other_type.id != made.id


def test_the_recorder_keeps_each_enqueues_policies_and_refuses_a_rejected_duplicate() -> None:
    policies = {
        "sequence_key": "customer-1",
        "unique_for_seconds": 600,
        "on_duplicate": "reject",
        "throttle_key": "tenant-1",
    }
    with recording():
        made = charge.enqueue(PAYLOAD, key="a", sequence_key="customer-1", throttle_key="t-1")
        with pytest.raises(ValueError, match="on_duplicate needs a unique_key"):
            charge.enqueue(PAYLOAD, key="b", on_duplicate="reject")  # the type has no unique=
        with pytest.raises(TypeError, match="unexpected keywords: sequence"):
            charge.enqueue(PAYLOAD, sequence="x")  # type: ignore[call-arg]
    assert (made.sequence_key, made.throttle_key) == ("customer-1", "t-1")
    recorder = Recorder()
    kept = recorder.submit("t", {}, key="k1", unique_key="u", **policies)
    debounced = recorder.enqueue(
        None,
        client="shop",
        type="d",
        payload={},
        key="k2",
        unique_key="v",
        debounce_seconds=5,
        debounce_max_seconds=60,
    )
    with pytest.raises(DuplicateJob) as refused:
        recorder.submit("t", {"again": True}, key="k3", unique_key="u", on_duplicate="reject")
    assert (kept.unique_for_seconds, kept.on_duplicate) == (600, "reject")
    assert (debounced.debounce_seconds, debounced.debounce_max_seconds) == (5, 60)
    assert refused.value.extra["job_id"] == str(kept.id) and len(recorder.jobs) == 2
    assert recorder.assert_enqueued("t", sequence_key="customer-1") is kept
    with pytest.raises(ValueError, match="on_duplicate"):
        recorder.submit("t", {}, unique_key="u", on_duplicate="maybe")


def test_assert_enqueued_says_what_was_recorded_when_nothing_matches() -> None:
    recorder = Recorder()
    recorder.assert_nothing_enqueued()
    recorder.submit("shop.charge", {"order_id": "o-1", "amount_cents": 5}, key="k")
    with pytest.raises(
        AssertionError,
        match=r"no job of type 'shop.charge' with payload .*6.* "
        r"recorded: shop.charge \{.*\} \(key 'k'\)",
    ):
        recorder.assert_enqueued("shop.charge", {"order_id": "o-1", "amount_cents": 6})
    with pytest.raises(AssertionError, match="and priority=3"):
        recorder.assert_enqueued("shop.charge", priority=3)
    with pytest.raises(AssertionError, match="jobs were enqueued"):
        recorder.assert_nothing_enqueued()
    recorder.clear()
    recorder.assert_nothing_enqueued()
    assert recorder.submit("shop.charge", {"order_id": "o-1", "amount_cents": 6}, key="k")


def test_invalid_keys_and_payloads_are_refused_as_jobrelay_refuses_them() -> None:
    recorder = Recorder()
    with pytest.raises(ValueError, match="key must be 1 to 200 visible ASCII characters"):
        recorder.submit("shop.charge", {}, key="with space")
    with pytest.raises(TypeError, match="payload must be a JSON object"):
        recorder.submit("shop.charge", [1, 2])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="payload cannot be stored"):
        recorder.submit("shop.charge", {"ratio": float("inf")})
    with pytest.raises(ValueError, match="run_at needs a time zone"):
        recorder.submit("shop.charge", {}, run_at=datetime(2030, 1, 1))
    assert recorder.jobs == []


def test_run_all_runs_the_recorded_jobs_and_those_their_handlers_enqueue() -> None:
    with recording() as recorder:
        order.enqueue(PAYLOAD, key="order:o-1")
        ran = recorder.run_all()
    assert [(job.type, verdict.state) for job, verdict in ran] == [
        ("shop.order", JobState.SUCCEEDED),
        ("shop.charge", JobState.SUCCEEDED),
    ]
    assert ran[0][1].result == {"charge_job": str(ran[1][0].id)}
    assert ran[1][1].result == {"charged": 1999}
    assert recorder.run_all() == []  # each job runs once


def test_run_all_needs_a_registry_for_jobs_enqueued_without_one() -> None:
    recorder = Recorder()
    recorder.submit("shop.charge", {"order_id": "o-1", "amount_cents": 0}, key="k")
    with pytest.raises(ValueError, match=r"run_all\(registry\)"):
        recorder.run_all()
    [(_, verdict)] = recorder.run_all(registry)
    assert verdict.error_code == "gateway_busy"


# Issue 37 item 8.5: a dict payload that leaves fields to their defaults did not match the
# recorded payload of a job enqueued with the model, whose JSON has every field.
class Refund(BaseModel):
    order_id: str
    amount_cents: int = 0
    reason: str = "requested_by_customer"


@registry.job("shop.refund", Refund)
def refund(context: JobContext, payload: Refund) -> dict[str, Any]:
    return {}


def test_assert_enqueued_compares_a_dict_as_the_types_model_reads_it() -> None:
    with recording() as recorder:
        refund.enqueue(Refund(order_id="o-1"), key="r1")
        jobrelay.enqueue(
            object(),
            client="shop",
            type="shop.refund",
            payload={"order_id": "o-2", "amount_cents": 500},
            key="r2",
            registry=registry,
        )

    assert recorder.jobs[0].payload == {
        "order_id": "o-1",
        "amount_cents": 0,
        "reason": "requested_by_customer",
    }
    assert recorder.assert_enqueued("shop.refund", {"order_id": "o-1"}).key == "r1"
    assert recorder.assert_enqueued("shop.refund", {"order_id": "o-2", "amount_cents": 500})
    assert recorder.assert_enqueued("shop.refund", Refund(order_id="o-1")).key == "r1"
    # The defaults count: a field the dict leaves out is the default, not "anything".
    with pytest.raises(AssertionError, match=r"no job of type 'shop\.refund' with payload"):
        recorder.assert_enqueued("shop.refund", {"order_id": "o-2"})
    with pytest.raises(AssertionError):
        recorder.assert_enqueued("shop.refund", {"order_id": "o-1", "reason": "duplicate"})
    with pytest.raises(AssertionError):  # no payload of the model looks like this one
        recorder.assert_enqueued("shop.refund", {"order_id": "o-1", "amount_cents": "lots"})


def test_assert_enqueued_without_the_types_model_compares_the_keys_it_is_given() -> None:
    recorder = Recorder()
    recorder.submit("shop.refund", {"order_id": "o-3", "amount_cents": 0}, key="r3")

    assert recorder.assert_enqueued("shop.refund", {"order_id": "o-3"}).key == "r3"
    with pytest.raises(AssertionError):
        recorder.assert_enqueued("shop.refund", {"order_id": "o-3", "amount_cents": 7})
    with pytest.raises(AssertionError):
        recorder.assert_enqueued("shop.refund", {"order_id": "o-3", "reason": "x"})
