"""The pure core: states, fingerprints, keys, envelopes, settings, registry."""

from __future__ import annotations

import json
import uuid

import pytest

from jobrelay.core import topology
from jobrelay.core.errors import InvalidPayload, UnknownJobType
from jobrelay.core.fingerprint import canonical_json, request_hash
from jobrelay.core.jobs import is_valid_idempotency_key, safe_error_text
from jobrelay.core.message import Envelope, MalformedMessage
from jobrelay.core.settings import Settings, mask_url, parse_type_queues
from jobrelay.core.states import JobState
from jobrelay.handlers.builtin import registry
from tests.support.transitions import CANCELLABLE_STATES, TRANSITIONS, can_transition

# The core's import rule (no I/O library) is checked in test_imports.py.


def test_the_transition_table_matches_the_spec() -> None:
    assert can_transition(JobState.QUEUED, JobState.RUNNING)
    assert can_transition(JobState.RUNNING, JobState.RETRYING)
    assert can_transition(JobState.RETRYING, JobState.RUNNING)
    assert can_transition(JobState.RUNNING, JobState.QUEUED)  # rescue
    assert can_transition(JobState.QUARANTINED, JobState.QUEUED)  # replay
    assert not can_transition(JobState.SUCCEEDED, JobState.RUNNING)
    assert not can_transition(JobState.CANCELLED, JobState.QUEUED)
    assert not can_transition(JobState.QUEUED, JobState.SUCCEEDED)
    assert can_transition(JobState.QUEUED, JobState.CANCELLED)  # at once
    assert can_transition(JobState.RETRYING, JobState.CANCELLED)
    assert can_transition(JobState.RUNNING, JobState.CANCELLED)  # requested, then its worker
    assert can_transition(JobState.WAITING, JobState.QUEUED)  # its parents all succeeded
    assert can_transition(JobState.WAITING, JobState.CANCELLED)  # a parent failed, or a cancel
    assert not can_transition(JobState.WAITING, JobState.RUNNING)  # never claimed
    assert can_transition(JobState.CANCELLED, JobState.WAITING)  # its failed parent replayed
    assert can_transition(JobState.RUNNING, JobState.SLEEPING)  # a durable sleep or wait
    assert can_transition(JobState.SLEEPING, JobState.RUNNING)  # claimed when its time comes
    assert can_transition(JobState.SLEEPING, JobState.QUEUED)  # woken: signal, child, pause
    assert can_transition(JobState.SLEEPING, JobState.CANCELLED)
    assert not can_transition(JobState.SLEEPING, JobState.SUCCEEDED)  # it runs first
    assert not can_transition(JobState.QUEUED, JobState.SLEEPING)  # only a handler sleeps
    assert can_transition(JobState.QUARANTINED, JobState.CANCELLED)  # given up: unblocks
    expected = {
        JobState.QUEUED,
        JobState.RETRYING,
        JobState.RUNNING,
        JobState.WAITING,
        JobState.SLEEPING,
        JobState.QUARANTINED,
    }
    assert expected == CANCELLABLE_STATES
    assert set(TRANSITIONS) == set(JobState)
    assert TRANSITIONS[JobState.SUCCEEDED] == frozenset()


def test_the_request_hash_ignores_key_order_but_not_values() -> None:
    a = request_hash("catalog.export", {"course": "JavaScript", "x": [1, 2]})
    b = request_hash("catalog.export", {"x": [1, 2], "course": "JavaScript"})
    c = request_hash("catalog.export", {"course": "Markdown", "x": [1, 2]})
    d = request_hash("demo.sleep", {"course": "JavaScript", "x": [1, 2]})
    assert a == b
    assert len({a, c, d}) == 3
    assert canonical_json({"b": 1, "a": "é"}) == '{"a":"é","b":1}'


@pytest.mark.parametrize(
    ("key", "valid"),
    [
        ("a", True),
        ("k" * 200, True),
        ("order-42/retry:1", True),
        ("", False),
        (None, False),
        ("k" * 201, False),
        ("with space", False),
        ("tab\t", False),
        ("ключ", False),
    ],
)
def test_idempotency_keys_are_1_to_200_visible_ascii_characters(
    key: str | None, valid: bool
) -> None:
    assert is_valid_idempotency_key(key) is valid


