"""Schemathesis against the API's own OpenAPI document.

Every operation is called with generated data — valid and invalid — under a real store on a
fresh test database and a real broker vhost: no answer is a 5xx, and every answer (status code,
content type, headers, body) is one the document declares. The document is the API's contract,
so a mismatch is fixed in the API's declarations, never by loosening these checks.

Generated job ids are steered, half of the time, to jobs that exist (the caller's own in several
states, and another client's), so the fuzzer reaches the 200/409 branches and not only 404s.
Bounded for CI: a few dozen examples per operation, derandomized, no deadline per example.

The cases come from schemathesis's Hypothesis strategies under a plain ``@given``, not from its
pytest plugin (``schemathesis.pytest.from_fixture``): that plugin reaches into pytest's private
node attributes and breaks with each pytest release, while the strategies are public API.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings as hypothesis_settings, strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.python import asgi as schemathesis_asgi
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from jobrelay.api.app import create_app
from jobrelay.core.states import JobState
from jobrelay.db.store import Store
from jobrelay.handlers.builtin import registry as builtins
from tests.conftest import MakeSettings
from tests.support.consumer_kit import rows, submit
from tests.support.factories import set_job

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
    ("POST", "/v1/jobs/batch"): {200, 422},
    ("GET", "/v1/jobs"): {200},
    ("GET", "/v1/jobs/{job_id}"): {200, 404},
    ("GET", "/v1/jobs/{job_id}/events"): {200, 404},
    ("GET", "/v1/jobs/{job_id}/trace"): {200, 404},
    ("POST", "/v1/jobs/{job_id}/cancel"): {404, 409},
    ("GET", "/v1/admin/stats"): {200},
    ("GET", "/v1/admin/quarantine"): {200},
    ("POST", "/v1/admin/jobs/{job_id}/replay"): {404, 409},
    ("GET", "/v1/admin/jobs/{job_id}/trace"): {200, 404},
    ("POST", "/v1/admin/jobs/{job_id}/cancel"): {404, 409},
    ("GET", "/v1/admin/clients"): {200},
    ("GET", "/healthz"): {200},
    ("GET", "/readyz"): {200},
    ("GET", "/metrics"): {200},
}

# A submission alice made before the fuzzer runs: sent again as it was, it is answered 200.
REPEATED_KEY = "fuzz-repeated"
REPEATED = {"type": "demo.sleep", "payload": {"seconds": 0}}

VALID_SUBMISSIONS = [
    {"type": "demo.sleep", "payload": {"seconds": 0}},
    {"type": "catalog.export", "payload": {"course": "JavaScript"}},
    {"type": "demo.fail", "payload": {"mode": "transient", "times": 1}},
]


@pytest.fixture
async def seeded_jobs(store: Store, alice: str, bob: str) -> list[uuid.UUID]:
    """Jobs the generated ids are steered to: alice's queued, succeeded and quarantined, bob's."""
    alice_id, bob_id = (
        row.id
        for row in await rows(
            store, "SELECT id FROM jobrelay.clients WHERE name IN ('alice', 'bob') ORDER BY name"
        )
    )
    queued = await submit(store, alice_id, "demo.sleep", {"seconds": 0}, key=REPEATED_KEY)
    succeeded = await submit(store, alice_id, "demo.sleep", {"seconds": 1})
    quarantined = await submit(store, alice_id, "demo.fail", {"mode": "permanent", "times": 1})
    foreign = await submit(store, bob_id, "demo.sleep", {"seconds": 0})
    await set_job(store, succeeded, state=JobState.SUCCEEDED, result={"slept": 1})
    await set_job(store, quarantined, state=JobState.QUARANTINED, last_error="demo failure")
    return [queued, succeeded, quarantined, foreign]


@pytest.fixture
def api_schema(make_settings: MakeSettings) -> Iterator[Any]:
    # No store injected: the app opens its own in its lifespan, on the event loop schemathesis
    # runs ASGI apps on (a pool cannot move between loops).
    app = create_app(make_settings())
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    # Every call carries a real token (call_and_validate's headers, below), so schemathesis must
    # not generate the bearer scheme's Authorization header as well: a negative case that drops
    # it would still be sent with the token, and its 200 counted as accepted invalid data. The
    # answers without a valid token are the access matrix's (tests/acceptance).
    schema.config.generation.update(with_security_parameters=False)
    yield schema
    schemathesis_asgi.shutdown_lifespans()  # closes the app's store before the database goes


def steered(case: Any, seeded_jobs: list[uuid.UUID], types: list[str]) -> st.SearchStrategy[Any]:
    """A valid case as generated, or moved towards the interesting branches: its job id one that
    exists (the caller's own in several states, or another client's), its submission naming a
    registered type (with the generated payload, or a valid one), so the fuzzer gets past "not
    found" and "unknown type" into the 200/409 and payload branches."""
    variants: list[st.SearchStrategy[Any]] = [st.just(case)]
    if case.path_parameters and "job_id" in case.path_parameters:
        variants.append(
            st.sampled_from(seeded_jobs).map(
                lambda job_id: replace_case(case, path_parameters={"job_id": str(job_id)})
            )
        )
    if isinstance(case.body, dict) and "type" in case.body:
        variants.append(
            st.sampled_from(types).map(
                lambda name: replace_case(case, body={**case.body, "type": name})
            )
        )
        variants.append(
            st.sampled_from(VALID_SUBMISSIONS).map(
                lambda good: replace_case(case, body={**case.body, **good})
            )
        )
    if case.headers and "Idempotency-Key" in case.headers:
        headers = {**case.headers, "Idempotency-Key": REPEATED_KEY}
        variants.append(
            st.just(REPEATED).map(lambda body: replace_case(case, headers=headers, body=dict(body)))
        )
    return st.one_of(variants)


