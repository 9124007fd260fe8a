"""OpenTelemetry tracing of a job across the API, the dispatcher and the consumers
(docs/observability.md): an edge adapter, as ``logs.py`` is.

Off unless the standard ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``)
is set. Then ``setup(service)``, called once by each service process, installs the SDK's
``TracerProvider`` with a ``BatchSpanProcessor`` and the OTLP/HTTP (protobuf) exporter, and
flushes it when the process exits. Off, nothing is installed and no span object is ever made:
what remains is checking a submitted ``traceparent`` and carrying it on as text
(``core/telemetry_context.py``), so that a system downstream that traces still joins the submitter's
trace, and the ``trace_id`` of the log lines of a job (``logs.current_trace_id``).

A job's trace, one span per process:

- ``jobrelay.accept`` (SERVER, the API): continues the submitter's ``traceparent`` (else starts
  a trace); the new job stores this span's context in ``jobs.traceparent``.
- ``jobrelay.publish`` (PRODUCER, the dispatcher): one per message, a child of the stored
  context, ended when the broker confirmed it (error status when it did not); the message's
  ``traceparent`` header is this span's context.
- ``jobrelay.execute`` (CONSUMER, a consumer): continues the message's header (else the job's
  stored context), and is the current span while the handler runs, so that a handler's own
  spans nest under it.

A collector that is down never blocks or breaks a service: ended spans wait in the processor's
bounded queue and are dropped when it is full, the export runs on the processor's own thread,
and what the exporter logs about its failures reaches the log at most once every few minutes
(``EXPORT_LOG_INTERVAL``); it never logs its headers (``OTEL_EXPORTER_OTLP_HEADERS`` may hold a
token), and every line still goes through the service's masking formatter.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
import urllib.parse
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping
from contextvars import ContextVar, Token
from types import TracebackType
from typing import TYPE_CHECKING

from opentelemetry import context as otel_context, trace
from opentelemetry.context import Context
from opentelemetry.trace import (
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    TraceState,
)

from jobrelay.core.deliveries import DeliveryOutcome
from jobrelay.core.errors import RequestError
from jobrelay.core.jobs import Job
from jobrelay.core.relay import OutboxRow
from jobrelay.core.telemetry_context import (
    TraceParent,
    parse_traceparent,
    trace_id_of,
    valid_traceparent,
)
from jobrelay.core.topology import JOBS_EXCHANGE
from jobrelay.logs import current_trace_id

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

# The logger keeps its name from before the module was renamed: operators filter log lines on it.
log = logging.getLogger("jobrelay.tracing")

ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
SERVICE_NAMES = {
    "api": "jobrelay-api",
    "dispatcher": "jobrelay-dispatcher",
    "consumer": "jobrelay-consumer",
}
# One line per exporter logger this often at most: a collector that stays down would
# otherwise add a line or more to the log every few seconds.
EXPORT_LOG_INTERVAL = 300.0
# How long a stopping process waits for its last spans to be exported. With the collector
# down the export would wait for its own timeout (10 s) and retries: the process exits first.
SHUTDOWN_SECONDS = 5.0

ACCEPT_SPAN = "jobrelay.accept"
PUBLISH_SPAN = "jobrelay.publish"
EXECUTE_SPAN = "jobrelay.execute"
MESSAGING_SYSTEM = "rabbitmq"
# The outcomes (the consumer's metric labels) that end an execution span with error status.
FAILED_OUTCOMES: frozenset[DeliveryOutcome] = frozenset(
    {
        DeliveryOutcome.RETRIED,
        DeliveryOutcome.QUARANTINED,
        DeliveryOutcome.ATTEMPTS_EXHAUSTED,
        DeliveryOutcome.UNKNOWN_JOB,
        DeliveryOutcome.MALFORMED,
        DeliveryOutcome.LEASE_LOST,
        DeliveryOutcome.STORE_UNAVAILABLE,
        DeliveryOutcome.INTERRUPTED,
        DeliveryOutcome.ERROR,
    }
)
ACCEPT_STATUS = {"created": 202, "existing": 200, "deduplicated": 200, "conflict": 409}
# W3C trace context allows 32 list members of at most 256 characters, but a longer tracestate
# than this is not worth parsing on the accept path: it is dropped.
MAX_TRACESTATE_CHARS = 512

_tracer: trace.Tracer | None = None
_provider: TracerProvider | None = None


# --- turning it on ---------------------------------------------------------------------------


def export_configured(environ: Mapping[str, str]) -> bool:
    """Whether the environment asks for spans to be exported: an OTLP endpoint is set (and the
    SDK is not disabled with ``OTEL_SDK_DISABLED=true``)."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return any(environ.get(name, "").strip() for name in ENDPOINT_VARIABLES)