def test_an_envelope_round_trips_and_garbage_is_refused_with_a_safe_reason() -> None:
    envelope = Envelope(job_id=uuid.uuid4(), type="demo.sleep")
    assert Envelope.decode(envelope.encode()) == envelope
    for body in (
        b"\xff\xfe",
        b"not json",
        b"[]",
        b'{"version": 2}',
        b'{"version": 1, "type": "t", "job_id": "nope"}',
        b'{"version": 1, "job_id": "' + str(uuid.uuid4()).encode() + b'"}',
    ):
        with pytest.raises(MalformedMessage) as error:
            Envelope.decode(body)
        assert b"nope" not in str(error.value).encode()


@pytest.mark.parametrize("job_type", ["demo\u0000sleep", "demo\nsleep", "x" * 201])
def test_an_envelope_whose_type_no_registry_name_can_be_is_malformed(job_type: str) -> None:
    """Found by the garbage fuzzer: a NUL in the type reached the unknown-type deferral, whose
    statement PostgreSQL refused, and the delivery was requeued until the broker gave up."""
    body = json.dumps({"version": 1, "type": job_type, "job_id": str(uuid.uuid4())}).encode()
    with pytest.raises(MalformedMessage, match="invalid type"):
        Envelope.decode(body)


def test_urls_are_masked_for_logs() -> None:
    assert mask_url("postgresql+psycopg://jobrelay:s3cret@db:5432/x") == (
        "postgresql+psycopg://jobrelay:***@db:5432/x"
    )
    assert mask_url("amqp://guest:guest@localhost:5672/") == "amqp://guest:***@localhost:5672/"
    assert mask_url("http://host/no-password") == "http://host/no-password"


def test_settings_come_from_jobrelay_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBRELAY_LEASE_SECONDS", "12.5")
    monkeypatch.setenv("JOBRELAY_MAX_ATTEMPTS", "7")
    settings = Settings()
    assert settings.lease_seconds == 12.5
    assert settings.max_attempts == 7
    assert Settings.model_fields["max_body_bytes"].default == 65536
    monkeypatch.setenv("JOBRELAY_MAX_ATTEMPTS", "0")
    with pytest.raises(ValueError):
        Settings()


def test_type_queues_parse_and_refuse_nonsense() -> None:
    assert parse_type_queues("catalog.export=slow, demo.sleep=slow") == {
        "catalog.export": "slow",
        "demo.sleep": "slow",
    }
    assert parse_type_queues("") == {}
    with pytest.raises(ValueError):
        parse_type_queues("catalog.export")
    assert topology.typed_queue_bindings({"catalog.export": "slow"}) == {
        "jobrelay.jobs.slow": ["catalog.export"]
    }


def test_the_work_queue_is_quorum_with_at_least_once_dead_lettering() -> None:
    arguments = topology.work_queue_arguments(delivery_limit=50)
    assert arguments["x-queue-type"] == "quorum"
    assert arguments["x-dead-letter-exchange"] == "jobrelay.quarantine"
    assert arguments["x-dead-letter-strategy"] == "at-least-once"
    assert arguments["x-overflow"] == "reject-publish"
    assert arguments["x-delivery-limit"] == 50


def test_the_builtin_registry_validates_payloads() -> None:
    assert {t.name for t in registry} == {"catalog.export", "demo.sleep", "demo.fail"}
    registry.validate_payload("catalog.export", {"course": "JavaScript"})
    with pytest.raises(InvalidPayload) as error:
        registry.validate_payload("demo.fail", {"mode": "sometimes", "secret": "s3"})
    assert "s3" not in repr(error.value.extra)
    with pytest.raises(UnknownJobType):
        registry.get("no.such.type")


def test_stored_errors_keep_the_message_with_secrets_masked_and_name_other_classes() -> None:
    from jobrelay.core.errors import TransientError

    assert safe_error_text(TransientError("upstream 503")) == "upstream 503"
    assert safe_error_text(ValueError("password=hunter2")) == "ValueError: password=***"
