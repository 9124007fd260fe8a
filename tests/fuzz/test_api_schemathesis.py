"""Schemathesis against the API's own OpenAPI document (SPEC §4, §8.7).

Every operation is called with generated data — valid and invalid — under a real store on a
fresh test database and a real broker vhost: no answer is a 5xx, and every answer (status code,
content type, headers, body) is one the document declares. The document is the API's contract,
so a mismatch is fixed in the API's declarations, never by loosening these checks.

Generated job ids are steered, half of the time, to jobs that exist (the caller's own in several
states, and another client's), so the fuzzer reaches the 200/409 branches and not only 404s.
Bounded for CI: a few dozen examples per operation, derandomized, no deadline per example.
"""

from __future__ import annotations

import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.python import asgi as schemathesis_asgi
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from services.api.app import create_app
from services.core.settings import Settings
from services.db.store import Store
from tests.support.consumer_kit import rows, submit

EXAMPLES_PER_OPERATION = 40

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    negative_data_rejection,
]

# Answers the fuzzer must have seen by the end, or it did not reach past validation.
MUST_REACH = {
    ("POST", "/v1/jobs"): {200, 202, 400, 422},
    ("GET", "/v1/jobs"): {200},
    ("GET", "/v1/jobs/{job_id}"): {200, 404},
    ("GET", "/v1/jobs/{job_id}/events"): {200, 404},
    ("GET", "/v1/jobs/{job_id}/trace"): {200, 404},
    ("POST", "/v1/jobs/{job_id}/cancel"): {404, 409},
    ("GET", "/v1/admin/stats"): {200},
    ("GET", "/v1/admin/quarantine"): {200},
    ("POST", "/v1/admin/jobs/{job_id}/replay"): {404, 409},
    ("GET", "/v1/admin/jobs/{job_id}/trace"): {200, 404},
    ("GET", "/healthz"): {200},
    ("GET", "/readyz"): {200},
    ("GET", "/metrics"): {200},
}

VALID_SUBMISSIONS = [
    {"type": "demo.sleep", "payload": {"seconds": 0}},
    {"type": "catalog.export", "payload": {"course": "JavaScript"}},
    {"type": "demo.fail", "payload": {"mode": "transient", "times": 1}},
]

schema = schemathesis.pytest.from_fixture("api_schema")


@pytest.fixture
async def seeded_jobs(store: Store, alice: str, bob: str) -> list[uuid.UUID]:
    """Jobs the generated ids are steered to: alice's queued, succeeded and quarantined, bob's."""
    alice_id, bob_id = (
        row.id
        for row in await rows(
            store, "SELECT id FROM clients WHERE name IN ('alice', 'bob') ORDER BY name"
        )
    )
    queued = await submit(store, alice_id, "demo.sleep", {"seconds": 0})
    succeeded = await submit(store, alice_id, "demo.sleep", {"seconds": 1})
    quarantined = await submit(store, alice_id, "demo.fail", {"mode": "permanent", "times": 1})
    foreign = await submit(store, bob_id, "demo.sleep", {"seconds": 0})
    await rows(
        store,
        "WITH s AS (UPDATE jobs SET state = 'succeeded', attempts = 1, finished_at = now() "
        "WHERE id = :s RETURNING id) "
        "INSERT INTO job_results (job_id, result, attempt) "
        "SELECT id, '{\"slept\": 1}'::jsonb, 1 FROM s RETURNING job_id",
        s=succeeded,
    )
    await rows(
        store,
        "UPDATE jobs SET state = 'quarantined', attempts = 1, finished_at = now(), "
        "last_error_code = 'permanent_error', last_error = 'demo failure' WHERE id = :q "
        "RETURNING id",
        q=quarantined,
    )
    return [queued, succeeded, quarantined, foreign]


@pytest.fixture
def seen() -> dict[tuple[str, str], Counter[int]]:
    return defaultdict(Counter)