def setup(service: str) -> bool:
    """Install OTLP export for ``service`` (``api``, ``dispatcher``, ``consumer``) when the
    environment asks for it; returns whether tracing is on. Once per process: the entry points
    call it after ``configure_logging``. A configuration the SDK refuses leaves tracing off,
    said in one line: tracing never keeps a service from starting."""
    if _tracer is not None:
        return True
    if not export_configured(os.environ):
        return False
    endpoint = _endpoint_for_log(os.environ)
    if endpoint is None:
        log.warning(
            "tracing stays off: %s is not an http:// or https:// URL",
            _endpoint_variable(os.environ),
            extra={"event": "tracing_refused"},
        )
        return False
    try:
        provider = _otlp_provider(service)
    except Exception as error:
        log.warning(
            "tracing stays off: the OpenTelemetry configuration was refused (%s)",
            type(error).__name__,
            extra={"event": "tracing_refused"},
        )
        return False
    _rarely_log_exporter_failures()
    trace.set_tracer_provider(provider)
    activate(provider)
    atexit.register(shutdown)
    log.info(
        "tracing on: spans exported with OTLP/HTTP to %s",
        endpoint,
        extra={"event": "tracing_on"},
    )
    return True


def activate(provider: trace.TracerProvider) -> None:
    """Make spans with ``provider`` from now on (``setup`` does; tests pass an SDK provider
    with an in-memory exporter)."""
    global _tracer, _provider
    _tracer = provider.get_tracer("jobrelay")
    _provider = _as_sdk_provider(provider)


def deactivate() -> None:
    """Back to off (tests); the provider is left to its owner."""
    global _tracer, _provider
    _tracer = _provider = None


def enabled() -> bool:
    return _tracer is not None


def shutdown() -> None:
    """Flush the spans still queued and stop exporting, waiting ``SHUTDOWN_SECONDS`` at most
    (registered with ``atexit`` by ``setup``)."""
    provider = _provider
    deactivate()
    if provider is None:
        return
    flushing = threading.Thread(
        target=provider.shutdown, name="jobrelay-tracing-shutdown", daemon=True
    )
    flushing.start()
    flushing.join(SHUTDOWN_SECONDS)


def _otlp_provider(service: str) -> TracerProvider:
    # Imported here: a process that does not export never loads the SDK or the exporter.
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create()  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        name = SERVICE_NAMES.get(service, f"jobrelay-{service}")
        resource = resource.merge(Resource({SERVICE_NAME: name}))
    # Our own bounded flush at exit (``shutdown``) instead of the SDK's, which may wait 30 s.
    provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    # The exporter and the processor read the rest of the standard OTEL_* variables
    # (headers, timeout, compression, OTEL_BSP_* delays and sizes) themselves.
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider


def _as_sdk_provider(provider: trace.TracerProvider) -> TracerProvider | None:
    from opentelemetry.sdk.trace import TracerProvider

    return provider if isinstance(provider, TracerProvider) else None


def _endpoint_variable(environ: Mapping[str, str]) -> str:
    """The variable the exporter takes its endpoint from (the traces one comes first)."""
    return next(name for name in ENDPOINT_VARIABLES if environ.get(name, "").strip())


