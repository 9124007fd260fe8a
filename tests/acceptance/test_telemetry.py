"""One trace across three processes (docs/observability.md): real ``jobrelay api``,
``jobrelay dispatcher`` and ``jobrelay consumer`` processes export their spans with OTLP/HTTP to
a receiver in this test process (an ``http.server`` thread on 127.0.0.1 that decodes each
``ExportTraceServiceRequest``), and the job's accept, publish and execution are one trace, the
submitter's, each span the child of the one before. Without an endpoint nothing is sent, and the
job still carries the submitter's context."""

from __future__ import annotations

import gzip
import json
import threading
import time
import uuid
import zlib
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from jobrelay.db.store import Store
from tests.conftest import MakeSettings, auth
from tests.support.processes import (
    Service,
    answers,
    free_port,
    running,
    service_env,
    wait_for,
)

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
SUBMITTER_SPAN = "00f067aa0ba902b7"
SUBMITTED = f"00-{TRACE_ID}-{SUBMITTER_SPAN}-01"
SLEEP = {"type": "demo.sleep", "payload": {"seconds": 0}}


# --- an OTLP/HTTP receiver ---------------------------------------------------------------------


@dataclass(frozen=True)
class Received:
    service: str  # the resource's service.name
    span: Span

    @property
    def name(self) -> str:
        return self.span.name

    @property
    def trace_id(self) -> str:
        return self.span.trace_id.hex()

    @property
    def span_id(self) -> str:
        return self.span.span_id.hex()

    @property
    def parent_id(self) -> str:
        return self.span.parent_span_id.hex()

    def attribute(self, key: str) -> Any:
        for pair in self.span.attributes:
            if pair.key == key:
                value = pair.value
                return getattr(value, value.WhichOneof("value"))
        return None


class Receiver:
    """Accepts ``POST /v1/traces`` (protobuf, plain or compressed) and keeps every span."""

    def __init__(self) -> None:
        self.requests = 0
        self.spans: list[Received] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.end_headers()
                    return
                receiver.take(body, self.headers.get("Content-Encoding"))
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # no line per request on the test's output

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def take(self, body: bytes, encoding: str | None) -> None:
        if encoding == "gzip":
            body = gzip.decompress(body)
        elif encoding == "deflate":
            body = zlib.decompress(body)
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        with self._lock:
            self.requests += 1
            for resource_spans in request.resource_spans:
                service = next(
                    (
                        pair.value.string_value
                        for pair in resource_spans.resource.attributes
                        if pair.key == "service.name"
                    ),
                    "",
                )
                for scope_spans in resource_spans.scope_spans:
                    self.spans.extend(Received(service, span) for span in scope_spans.spans)

    def received(self) -> list[Received]:
        with self._lock:
            return list(self.spans)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    receiver = Receiver()
    thread = threading.Thread(target=receiver.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        receiver.server.shutdown()
        receiver.server.server_close()
        thread.join(10)


# --- the three services ------------------------------------------------------------------------


@dataclass
class Running:
    api: Service
    dispatcher: Service
    consumer: Service
    base: str


@contextmanager
def three_services(env: dict[str, str], log_dir: Path) -> Iterator[Running]:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with ExitStack() as stack:
        api = stack.enter_context(
            running(["api"], env | {"JOBRELAY_API_PORT": str(port)}, log_dir / "api.log")
        )
        dispatcher = stack.enter_context(running(["dispatcher"], env, log_dir / "dispatcher.log"))
        consumer = stack.enter_context(running(["consumer"], env, log_dir / "consumer.log"))
        wait_for(lambda: answers(base + "/healthz") or not api.alive(), 30, what="the API")
        assert api.alive(), api.output()
        yield Running(api, dispatcher, consumer, base)


def otel_free(env: dict[str, str]) -> dict[str, str]:
    """``env`` without any OTEL_* variable this test run may have inherited."""
    return {key: value for key, value in env.items() if not key.startswith("OTEL_")}


def exporting_to(receiver: Receiver) -> dict[str, str]:
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
        "OTEL_BSP_SCHEDULE_DELAY": "100",  # milliseconds: spans leave soon after they end
    }


def submit(base: str, token: str, traceparent: str) -> str:
    headers = auth(token, uuid.uuid4().hex) | {"traceparent": traceparent}
    response = httpx.post(f"{base}/v1/jobs", json=SLEEP, headers=headers, timeout=10)
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


def wait_succeeded(base: str, token: str, job_id: str) -> None:
    def succeeded() -> bool:
        response = httpx.get(
            f"{base}/v1/jobs/{job_id}", params={"wait": 5}, headers=auth(token), timeout=10
        )
        return bool(response.json()["state"] == "succeeded")

    wait_for(succeeded, 60, what=f"job {job_id} succeeded")


def json_lines(service: Service) -> list[dict[str, Any]]:
    """The service's log lines (one JSON object each)."""
    lines = []
    for text in service.output().splitlines():
        try:
            line = json.loads(text)
        except ValueError:
            continue
        if isinstance(line, dict):
            lines.append(line)
    return lines


def lines_about(service: Service, job_id: str) -> list[dict[str, Any]]:
    """The service's log lines that name the job."""
    return [line for line in json_lines(service) if line.get("job_id") == job_id]


