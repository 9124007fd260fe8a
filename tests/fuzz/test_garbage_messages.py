"""Garbage on the work queue (docs/failure-points.md, "Poison messages and garbage bodies"):
hypothesis-generated bodies, headers and properties published to ``jobrelay.jobs`` while a
consumer runs.

Every message must end in exactly one of three ways: in the quarantine queue (dead-lettered by
the consumer with reason ``rejected``, never by the broker's delivery limit after a crash loop)
unless it is a well-formed envelope; acked as a harmless duplicate, a well-formed envelope of an
existing, finished or owned job; or acked and logged, a well-formed envelope of a job that is not
in the database. The consumer never dies and never hits an unexpected error, no job changes
state, and afterwards it still runs a valid job to success.

The messages are drawn by hypothesis up front (derandomized: the same run every time) and then
published; a failure names the offending message by its ``message_id``.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from dataclasses import dataclass
from typing import Any

import aio_pika
import pytest
from hypothesis import HealthCheck, Phase, given, settings as hypothesis_settings, strategies as st

from jobrelay.core.execution import LeaseTerms
from jobrelay.core.message import Envelope, MalformedMessage
from jobrelay.core.settings import Settings
from jobrelay.core.states import JobState
from jobrelay.core.topology import DEFAULT_QUEUE, type_queue_name
from jobrelay.db.execution_store import Claimed, PgExecutionStore
from jobrelay.db.store import Store
from tests.conftest import MakeSettings
from tests.support.consumer_kit import (
    broker,
    eventually,
    mark_outbox_published,
    new_client,
    publish_jobs,
    quarantined_messages,
    registry,
    rows,
    running_consumer,
    scalar,
    submit,
    wait_state,
    work_queue_count,
)
from tests.support.factories import results_of, set_job

MESSAGES = 150
BATCH = 50
JOB_TYPES = ["demo.sleep", "catalog.export", "demo.fail", "test.count"]


@dataclass(frozen=True)
class Garbage:
    kind: str
    body: bytes
    routing_key: str
    headers: dict[str, Any]
    content_type: str | None
    content_encoding: str | None
    correlation_id: str | None


# A low delivery limit: a message that crashes its consumer would reach the quarantine quickly,
# with reason delivery_limit, which the checks below reject.
DELIVERY_LIMIT = 5


# --- strategies -----------------------------------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=30)
    | st.uuids().map(str),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=12,
)

header_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    # Sent as AMQP single-precision. No NaN or infinity: RabbitMQ 3.10's frame parser has no
    # clause for them and closes the *publishing* connection (INTERNAL_ERROR), so such a
    # message never reaches a queue and there is nothing for a consumer to survive.
    | st.floats(width=32, allow_nan=False, allow_infinity=False)
    | st.text(max_size=40)
    | st.binary(max_size=40).map(bytearray),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.text(min_size=1, max_size=10), children, max_size=3)
    ),
    max_leaves=6,
)

headers = st.dictionaries(
    st.sampled_from(["x-death", "x-delivery-count", "x-first-death-reason", "x-match", "job_id"])
    | st.text(min_size=1, max_size=20),
    header_values,
    max_size=4,
)


def uuid_spellings(job_id: uuid.UUID) -> st.SearchStrategy[str]:
    """The ways ``uuid.UUID`` accepts one id: braces, urn:, no dashes, upper case."""
    return st.sampled_from(
        [str(job_id), f"{{{job_id}}}", f"urn:uuid:{job_id}", job_id.hex, str(job_id).upper()]
    )


def envelope_fields(known: list[uuid.UUID]) -> st.SearchStrategy[Any]:
    return (
        json_values
        | st.sampled_from([1, "1", 1.0, True, 2, 0, -1, "", "v1"])
        | st.uuids().map(str)
        | st.sampled_from(known).flatmap(uuid_spellings)
        | st.sampled_from(JOB_TYPES)
    )


def hostile_json() -> st.SearchStrategy[bytes]:
    """JSON that breaks a naive decoder: nesting past the recursion limit, integers past the
    4300-digit conversion limit, non-finite numbers, lone surrogates."""
    return st.one_of(
        st.integers(1_000, 100_000).map(lambda n: b"[" * n + b"]" * n),
        st.integers(1_000, 20_000).map(lambda n: b'{"version": 1, "job_id": ' + b"[" * n),
        st.integers(4_301, 20_000).map(lambda n: b'{"version": ' + b"7" * n + b"}"),
        st.integers(4_301, 20_000).map(lambda n: b"-" + b"9" * n),
        st.sampled_from(
            [
                b'{"version": NaN, "type": "demo.sleep", "job_id": "x"}',
                b'{"version": Infinity}',
                b'{"type": "\\ud800", "version": 1, "job_id": "\\udc00"}',
                b'{"version": 1, "type": "demo.sleep", "job_id": null}',
                b'{"version": 1e999}',
            ]
        ),
    )


def huge_envelope(job_id: uuid.UUID, pad: int = 1 << 20) -> bytes:
    return Envelope(job_id, "demo.sleep").encode()[:-1] + b',"pad":"' + b"x" * pad + b'"}'


def garbage(known: list[uuid.UUID]) -> st.SearchStrategy[Garbage]:
    fields = envelope_fields(known)
    envelope_like = st.fixed_dictionaries(
        {}, optional={"job_id": fields, "type": fields, "version": fields, "extra": json_values}
    ).map(lambda document: json.dumps(document).encode())
    bodies = st.one_of(
        st.tuples(st.just("bytes"), st.binary(max_size=600)),
        st.tuples(st.just("text"), st.text(max_size=200).map(str.encode)),
        st.tuples(st.just("json"), json_values.map(lambda value: json.dumps(value).encode())),
        st.tuples(st.just("envelope_like"), envelope_like),
        st.tuples(
            st.just("unknown_job"),
            st.builds(Envelope, st.uuids(), st.text(min_size=1, max_size=40)).map(Envelope.encode),
        ),
        st.tuples(
            st.just("known_job"),
            st.builds(Envelope, st.sampled_from(known), st.sampled_from(JOB_TYPES)).map(
                Envelope.encode
            ),
        ),
        st.tuples(st.just("hostile_json"), hostile_json()),
        st.tuples(
            st.just("huge"),
            st.tuples(st.binary(min_size=1, max_size=64), st.integers(4_000, 40_000)).map(
                lambda chunk_times: chunk_times[0] * chunk_times[1]
            ),
        ),
        st.tuples(
            st.just("huge_known_job"),
            st.tuples(st.sampled_from(known), st.integers(100_000, 1_000_000)).map(
                lambda pair: huge_envelope(pair[0], pair[1])
            ),
        ),
    )
    optional_text = st.none() | st.text(max_size=40)
    return st.builds(
        lambda kind_body, routing_key, headers, content_type, encoding, correlation: Garbage(
            kind_body[0], kind_body[1], routing_key, headers, content_type, encoding, correlation
        ),
        bodies,
        st.sampled_from([*JOB_TYPES, "", "#", "garbage"]) | st.text(max_size=40),
        headers,
        st.sampled_from(["application/json", "text/plain", "application/octet-stream"])
        | optional_text,
        st.sampled_from(["gzip", "identity"]) | optional_text,
        st.uuids().map(str) | optional_text,
    )


def draw_messages(known: list[uuid.UUID], count: int) -> list[Garbage]:
    """``count`` distinct examples, the same on every run."""
    drawn: list[Garbage] = []

    @hypothesis_settings(
        max_examples=count,
        derandomize=True,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
        deadline=None,
    )
    @given(garbage(known))
    def collect(message: Garbage) -> None:
        drawn.append(message)

    collect()
    return drawn


# --- the oracle -----------------------------------------------------------------------------


def envelope_job_id(body: bytes) -> uuid.UUID | None:
    """The job a well-formed envelope (``core/message.py``) names; None when the body is not
    one (``Envelope.decode``'s own judgement: its rules are tested in tests/unit)."""
    try:
        return Envelope.decode(body).job_id
    except MalformedMessage:
        return None


# --- helpers --------------------------------------------------------------------------------


async def publish_garbage(cfg: Settings, messages: list[tuple[str, Garbage]]) -> None:
    async with broker(cfg) as channel:
        exchange = await channel.get_exchange("jobrelay.jobs")
        for message_id, message in messages:
            await exchange.publish(
                aio_pika.Message(
                    message.body,
                    headers=message.headers,
                    content_type=message.content_type,
                    content_encoding=message.content_encoding,
                    correlation_id=message.correlation_id,
                    message_id=message_id,
                    delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
                ),
                routing_key=message.routing_key,
            )


async def finished_and_owned_jobs(store: Store) -> list[uuid.UUID]:
    """Jobs a stray envelope may name harmlessly: succeeded, cancelled, quarantined, and one
    running under a live lease held by someone else."""
    client_id = await new_client(store)
    succeeded, cancelled, quarantined, running = [
        await submit(store, client_id, "demo.sleep", {"seconds": n}) for n in range(4)
    ]
    await set_job(store, succeeded, state=JobState.SUCCEEDED, result={"slept": 0})
    assert await store.cancel_job(cancelled, client_id=client_id, detail="test")
    await set_job(store, quarantined, state=JobState.QUARANTINED)
    claim = await PgExecutionStore(store).claim(running, LeaseTerms.fresh(600))
    assert isinstance(claim, Claimed)
    await mark_outbox_published(store)
    return [succeeded, cancelled, quarantined, running]


async def snapshot(store: Store) -> list[Any]:
    return await rows(
        store,
        "SELECT j.id, j.state, j.attempts, j.lease_token, j.lease_until, j.updated_at, "
        "j.finished_at, j.last_error_code, r.result FROM jobrelay.jobs j "
        "LEFT JOIN jobrelay.job_results r ON r.job_id = j.id ORDER BY j.id",
    )


def deliveries(consumer: Any, outcome: str) -> int:
    return int(consumer.metrics.deliveries.labels(outcome)._value.get())


def by_message_id(messages: list[Any]) -> dict[str, list[Any]]:
    found: dict[str, list[Any]] = {}
    for message in messages:
        found.setdefault(str(message.message_id), []).append(message)
    return found


def assert_dead_lettered(message: Any, published: Garbage) -> None:
    """Rejected from the work queue: by the broker's dead-lettering, or — for a message that
    came with an x-death header of its own, which crashes RabbitMQ's — by the consumer's copy."""
    headers = message.headers or {}
    where = (message.message_id, published.kind, published.headers, headers)
    queue = queue_of_routing_key(published.routing_key)
    if "x-death" in published.headers:
        assert "x-death" not in headers, where
        assert headers["x-first-death-reason"] == "rejected", where
        assert headers["x-first-death-queue"] == queue, where
        return
    deaths = headers.get("x-death")
    assert isinstance(deaths, list) and deaths, where
    assert (deaths[0]["reason"], deaths[0]["queue"]) == ("rejected", queue), where


async def work_left(cfg: Settings) -> int:
    """Messages left in the default queue and in the queues of the consumer's types."""
    queues = ["default", *(type_queue_name(job_type) for job_type in registry.types)]
    return sum([await work_queue_count(cfg, queue) for queue in queues])


def queue_of_routing_key(routing_key: str) -> str:
    """Where a message published with ``routing_key`` lands: the queue of a type the running
    consumer runs (it declared it), else the default queue (through the alternate exchange)."""
    return type_queue_name(routing_key) if routing_key in registry.types else DEFAULT_QUEUE


async def at_least(cfg: Settings, count: int) -> list[Any] | None:
    found = await quarantined_messages(cfg)
    return found if len(found) >= count else None


# --- the fuzz run ---------------------------------------------------------------------------


async def test_garbage_on_the_work_queue_is_quarantined_or_harmlessly_acked_and_the_consumer_survives(  # noqa: E501
    make_settings: MakeSettings, store: Store
) -> None:
    cfg = make_settings(delivery_limit=DELIVERY_LIMIT)
    known = await finished_and_owned_jobs(store)
    drawn = draw_messages(known, MESSAGES)
    assert len(drawn) >= MESSAGES * 0.9, f"hypothesis drew only {len(drawn)} messages"
    # Plus, whatever hypothesis drew, one huge well-formed envelope per known job (1 MiB).
    drawn += [
        Garbage("huge_known_job", huge_envelope(job_id), "demo.sleep", {}, None, None, None)
        for job_id in known
    ]
    messages = [(f"garbage-{n}", message) for n, message in enumerate(drawn)]
    named = {mid: envelope_job_id(m.body) for mid, m in messages}
    harmless = {mid for mid, job_id in named.items() if job_id in set(known)}
    # A well-formed envelope of a job not in the database (a row a failover lost): acked.
    unknown = {mid for mid, job_id in named.items() if job_id is not None} - harmless
    poison = {mid for mid, job_id in named.items() if job_id is None}
    kinds = Counter(m.kind for _, m in messages)
    assert harmless and len(poison) > MESSAGES // 2, kinds
    before = await snapshot(store)
    last_event = await scalar(store, "SELECT max(seq) FROM jobrelay.job_journal")

    async with running_consumer(cfg) as consumer:
        for start in range(0, len(messages), BATCH):
            await publish_garbage(cfg, messages[start : start + BATCH])
        dead = await eventually(
            lambda: at_least(cfg, len(poison)), within=90, what=f"{len(poison)} dead letters"
        )
        await eventually(
            lambda: _true(
                deliveries(consumer, "duplicate") >= len(harmless)
                and deliveries(consumer, "unknown_job") >= len(unknown)
            ),
            what="every harmless message and every unknown job's acked",
        )
        assert await work_left(cfg) == 0

        # Every poison message is in the quarantine once, unchanged, dead-lettered by the
        # consumer's reject (not by the delivery limit after a crash loop).
        quarantined = by_message_id(dead)
        assert set(quarantined) == poison, {
            "missing": sorted(poison - set(quarantined)),
            "unexpected": sorted(set(quarantined) - poison),
        }
        published = dict(messages)
        for message_id, copies in quarantined.items():
            assert len(copies) == 1, f"{message_id} dead-lettered {len(copies)} times"
            [message] = copies
            assert message.body == published[message_id].body, message_id
            assert_dead_lettered(message, published[message_id])
        assert deliveries(consumer, "error") == 0, "a message raised inside the worker"
        assert deliveries(consumer, "malformed") == len(poison)
        assert deliveries(consumer, "unknown_job") == len(unknown)
        assert deliveries(consumer, "duplicate") == len(harmless)
        for outcome in ("succeeded", "retried", "quarantined", "attempts_exhausted"):
            assert deliveries(consumer, outcome) == 0, outcome

        # No job changed; the only new journal entries are the duplicates' own.
        assert await snapshot(store) == before
        new_events = await rows(
            store,
            "SELECT event, count(*) FROM jobrelay.job_journal WHERE seq > :last GROUP BY event",
            last=last_event,
        )
        assert [tuple(row) for row in new_events] == [("duplicate_delivery", len(harmless))]

        # Still consuming, and a real job still runs to success.
        assert consumer.consuming
        client_id = await new_client(store)
        job_id = await submit(store, client_id, "demo.sleep", {"seconds": 0})
        await mark_outbox_published(store)
        await publish_jobs(cfg, [(job_id, "demo.sleep")])
        await wait_state(store, job_id, "succeeded")
    assert len(await results_of(store, job_id)) == 1


async def _true(value: bool) -> bool:
    return value


# --- regressions the fuzzing found ----------------------------------------------------------

HOSTILE_BODIES = [
    b"[" * 50_000 + b"]" * 50_000,  # nesting past the recursion limit: RecursionError
    b'{"version": ' + b"7" * 5_000 + b"}",  # past int's 4300-digit limit: a bare ValueError
]


@pytest.mark.parametrize("body", HOSTILE_BODIES, ids=["deep_nesting", "huge_integer"])
def test_a_body_that_breaks_the_json_decoder_is_a_malformed_message(body: bytes) -> None:
    with pytest.raises(MalformedMessage):
        Envelope.decode(body)


async def test_a_body_that_breaks_the_json_decoder_is_quarantined_at_once_not_crash_looped(
    make_settings: MakeSettings, store: Store
) -> None:
    cfg = make_settings(delivery_limit=DELIVERY_LIMIT)
    messages = [
        (f"hostile-{n}", Garbage("hostile_json", body, "demo.sleep", {}, None, None, None))
        for n, body in enumerate(HOSTILE_BODIES)
    ]
    async with running_consumer(cfg) as consumer:
        await publish_garbage(cfg, messages)
        dead = await eventually(lambda: at_least(cfg, len(messages)), what="dead letters")
        assert deliveries(consumer, "malformed") == len(messages)
        assert deliveries(consumer, "error") == 0
    assert sorted(m.message_id for m in dead) == ["hostile-0", "hostile-1"]
    assert all(m.headers["x-death"][0]["reason"] == "rejected" for m in dead)


FORGED_X_DEATHS: list[Any] = [
    [1.5, "not a table"],  # what the fuzzer drew first: the queue process crashed
    "a string",
    [{"queue": 7, "reason": None, "count": "many"}, {"count": -1}],
    [{"queue": DEFAULT_QUEUE, "reason": "rejected", "count": 1, "exchange": ""}],
]


async def test_a_message_with_a_forged_x_death_header_is_quarantined_by_hand_and_the_broker_lives(
    make_settings: MakeSettings, store: Store
) -> None:
    """RabbitMQ 3.10 crashes the queue (and after a few restarts, every quorum queue of the
    node) when it dead-letters a message whose x-death header is not its own."""
    cfg = make_settings(delivery_limit=DELIVERY_LIMIT)
    messages = [
        (
            f"forged-{n}",
            Garbage("forged", b"not json", "demo.sleep", {"x-death": forged}, None, None, None),
        )
        for n, forged in enumerate(FORGED_X_DEATHS)
    ]
    unknown = Envelope(uuid.uuid4(), "demo.sleep").encode()
    messages.append(
        (
            "forged-unknown-job",
            Garbage("forged", unknown, "demo.sleep", {"x-death": [2.5]}, None, None, None),
        )
    )
    client_id = await new_client(store)
    job_id = await submit(store, client_id, "demo.sleep", {"seconds": 0})
    await mark_outbox_published(store)
    async with running_consumer(cfg) as consumer:
        await publish_garbage(cfg, messages)
        # All but the unknown job's, which is acked: nothing could ever run it.
        dead = await eventually(lambda: at_least(cfg, len(messages) - 1), what="dead letters")
        await eventually(lambda: _true(deliveries(consumer, "unknown_job") == 1), what="ack")
        assert deliveries(consumer, "error") == 0
        # The broker's quorum queues still work: a real job goes through the same queue.
        await publish_jobs(cfg, [(job_id, "demo.sleep")])
        await wait_state(store, job_id, "succeeded")
        assert await work_left(cfg) == 0
    published = dict(messages)
    assert sorted(m.message_id for m in dead) == sorted(set(published) - {"forged-unknown-job"})
    for message in dead:
        assert message.body == published[message.message_id].body
        assert_dead_lettered(message, published[message.message_id])
