"""Tracing (docs/observability.md): the W3C ``traceparent`` checked as plain text
(``core/telemetry_context.py``), its header in the message format (``core/message.py``), and the
spans of ``jobrelay/telemetry.py`` on an SDK provider with an in-memory exporter (no collector)."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from jobrelay import telemetry
from jobrelay.broker.publisher import _end_span, build_message
from jobrelay.core.errors import IdempotencyConflict, StoreUnavailable
from jobrelay.core.message import TRACEPARENT_HEADER, Envelope, trace_headers, traceparent_of
from jobrelay.core.registry import JobContext, Registry
from jobrelay.core.relay import TIMEOUT, OutboxRow
from jobrelay.core.telemetry_context import (
    TraceParent,
    parse_traceparent,
    trace_id_of,
    valid_traceparent,
)
from jobrelay.logs import JsonFormatter, current_trace_id
from tests.support.consumer_fakes import InMemoryExecutionStore
from tests.support.worker_fakes import Clock, Empty, FakeDelivery, unit_worker

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN_ID = "00f067aa0ba902b7"
SUBMITTED = f"00-{TRACE_ID}-{SPAN_ID}-01"


# --- parsing: pure ---------------------------------------------------------------------------


def test_a_valid_traceparent_is_read_field_by_field() -> None:
    parsed = parse_traceparent(SUBMITTED)
    assert parsed == TraceParent(TRACE_ID, SPAN_ID, 1)
    assert parsed is not None and parsed.sampled
    assert parsed.header() == SUBMITTED
    assert trace_id_of(SUBMITTED) == TRACE_ID


def test_an_unsampled_traceparent_is_valid_and_keeps_its_flags() -> None:
    value = f"00-{TRACE_ID}-{SPAN_ID}-00"
    parsed = parse_traceparent(value)
    assert parsed is not None and not parsed.sampled
    assert valid_traceparent(value) == value


def test_whitespace_around_the_header_value_is_ignored() -> None:
    assert valid_traceparent(f"  {SUBMITTED}\t") == SUBMITTED


def test_bytes_are_read_as_ascii() -> None:
    assert valid_traceparent(SUBMITTED.encode()) == SUBMITTED
    assert valid_traceparent(b"\xff" * 55) is None


def test_a_later_version_is_read_by_its_first_four_fields_and_written_as_version_00() -> None:
    assert valid_traceparent(f"01-{TRACE_ID}-{SPAN_ID}-01-what-comes-later") == SUBMITTED
    assert valid_traceparent(f"01-{TRACE_ID}-{SPAN_ID}-01") == SUBMITTED


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        "garbage",
        SUBMITTED[:-1],  # too short
        SUBMITTED + "0",  # version 00 is exactly 55 characters
        SUBMITTED + "-extra",  # ... with nothing after it
        SUBMITTED.upper(),  # lowercase hex only
        f"00-{'0' * 32}-{SPAN_ID}-01",  # all-zero trace id
        f"00-{TRACE_ID}-{'0' * 16}-01",  # all-zero parent id
        f"ff-{TRACE_ID}-{SPAN_ID}-01",  # version ff is invalid
        f"0g-{TRACE_ID}-{SPAN_ID}-01",
        f"00_{TRACE_ID}-{SPAN_ID}-01",
        f"00-{TRACE_ID}_{SPAN_ID}-01",
        f"00-{TRACE_ID}-{SPAN_ID}_01",
        f"00-{TRACE_ID[:-1]}x-{SPAN_ID}-01",
        f"00-{TRACE_ID}-{SPAN_ID}-0x",
        f"01-{TRACE_ID}-{SPAN_ID}-01x",  # a later version's fifth field follows a dash
        f"00-{TRACE_ID}-{SPAN_ID}-01" + "-" * 600,  # far too long to be scanned
    ],
)
def test_a_malformed_traceparent_is_ignored(value: str | None) -> None:
    assert parse_traceparent(value) is None
    assert valid_traceparent(value) is None


# --- the message format: pure ------------------------------------------------------------------


def test_the_trace_context_round_trips_through_the_message_headers() -> None:
    headers = trace_headers(SUBMITTED)
    assert headers == {TRACEPARENT_HEADER: SUBMITTED}
    assert traceparent_of(headers) == SUBMITTED


def test_a_job_without_a_trace_context_gets_no_headers() -> None:
    assert trace_headers(None) is None
    assert traceparent_of(None) is None
    assert traceparent_of({}) is None


def test_a_malformed_or_foreign_header_value_reads_as_no_trace_context() -> None:
    assert traceparent_of({TRACEPARENT_HEADER: "garbage"}) is None
    assert traceparent_of({TRACEPARENT_HEADER: 42}) is None
    assert traceparent_of({TRACEPARENT_HEADER: SUBMITTED.encode()}) == SUBMITTED
    assert traceparent_of({"x-death": []}) is None


def test_the_published_message_carries_the_jobs_trace_context() -> None:
    row = OutboxRow(7, uuid.uuid4(), "demo.sleep", 1, traceparent=SUBMITTED)
    message = build_message(row)
    assert traceparent_of(message.headers) == SUBMITTED
    assert Envelope.decode(message.body) == Envelope(row.job_id, "demo.sleep")
    publish_context = f"00-{TRACE_ID}-{'1' * 16}-01"
    assert traceparent_of(build_message(row, publish_context).headers) == publish_context
    untraced = dataclasses.replace(row, traceparent=None)
    assert traceparent_of(build_message(untraced).headers) is None


# --- turning it on -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("environ", "on"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ""}, False),
        ({"OTEL_SERVICE_NAME": "x", "OTEL_BSP_SCHEDULE_DELAY": "100"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"}, False),
    ],
)
def test_spans_are_exported_only_when_an_otlp_endpoint_is_set(
    environ: dict[str, str], on: bool
) -> None:
    assert telemetry.export_configured(environ) is on


def test_without_an_endpoint_setup_installs_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in telemetry.ENDPOINT_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert telemetry.setup("api") is False
    assert not telemetry.enabled()


def test_the_endpoint_is_logged_without_credentials_path_or_query() -> None:
    environ = {"OTEL_EXPORTER_OTLP_ENDPOINT": "https://user:s3cret@otel.example:4318/x?token=t"}
    assert telemetry._endpoint_for_log(environ) == "https://otel.example:4318"
    traces = {**environ, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://traces:4318/v1/traces"}
    assert telemetry._endpoint_for_log(traces) == "http://traces:4318"


@pytest.mark.parametrize("endpoint", ["collector:4318", "grpc://collector:4317", "http://:4318"])
def test_an_endpoint_that_is_not_an_http_url_leaves_tracing_off(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, endpoint: str
) -> None:
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    with caplog.at_level(logging.WARNING, logger="jobrelay.tracing"):
        assert telemetry.setup("consumer") is False
    assert not telemetry.enabled()
    assert "OTEL_EXPORTER_OTLP_ENDPOINT is not an http:// or https:// URL" in caplog.text


def test_export_failures_are_logged_once_per_interval_with_the_count_held_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [1000.0]
    monkeypatch.setattr(telemetry.time, "monotonic", lambda: now[0])
    rarely = telemetry._Rarely(300.0)

    def record(name: str = "opentelemetry.exporter") -> logging.LogRecord:
        return logging.LogRecord(name, logging.ERROR, __file__, 1, "export failed", None, None)

    assert rarely.filter(record())
    assert not rarely.filter(record())
    assert not rarely.filter(record())
    assert rarely.filter(record("opentelemetry.sdk"))  # another logger has its own budget
    now[0] += 301
    again = record()
    assert rarely.filter(again)
    assert again.not_logged == 2


# --- log lines -----------------------------------------------------------------------------------


def json_lines(logger: logging.Logger) -> tuple[logging.Handler, io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter("test"))
    logger.addHandler(handler)
    return handler, stream


def read_lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_line_logged_while_a_job_is_traced_carries_its_trace_id() -> None:
    logger = logging.getLogger("jobrelay.test.tracing")
    logger.setLevel(logging.INFO)
    handler, stream = json_lines(logger)
    try:
        token = current_trace_id.set(TRACE_ID)
        logger.info("inside")
        current_trace_id.reset(token)
        logger.info("outside")
    finally:
        logger.removeHandler(handler)
    inside, outside = read_lines(stream)
    assert inside["trace_id"] == TRACE_ID
    assert "trace_id" not in outside


# --- spans ---------------------------------------------------------------------------------------


@pytest.fixture
def provider() -> Iterator[TracerProvider]:
    """Tracing on, with spans exported to an in-memory exporter as they end."""
    provider = TracerProvider()
    telemetry.activate(provider)
    try:
        yield provider
    finally:
        telemetry.deactivate()
        provider.shutdown()


@pytest.fixture
def spans(provider: TracerProvider) -> InMemorySpanExporter:
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter


def named(exporter: InMemorySpanExporter, name: str) -> ReadableSpan:
    [span] = [span for span in exporter.get_finished_spans() if span.name == name]
    return span


def context_of(span: ReadableSpan) -> str:
    assert span.context is not None
    flags = int(span.context.trace_flags)  # 01 sampled, 03 sampled with a random trace id
    return f"00-{span.context.trace_id:032x}-{span.context.span_id:016x}-{flags:02x}"


def test_with_tracing_off_the_accept_passes_the_submitters_context_on() -> None:
    assert not telemetry.enabled()
    with telemetry.accepting({"traceparent": SUBMITTED}, "/v1/jobs") as accept:
        assert current_trace_id.get() == TRACE_ID
        accept.accepted(uuid.uuid4(), "demo.sleep", "alice", "created")
    assert accept.traceparent == SUBMITTED
    assert accept.span is None
    assert current_trace_id.get() is None


def test_with_tracing_off_a_malformed_traceparent_is_not_stored() -> None:
    with telemetry.accepting({"traceparent": "00-nope"}, "/v1/jobs") as accept:
        assert current_trace_id.get() is None
    assert accept.traceparent is None


def test_the_accept_span_continues_the_submitters_trace(spans: InMemorySpanExporter) -> None:
    job_id = uuid.uuid4()
    headers = {"traceparent": SUBMITTED, "tracestate": "vendor=value"}
    with telemetry.accepting(headers, "/v1/jobs") as accept:
        assert current_trace_id.get() == TRACE_ID
        accept.accepted(job_id, "demo.sleep", "alice", "created")
    span = named(spans, telemetry.ACCEPT_SPAN)
    assert span.kind is SpanKind.SERVER
    assert span.parent is not None and f"{span.parent.span_id:016x}" == SPAN_ID
    assert span.context is not None and f"{span.context.trace_id:032x}" == TRACE_ID
    assert span.context.trace_state.get("vendor") == "value"
    assert accept.traceparent == context_of(span)  # what the job stores: the span's context
    assert span.attributes is not None
    assert span.attributes["jobrelay.job.id"] == str(job_id)
    assert span.attributes["jobrelay.client.name"] == "alice"
    assert span.attributes["jobrelay.outcome"] == "created"
    assert span.attributes["http.response.status_code"] == 202
    assert span.status.status_code is StatusCode.UNSET


@pytest.mark.parametrize("headers", [{}, {"traceparent": "garbage"}])
def test_without_a_valid_traceparent_the_accept_starts_a_new_trace(
    spans: InMemorySpanExporter, headers: dict[str, str]
) -> None:
    with telemetry.accepting(headers, "/v1/jobs") as accept:
        pass
    span = named(spans, telemetry.ACCEPT_SPAN)
    assert span.parent is None
    assert accept.traceparent == context_of(span)
    assert trace_id_of(accept.traceparent) != TRACE_ID


def test_a_rejected_request_is_no_error_of_the_service(spans: InMemorySpanExporter) -> None:
    with pytest.raises(IdempotencyConflict), telemetry.accepting({}, "/v1/jobs"):
        raise IdempotencyConflict("the key was used for another request")
    span = named(spans, telemetry.ACCEPT_SPAN)
    assert span.attributes is not None
    assert span.attributes["error.type"] == "idempotency_conflict"
    assert span.status.status_code is StatusCode.UNSET


def test_an_accept_that_fails_ends_its_span_with_error_status(
    spans: InMemorySpanExporter,
) -> None:
    with pytest.raises(StoreUnavailable), telemetry.accepting({}, "/v1/jobs"):
        raise StoreUnavailable("database unavailable")
    span = named(spans, telemetry.ACCEPT_SPAN)
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes is not None
    assert span.attributes["error.type"] == "database_unavailable"


def test_a_batch_span_counts_its_outcomes(spans: InMemorySpanExporter) -> None:
    with telemetry.accepting({"traceparent": SUBMITTED}, "/v1/jobs/batch") as accept:
        accept.batch("alice", 4, iter(["created", "created", "existing"]), invalid=1)
    attributes = named(spans, telemetry.ACCEPT_SPAN).attributes
    assert attributes is not None
    assert attributes["messaging.batch.message_count"] == 4
    assert attributes["jobrelay.outcome.created"] == 2
    assert attributes["jobrelay.outcome.existing"] == 1
    assert attributes["jobrelay.outcome.invalid"] == 1


def test_a_publish_span_is_a_child_of_the_jobs_context_and_its_message_carries_it(
    spans: InMemorySpanExporter,
) -> None:
    row = OutboxRow(7, uuid.uuid4(), "demo.sleep", 2, traceparent=SUBMITTED)
    span, traceparent = telemetry.publish_span(row)
    telemetry.end_publish_span(span, None)
    finished = named(spans, telemetry.PUBLISH_SPAN)
    assert finished.kind is SpanKind.PRODUCER
    assert finished.parent is not None and f"{finished.parent.span_id:016x}" == SPAN_ID
    assert traceparent == context_of(finished)
    assert finished.attributes is not None
    assert finished.attributes["messaging.message.id"] == "7"
    assert finished.attributes["jobrelay.publish.attempt"] == 2
    assert finished.status.status_code is StatusCode.UNSET


async def test_a_publish_given_up_ends_its_span_with_error_status(
    spans: InMemorySpanExporter,
) -> None:
    span, _ = telemetry.publish_span(OutboxRow(8, uuid.uuid4(), "demo.sleep", 1))
    publish: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    publish.cancel()
    _end_span(span, publish)
    finished = named(spans, telemetry.PUBLISH_SPAN)
    assert finished.parent is None  # a job without a trace context: a trace of its own
    assert finished.status.status_code is StatusCode.ERROR
    assert finished.attributes is not None
    assert finished.attributes["error.type"] == TIMEOUT


# --- the consumer: the worker on the in-memory store ---------------------------------------------


@pytest.fixture
def registry(provider: TracerProvider) -> Registry:
    registry = Registry()
    tracer = provider.get_tracer("handler")  # what a handler's own OpenTelemetry code gets

    @registry.job("t.traced", Empty)
    async def traced(context: JobContext, payload: Empty) -> dict[str, Any]:
        with tracer.start_as_current_span("handler.work"):
            context.logger.info("working")
            return {}

    @registry.job("t.flaky", Empty)
    async def flaky(context: JobContext, payload: Empty) -> dict[str, Any]:
        raise RuntimeError("flaky")

    return registry


async def execute(
    registry: Registry, tmp_path: Path, job_type: str, *, header: str | None, stored: str | None
) -> tuple[str, list[dict[str, Any]]]:
    """One delivery of a new job: its verdict's outcome, and the consumer's log lines."""
    store = InMemoryExecutionStore(Clock())
    job = store.add(job_type)
    store.jobs[job.id] = dataclasses.replace(job, traceparent=stored)
    worker = unit_worker(store, registry, Clock(), tmp_path)
    delivery = FakeDelivery(Envelope(job_id=job.id, type=job_type).encode())
    logger = logging.getLogger("jobrelay")
    handler, stream = json_lines(logger)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        verdict = await worker.handle(delivery, traceparent=header)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    return verdict.outcome, read_lines(stream)


async def test_the_execute_span_continues_the_messages_context_around_the_handler(
    spans: InMemorySpanExporter, registry: Registry, tmp_path: Path
) -> None:
    outcome, lines = await execute(
        registry, tmp_path, "t.traced", header=SUBMITTED, stored=f"00-{'a' * 32}-{'b' * 16}-01"
    )
    assert outcome == "succeeded"
    span = named(spans, telemetry.EXECUTE_SPAN)
    assert span.kind is SpanKind.CONSUMER
    assert span.parent is not None and f"{span.parent.span_id:016x}" == SPAN_ID
    assert span.context is not None and f"{span.context.trace_id:032x}" == TRACE_ID
    assert span.attributes is not None
    assert span.attributes["jobrelay.outcome"] == "succeeded"
    assert span.attributes["jobrelay.job.attempt"] == 1
    assert span.status.status_code is StatusCode.UNSET
    # Every line about the job, the handler's own included, names the trace.
    assert {line["msg"] for line in lines} >= {"claimed", "working", "attempt finished"}
    assert {line.get("trace_id") for line in lines} == {TRACE_ID}


async def test_a_handlers_own_spans_nest_under_the_execute_span(
    spans: InMemorySpanExporter, registry: Registry, tmp_path: Path
) -> None:
    await execute(registry, tmp_path, "t.traced", header=SUBMITTED, stored=None)
    execute_span = named(spans, telemetry.EXECUTE_SPAN)
    own = named(spans, "handler.work")
    assert execute_span.context is not None and own.parent is not None
    assert own.parent.span_id == execute_span.context.span_id
    assert own.context is not None and own.context.trace_id == execute_span.context.trace_id


async def test_without_a_header_the_execution_continues_the_jobs_stored_context(
    spans: InMemorySpanExporter, registry: Registry, tmp_path: Path
) -> None:
    outcome, lines = await execute(registry, tmp_path, "t.traced", header=None, stored=SUBMITTED)
    assert outcome == "succeeded"
    span = named(spans, telemetry.EXECUTE_SPAN)
    assert span.parent is not None and f"{span.parent.span_id:016x}" == SPAN_ID
    claimed = next(line for line in lines if line["msg"] == "claimed")
    assert claimed["trace_id"] == TRACE_ID


async def test_a_failed_attempt_ends_the_execute_span_with_error_status(
    spans: InMemorySpanExporter, registry: Registry, tmp_path: Path
) -> None:
    outcome, _ = await execute(registry, tmp_path, "t.flaky", header=SUBMITTED, stored=None)
    assert outcome == "retried"
    span = named(spans, telemetry.EXECUTE_SPAN)
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description is not None and "flaky" in span.status.description
    assert span.attributes is not None
    assert span.attributes["error.type"] == "unexpected_error"
    assert span.attributes["jobrelay.outcome"] == "retried"


async def test_a_delivery_that_claims_nothing_still_ends_one_span(
    spans: InMemorySpanExporter, registry: Registry, tmp_path: Path
) -> None:
    worker = unit_worker(InMemoryExecutionStore(Clock()), registry, Clock(), tmp_path)
    verdict = await worker.handle(FakeDelivery(b"not json"), traceparent=SUBMITTED)
    assert verdict.outcome == "malformed"
    span = named(spans, telemetry.EXECUTE_SPAN)
    assert span.parent is not None and f"{span.parent.span_id:016x}" == SPAN_ID
    assert span.status.status_code is StatusCode.ERROR
    assert current_trace_id.get() is None  # nothing of the delivery is left in this context


async def test_with_tracing_off_the_consumers_lines_still_carry_the_trace_id(
    tmp_path: Path,
) -> None:
    registry = Registry()

    @registry.job("t.quiet", Empty)
    async def quiet(context: JobContext, payload: Empty) -> dict[str, Any]:
        context.logger.info("working")
        return {}

    assert not telemetry.enabled()
    outcome, lines = await execute(registry, tmp_path, "t.quiet", header=SUBMITTED, stored=None)
    assert outcome == "succeeded"
    assert lines and {line.get("trace_id") for line in lines} == {TRACE_ID}