def exporter_lines(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The lines OpenTelemetry's SDK and exporter logged."""
    return [line for line in lines if str(line.get("logger", "")).startswith("opentelemetry")]


# --- the tests -----------------------------------------------------------------------------------


def test_accept_publish_and_execution_are_one_trace_across_the_three_processes(
    make_settings: MakeSettings, alice: str, receiver: Receiver, tmp_path: Path
) -> None:
    env = otel_free(service_env(make_settings())) | exporting_to(receiver)
    with three_services(env, tmp_path) as services:
        job_id = submit(services.base, alice, SUBMITTED)
        wait_succeeded(services.base, alice, job_id)

        def all_three() -> list[Received] | None:
            spans = receiver.received()
            names = {span.name for span in spans}
            wanted = {"jobrelay.accept", "jobrelay.publish", "jobrelay.execute"}
            return spans if wanted <= names else None

        spans = wait_for(all_three, 30, what="the spans of the three services")
        api_lines = lines_about(services.api, job_id)
        consumer_lines = lines_about(services.consumer, job_id)

    assert {span.trace_id for span in spans} == {TRACE_ID}  # one trace: the submitter's
    by_name = {span.name: span for span in spans}
    assert len(by_name) == len(spans) == 3, [span.name for span in spans]
    accept, publish, execute = (
        by_name["jobrelay.accept"],
        by_name["jobrelay.publish"],
        by_name["jobrelay.execute"],
    )
    assert (accept.service, publish.service, execute.service) == (
        "jobrelay-api",
        "jobrelay-dispatcher",
        "jobrelay-consumer",
    )
    assert accept.parent_id == SUBMITTER_SPAN
    assert publish.parent_id == accept.span_id
    assert execute.parent_id == publish.span_id
    assert (accept.span.kind, publish.span.kind, execute.span.kind) == (
        Span.SPAN_KIND_SERVER,
        Span.SPAN_KIND_PRODUCER,
        Span.SPAN_KIND_CONSUMER,
    )
    for span in (accept, publish, execute):
        assert span.attribute("jobrelay.job.id") == job_id
    assert accept.attribute("jobrelay.outcome") == "created"
    assert publish.attribute("jobrelay.outcome") == "confirmed"
    assert execute.attribute("jobrelay.outcome") == "succeeded"
    assert execute.attribute("jobrelay.job.attempt") == 1

    assert api_lines and {line.get("trace_id") for line in api_lines} == {TRACE_ID}
    assert {line["msg"] for line in consumer_lines} >= {"claimed", "attempt finished"}
    assert {line.get("trace_id") for line in consumer_lines} == {TRACE_ID}


async def test_without_an_endpoint_nothing_is_sent_and_the_submitters_context_is_carried(
    make_settings: MakeSettings, alice: str, store: Store, receiver: Receiver, tmp_path: Path
) -> None:
    # Everything but the endpoint: a process that exported would send within 100 ms, and at
    # the latest when it stops.
    env = otel_free(service_env(make_settings())) | {"OTEL_BSP_SCHEDULE_DELAY": "100"}
    assert "OTEL_EXPORTER_OTLP_ENDPOINT" not in env
    with three_services(env, tmp_path) as services:
        traced = submit(services.base, alice, SUBMITTED)
        malformed = submit(services.base, alice, "00-not-a-traceparent")
        for job_id in (traced, malformed):
            wait_succeeded(services.base, alice, job_id)
        for service in (services.api, services.dispatcher, services.consumer):
            service.terminate()  # a process that exported would flush its last spans now
        consumer_lines = lines_about(services.consumer, traced)
        untraced_lines = lines_about(services.consumer, malformed)

    assert receiver.requests == 0
    assert receiver.received() == []
    stored = {job_id: await store.get_job(uuid.UUID(job_id)) for job_id in (traced, malformed)}
    assert stored[traced] is not None and stored[traced].traceparent == SUBMITTED
    assert stored[malformed] is not None and stored[malformed].traceparent is None
    # The message carried the submitter's context to the consumer: its lines name the trace.
    assert consumer_lines and {line.get("trace_id") for line in consumer_lines} == {TRACE_ID}
    assert untraced_lines and all("trace_id" not in line for line in untraced_lines)


def test_a_collector_that_is_down_breaks_nothing_and_is_logged_rarely_without_headers(
    make_settings: MakeSettings, alice: str, tmp_path: Path
) -> None:
    secret = "otel-s3cret-token-value"
    env = otel_free(service_env(make_settings())) | {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{free_port()}",  # nothing listens
        "OTEL_EXPORTER_OTLP_HEADERS": f"authorization=Bearer {secret}",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    with three_services(env, tmp_path) as services:
        job_id = submit(services.base, alice, SUBMITTED)
        wait_succeeded(services.base, alice, job_id)
        wait_for(
            lambda: exporter_lines(json_lines(services.consumer)),
            30,
            what="the consumer's first export failure in its log",
        )
        time.sleep(4)  # the exporter retries meanwhile (after 1 s, 2 s, ...), failing each time
        stopped = (services.api, services.dispatcher, services.consumer)
        for service in stopped:
            service.terminate()
        outputs = [json_lines(service) for service in stopped]

    for lines in outputs:
        failures = Counter(line["logger"] for line in exporter_lines(lines))
        # One line for each of the exporter's loggers, however often the export failed.
        assert all(count == 1 for count in failures.values()), failures
        assert secret not in json.dumps(lines)
    assert exporter_lines(outputs[2])  # the consumer's spans were refused, and it said so
    assert {line["msg"] for line in outputs[2] if line.get("job_id") == job_id} >= {"claimed"}