def replace_case(case: Any, **changes: Any) -> Any:
    for name, value in changes.items():
        setattr(case, name, value)
    return case


def cases_of(
    operation: Any, seeded_jobs: list[uuid.UUID], types: list[str]
) -> st.SearchStrategy[Any]:
    """Valid requests (steered) and invalid ones (as generated: they must be rejected)."""
    return st.one_of(
        operation.as_strategy(GenerationMode.POSITIVE).flatmap(
            lambda case: steered(case, seeded_jobs, types)
        ),
        operation.as_strategy(GenerationMode.NEGATIVE),
    )


@pytest.mark.parametrize(
    ("method", "path"), sorted(MUST_REACH), ids=[f"{m} {p}" for m, p in sorted(MUST_REACH)]
)
def test_every_operation_answers_as_its_schema_says_and_never_with_a_5xx(
    api_schema: Any,
    seeded_jobs: list[uuid.UUID],
    alice: str,
    admin: str,
    method: str,
    path: str,
) -> None:
    token = admin if path.startswith("/v1/admin/") else alice
    operation = api_schema[path][method]
    seen: Counter[int] = Counter()
    types = sorted(builtins.types)

    @hypothesis_settings(
        max_examples=EXAMPLES_PER_OPERATION,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=cases_of(operation, seeded_jobs, types))
    def answers_as_declared(case: Any) -> None:
        response = case.call_and_validate(
            headers={"Authorization": f"Bearer {token}"}, checks=CHECKS
        )
        seen[response.status_code] += 1

    answers_as_declared()
    wanted = MUST_REACH[(method, path)]
    assert wanted <= set(seen), f"the fuzzer never got {sorted(wanted - set(seen))}; saw {seen}"


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
    assert await rows(store, "SELECT id FROM jobrelay.jobs") == []


async def test_a_non_finite_number_in_a_payload_is_a_422(api: Any, alice: str) -> None:
    body = b'{"type": "demo.sleep", "payload": {"seconds": 0, "x": NaN}}'
    headers = {"Authorization": f"Bearer {alice}", "Idempotency-Key": "nan"}
    response = await api.post(
        "/v1/jobs", content=body, headers=headers | {"Content-Type": "application/json"}
    )
    assert response.status_code == 422, response.text
    assert "NaN" in response.json()["errors"][0]["msg"]