@pytest.fixture
def api_schema(
    settings: Settings,
    amqp_url: str,
    seeded_jobs: list[uuid.UUID],
    seen: dict[tuple[str, str], Counter[int]],
) -> Iterator[Any]:
    # No store injected: the app opens its own in its lifespan, on the event loop schemathesis
    # runs ASGI apps on (a pool cannot move between loops).
    app = create_app(settings.model_copy(update={"amqp_url": amqp_url}))
    loaded = schemathesis.openapi.from_asgi("/openapi.json", app)

    @loaded.hook
    def flatmap_path_parameters(context: Any, path_parameters: dict[str, Any] | None) -> Any:
        if not path_parameters or "job_id" not in path_parameters:
            return st.just(path_parameters)
        real = st.sampled_from(seeded_jobs).map(lambda job_id: {"job_id": str(job_id)})
        return st.one_of(st.just(path_parameters), real)

    @loaded.hook
    def flatmap_body(context: Any, body: Any) -> Any:
        # Half of the generated submissions name a registered type (with a valid payload or the
        # generated one), so the fuzzer gets past "unknown type" into payload checks and accept.
        if not isinstance(body, dict) or "type" not in body:
            return st.just(body)
        known = st.sampled_from(sorted(app.state.registry.types)).map(
            lambda name: {**body, "type": name}
        )
        valid = st.sampled_from(VALID_SUBMISSIONS).map(lambda good: {**body, **good})
        return st.one_of(st.just(body), known, valid)

    yield loaded
    schemathesis_asgi.shutdown_lifespans()  # closes the app's store before the database goes
    missing = {
        operation: sorted(wanted - set(seen[operation]))
        for operation, wanted in MUST_REACH.items()
        if not wanted <= set(seen[operation])
    }
    assert not missing, f"the fuzzer never got these answers: {missing}; saw {dict(seen)}"


@pytest.fixture
def tokens(alice: str, admin: str) -> dict[str, str]:
    return {"client": alice, "admin": admin}


@schema.parametrize()
@hypothesis_settings(
    max_examples=EXAMPLES_PER_OPERATION,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
def test_every_operation_answers_as_its_schema_says_and_never_with_a_5xx(
    case: Any, tokens: dict[str, str], seen: dict[tuple[str, str], Counter[int]]
) -> None:
    token = tokens["admin"] if case.path.startswith("/v1/admin/") else tokens["client"]
    response = case.call_and_validate(headers={"Authorization": f"Bearer {token}"}, checks=CHECKS)
    seen[(case.method.upper(), case.path)][response.status_code] += 1


# --- regressions the fuzzing found ----------------------------------------------------------

NUL_REQUESTS = [
    ("POST", "/v1/jobs", {"json": {"type": "catalog.export", "payload": {"course": "a\x00b"}}}),
    ("POST", "/v1/jobs", {"json": {"type": "catalog.export", "payload": {"c\x00": "x"}}}),
    ("GET", "/v1/jobs", {"params": {"type": "demo\x00sleep"}}),
    ("GET", "/v1/admin/quarantine", {"params": {"code": "a\x00"}}),
]


@pytest.mark.parametrize(
    ("method", "path", "request_args"),
    NUL_REQUESTS,
    ids=["payload_value", "payload_key", "list_type", "quarantine_code"],
)
async def test_a_nul_character_in_stored_or_queried_text_is_a_422_not_a_500(
    api: Any, alice: str, admin: str, store: Store, method: str, path: str, request_args: Any
) -> None:
    """PostgreSQL text and jsonb cannot hold U+0000: the driver's error was a 500."""
    token = admin if "/admin/" in path else alice
    headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": "nul"}
    response = await api.request(method, path, headers=headers, **request_args)
    assert response.status_code == 422, response.text
    assert response.json()["code"] == "validation_error"
    assert await rows(store, "SELECT id FROM jobs") == []


async def test_a_non_finite_number_in_a_payload_is_a_422(api: Any, alice: str) -> None:
    body = b'{"type": "demo.sleep", "payload": {"seconds": 0, "x": NaN}}'
    headers = {"Authorization": f"Bearer {alice}", "Idempotency-Key": "nan"}
    response = await api.post(
        "/v1/jobs", content=body, headers=headers | {"Content-Type": "application/json"}
    )
    assert response.status_code == 422, response.text
    assert "NaN" in response.json()["errors"][0]["msg"]