def _endpoint_for_log(environ: Mapping[str, str]) -> str | None:
    """Where spans go, as scheme://host:port only (no user, password, path or query); None
    when the endpoint is not an http(s) URL."""
    try:
        parts = urllib.parse.urlsplit(environ[_endpoint_variable(environ)].strip())
        port = f":{parts.port}" if parts.port else ""
    except ValueError:  # a port that is not a number
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    return f"{parts.scheme}://{parts.hostname}{port}"


class _Rarely(logging.Filter):
    """Lets one record of each logger through every ``seconds``; the next one it lets through
    says how many it held back (``not_logged``)."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds
        self._next: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        now = time.monotonic()
        if now < self._next.get(record.name, 0.0):
            self._held[record.name] = self._held.get(record.name, 0) + 1
            return False
        self._next[record.name] = now + self.seconds
        held = self._held.pop(record.name, 0)
        if held:
            record.not_logged = held
        return True


class _ToRootHandlers(logging.Handler):
    """Hands a record to the root logger's handlers (the service's JSON lines), as propagation
    would, but behind this handler's filter."""

    def emit(self, record: logging.LogRecord) -> None:
        for handler in logging.getLogger().handlers:
            if record.levelno >= handler.level:
                handler.handle(record)


def _rarely_log_exporter_failures() -> None:
    """The SDK and the exporter log every failed export (and each retry of it): with the
    collector down, that is a line every few seconds. Their warnings and errors go out at
    most once per ``EXPORT_LOG_INTERVAL`` for each of their loggers."""
    handler = _ToRootHandlers()
    handler.addFilter(_Rarely(EXPORT_LOG_INTERVAL))
    otel = logging.getLogger("opentelemetry")
    otel.setLevel(logging.WARNING)
    otel.handlers[:] = [handler]
    otel.propagate = False


# --- trace contexts ----------------------------------------------------------------------------


def current_traceparent() -> str | None:
    """The ``traceparent`` of the caller's current span: for a job enqueued by code that
    traces (``jobrelay.enqueue`` in an application, a handler under ``jobrelay.execute``);
    None when there is no valid current span (no OpenTelemetry SDK installed)."""
    span_context = trace.get_current_span().get_span_context()
    return _header(span_context) if span_context.is_valid else None


def _header(span_context: SpanContext) -> str:
    return (
        f"00-{span_context.trace_id:032x}-{span_context.span_id:016x}-"
        f"{int(span_context.trace_flags):02x}"
    )


def _parent_context(parent: TraceParent | None, tracestate: str | None = None) -> Context:
    """A context whose span is the remote ``parent``; an empty one (a new trace) without."""
    if parent is None:
        return Context()
    state = None
    if tracestate and len(tracestate) <= MAX_TRACESTATE_CHARS:
        state = TraceState.from_header([tracestate])
    remote = SpanContext(
        trace_id=int(parent.trace_id, 16),
        span_id=int(parent.span_id, 16),
        is_remote=True,
        trace_flags=TraceFlags(parent.flags),
        trace_state=state,
    )
    return trace.set_span_in_context(NonRecordingSpan(remote), Context())


def _error_type(error: BaseException) -> str:
    code = getattr(error, "code", None)
    return code if isinstance(code, str) else type(error).__name__


# --- accept (the API) --------------------------------------------------------------------------


class Accept:
    """The accept of one request (``POST /v1/jobs`` or a batch), as a context manager.

    On: the SERVER span ``jobrelay.accept``, a child of the submitter's valid ``traceparent``
    (with its ``tracestate``) or the root of a new trace, current while the request is handled.
    Off: no span; the submitter's valid ``traceparent`` is passed on as it came. Either way
    ``traceparent`` is what the new jobs store (None: nothing to store), and the lines logged
    meanwhile carry its trace id. A malformed ``traceparent`` is ignored, as if absent."""

    def __init__(self, headers: Mapping[str, str], route: str) -> None:
        self.headers = headers
        self.route = route
        self.traceparent: str | None = None
        self.span: Span | None = None
        self._attached: Token[Context] | None = None
        self._logged: Token[str | None] | None = None

    def __enter__(self) -> Accept:
        submitted = parse_traceparent(self.headers.get("traceparent"))
        if _tracer is None:
            self.traceparent = None if submitted is None else submitted.header()
        else:
            tracestate = self.headers.get("tracestate") if submitted is not None else None
            self.span = _tracer.start_span(
                ACCEPT_SPAN,
                context=_parent_context(submitted, tracestate),
                kind=SpanKind.SERVER,
                attributes={
                    "http.request.method": "POST",
                    "http.route": self.route,
                    "messaging.system": MESSAGING_SYSTEM,
                    "messaging.operation.type": "create",
                    "messaging.operation.name": "accept",
                },
            )
            self.traceparent = _header(self.span.get_span_context())
            self._attached = otel_context.attach(trace.set_span_in_context(self.span))
        if self.traceparent is not None:
            self._logged = current_trace_id.set(trace_id_of(self.traceparent))
        return self

    def accepted(self, job_id: uuid.UUID, job_type: str, client: str, outcome: str) -> None:
        """One submission's answer: ``created``, ``existing`` or ``conflict``."""
        if self.span is None:
            return
        self.span.set_attributes(
            {
                "jobrelay.job.id": str(job_id),
                "messaging.message.conversation_id": str(job_id),
                "jobrelay.job.type": job_type,
                "jobrelay.client.name": client,
                "jobrelay.outcome": outcome,
                "http.response.status_code": ACCEPT_STATUS[outcome],
            }
        )

    def batch(self, client: str, jobs: int, outcomes: Iterable[str], *, invalid: int) -> None:
        """A batch's answers: ``jobs`` items, the ``outcomes`` of the valid ones (``created``,
        ``existing``, ``conflict``; counted only while tracing is on) and ``invalid`` others."""
        if self.span is None:
            return
        counts = Counter(outcomes)
        counts["invalid"] = invalid
        self.span.set_attributes(
            {
                "jobrelay.client.name": client,
                "messaging.batch.message_count": jobs,
                "http.response.status_code": 200,
                **{f"jobrelay.outcome.{outcome}": count for outcome, count in counts.items()},
            }
        )

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._logged is not None:
            current_trace_id.reset(self._logged)
        if self.span is None:
            return
        if self._attached is not None:
            otel_context.detach(self._attached)
        if error is not None:
            self.span.set_attribute("error.type", _error_type(error))
            # A caller's mistake (a 4xx answer) is no error of the service: only the rest is.
            if not isinstance(error, RequestError):
                self.span.set_status(Status(StatusCode.ERROR, type(error).__name__))
        self.span.end()


def accepting(headers: Mapping[str, str], route: str) -> Accept:
    return Accept(headers, route)


# --- publish (the dispatcher) ------------------------------------------------------------------


def publish_span(row: OutboxRow) -> tuple[Span, str]:
    """The PRODUCER span of one message (tracing on only), a child of the job's stored context
    (a new trace without one), and the ``traceparent`` its message carries: this span's."""
    assert _tracer is not None, "publish_span is called only while tracing is on"
    parent = parse_traceparent(row.traceparent) if row.traceparent else None
    job_id = str(row.job_id)
    # Few attributes: each costs the SDK a check, and a batch makes hundreds of these spans.
    # The job's type is the routing key.
    span = _tracer.start_span(
        PUBLISH_SPAN,
        context=_parent_context(parent),
        kind=SpanKind.PRODUCER,
        attributes={
            "messaging.system": MESSAGING_SYSTEM,
            "messaging.operation.type": "send",
            "messaging.destination.name": JOBS_EXCHANGE,
            "messaging.rabbitmq.destination.routing_key": row.type,
            "messaging.message.id": str(row.id),
            "messaging.message.conversation_id": job_id,
            "jobrelay.job.id": job_id,
            "jobrelay.publish.attempt": row.publish_attempts,
        },
    )
    return span, _header(span.get_span_context())


def end_publish_span(span: Span, failure: tuple[str, str] | None) -> None:
    """End a publish span: confirmed (``failure`` None), or not, with the reason and the safe
    detail of ``broker/publisher.py::classify``."""
    if failure is None:
        span.set_attribute("jobrelay.outcome", "confirmed")
    else:
        reason, detail = failure
        span.set_attributes({"jobrelay.outcome": reason, "error.type": reason})
        span.set_status(Status(StatusCode.ERROR, f"{reason}: {detail}"[:200]))
    span.end()


# --- execute (a consumer) ----------------------------------------------------------------------

_execution: ContextVar[Execution | None] = ContextVar("jobrelay_execution", default=None)


class Execution:
    """One delivery's processing, from its arrival to its settling (``consumer/worker.py``).

    Its trace context is the message's ``traceparent`` header, or, when the message has none,
    the claimed job's stored one. On, the CONSUMER span ``jobrelay.execute`` starts (dated back
    to the delivery's arrival) once that is known: at the claim, or at the end for a delivery
    that claimed nothing; from the claim on it is the current span, so that the handler's own
    spans nest under it. The lines logged meanwhile carry the trace id either way."""

    def __init__(self, traceparent: str | None) -> None:
        self.traceparent = traceparent
        self.started_ns = time.time_ns() if _tracer is not None else 0
        self.span: Span | None = None
        self._failed = False  # its status already says why
        self._attached: Token[Context] | None = None
        self._logged = current_trace_id.set(trace_id_of(traceparent) if traceparent else None)
        self._current = _execution.set(self)

    def claimed(self, job: Job) -> None:
        if self.traceparent is None and job.traceparent is not None:
            self.traceparent = valid_traceparent(job.traceparent)
            if self.traceparent is not None:
                current_trace_id.set(trace_id_of(self.traceparent))
        if _tracer is None or self.span is not None:
            return
        span = self._start()
        span.set_attributes(
            {
                "jobrelay.job.id": str(job.id),
                "messaging.message.conversation_id": str(job.id),
                "jobrelay.job.type": job.type,
                "jobrelay.job.attempt": job.attempts,
            }
        )
        self._attached = otel_context.attach(trace.set_span_in_context(span))

    def failed(self, error_type: str, description: str) -> None:
        if self.span is not None:
            self.span.set_attribute("error.type", error_type)
            self.span.set_status(Status(StatusCode.ERROR, description[:300]))
            self._failed = True

    def end(self, outcome: DeliveryOutcome) -> None:
        try:
            if _tracer is not None:
                span = self.span or self._start()
                span.set_attribute("jobrelay.outcome", outcome)
                if outcome in FAILED_OUTCOMES and not self._failed:
                    span.set_status(Status(StatusCode.ERROR, outcome))
                span.end()
        finally:
            if self._attached is not None:
                otel_context.detach(self._attached)
            _execution.reset(self._current)
            current_trace_id.reset(self._logged)

    def _start(self) -> Span:
        assert _tracer is not None
        parent = parse_traceparent(self.traceparent) if self.traceparent else None
        self.span = _tracer.start_span(
            EXECUTE_SPAN,
            context=_parent_context(parent),
            kind=SpanKind.CONSUMER,
            start_time=self.started_ns,
            attributes={
                "messaging.system": MESSAGING_SYSTEM,
                "messaging.operation.type": "process",
                "messaging.operation.name": "execute",
            },
        )
        return self.span


def executing(traceparent: str | None) -> Execution:
    """Start tracing a delivery whose message carried ``traceparent``; ``end`` it once it is
    settled, in the same task."""
    return Execution(traceparent)


def execution_claimed(job: Job) -> None:
    """The current delivery claimed ``job`` (its handler runs next)."""
    execution = _execution.get()
    if execution is not None:
        execution.claimed(job)


def execution_failed(error_type: str, description: str) -> None:
    """The current delivery's attempt failed: ``description`` is the stored, masked summary."""
    execution = _execution.get()
    if execution is not None:
        execution.failed(error_type, description)
