"""What the API declares is what it does.

A body not declared JSON (no ``Content-Type``, or another one) once got a 422 about "a valid
dictionary"; it is a 415 ``unsupported_media_type`` problem, declared in the document.
The document has a bearer security scheme on the /v1 operations, a required
``Idempotency-Key`` (still answered with its own 400 codes), typed trace/stats/quarantine/replay
answers, the submission body per registered job type, and on each operation only the statuses
it can answer. (``tests/fuzz/test_api_schemathesis.py`` holds every answer to the document.)
"""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest
from pydantic import BaseModel, ConfigDict

from jobrelay.api.app import create_app
from jobrelay.core.registry import Registry
from jobrelay.core.settings import Settings
from jobrelay.db.store import Store
from tests.conftest import auth
from tests.support.consumer_kit import rows

GOOD = {"type": "catalog.export", "payload": {"course": "JavaScript"}}

# --- a body not declared JSON: 415 --------------------------------------------------------------


@pytest.mark.parametrize(
    "content_type",
    [None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"],
    ids=["no content type", "text", "form", "multipart"],
)
async def test_a_body_not_declared_json_is_a_415_problem_and_stores_nothing(
    api: httpx.AsyncClient, alice: str, store: Store, content_type: str | None
) -> None:
    headers = auth(alice, "k")
    if content_type:
        headers["Content-Type"] = content_type
    response = await api.post("/v1/jobs", content=json.dumps(GOOD).encode(), headers=headers)

    assert response.status_code == 415, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    problem = response.json()
    assert problem["code"] == "unsupported_media_type"
    assert problem["status"] == 415
    assert problem["type"].endswith("/unsupported_media_type")
    assert "application/json" in problem["detail"]
    assert await rows(store, "SELECT id FROM jobrelay.jobs") == []


@pytest.mark.parametrize(
    "content_type", ["application/json", "application/json; charset=utf-8", "Application/JSON"]
)
async def test_a_body_declared_json_is_accepted_whatever_its_parameters(
    api: httpx.AsyncClient, alice: str, content_type: str
) -> None:
    headers = auth(alice, "k") | {"Content-Type": content_type}
    response = await api.post("/v1/jobs", content=json.dumps(GOOD).encode(), headers=headers)
    assert response.status_code == 202, response.text


async def test_an_idempotency_key_too_long_for_the_header_is_still_the_400_problem(
    api: httpx.AsyncClient, alice: str
) -> None:
    """The header is required in the document; FastAPI's own validation of it (missing, over
    its length) answers the documented 400 codes, not a 422."""
    missing = await api.post("/v1/jobs", json=GOOD, headers=auth(alice))
    too_long = await api.post("/v1/jobs", json=GOOD, headers=auth(alice, "k" * 1001))
    assert (missing.status_code, missing.json()["code"]) == (400, "idempotency_key_missing")
    assert (too_long.status_code, too_long.json()["code"]) == (400, "idempotency_key_invalid")


# --- the OpenAPI document -----------------------------------------------------------------------


@pytest.fixture
def document(settings: Settings) -> dict[str, Any]:
    return create_app(settings).openapi()


def operations(document: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        (method.upper(), path): operation
        for path, item in document["paths"].items()
        for method, operation in item.items()
    }


def test_the_token_is_a_bearer_security_scheme_on_every_v1_operation(
    document: dict[str, Any],
) -> None:
    schemes = document["components"]["securitySchemes"]
    assert list(schemes.values()) == [
        {"type": "http", "scheme": "bearer", "description": schemes["HTTPBearer"]["description"]}
    ]
    for (method, path), operation in operations(document).items():
        names = [parameter["name"].lower() for parameter in operation.get("parameters", [])]
        assert "authorization" not in names, (method, path)
        if path.startswith("/v1/"):
            assert operation.get("security") == [{"HTTPBearer": []}], (method, path)
            assert "401" in operation["responses"], (method, path)
        else:
            assert "security" not in operation, (method, path)


def test_the_idempotency_key_is_required_on_submission(document: dict[str, Any]) -> None:
    (key,) = [
        parameter
        for parameter in operations(document)["POST", "/v1/jobs"]["parameters"]
        if parameter["name"].lower() == "idempotency-key"
    ]
    assert key["in"] == "header" and key["required"] is True
    assert (key["schema"]["minLength"], key["schema"]["maxLength"]) == (1, 200)


# What each operation can answer, and nothing else: 401/503 on every /v1 call (the token is
# looked up in the database), 403 on admin calls, 404 and 422 with a job id in the path, 413 on
# a POST (the body limit), 415 where a JSON body is read, 409 where a state or key can conflict.
STATUSES = {
    ("POST", "/v1/jobs"): {
        *("200", "202", "400", "401", "403", "409", "413", "415", "422", "429", "503")
    },
    ("POST", "/v1/jobs/batch"): {"200", "400", "401", "403", "413", "415", "422", "429", "503"},
    ("GET", "/v1/jobs"): {"200", "400", "401", "422", "503"},
    ("GET", "/v1/jobs/{job_id}"): {"200", "401", "404", "422", "503"},
    ("GET", "/v1/jobs/{job_id}/events"): {"200", "401", "404", "422", "503"},
    ("GET", "/v1/jobs/{job_id}/trace"): {"200", "401", "404", "422", "503"},
    ("POST", "/v1/jobs/{job_id}/cancel"): {
        *("200", "202", "401", "404", "409", "413", "422", "503")
    },
    ("POST", "/v1/jobs/{job_id}/signals/{name}"): {
        *("202", "400", "401", "404", "409", "413", "415", "422", "503")
    },
    ("GET", "/v1/admin/stats"): {"200", "401", "403", "503"},
    ("GET", "/v1/admin/quarantine"): {"200", "401", "403", "422", "503"},
    ("POST", "/v1/admin/jobs/{job_id}/replay"): {
        *("200", "401", "403", "404", "409", "413", "422", "503")
    },
    ("GET", "/v1/admin/jobs/{job_id}/trace"): {"200", "401", "403", "404", "422", "503"},
    ("POST", "/v1/admin/jobs/{job_id}/cancel"): {
        *("200", "202", "401", "403", "404", "409", "413", "422", "503")
    },
    ("GET", "/v1/admin/clients"): {"200", "401", "403", "503"},
    ("GET", "/v1/admin/queues"): {"200", "401", "403", "503"},
    ("POST", "/v1/admin/queues/{name}/pause"): {"200", "401", "403", "404", "413", "422", "503"},
    ("POST", "/v1/admin/queues/{name}/resume"): {"200", "401", "403", "404", "413", "422", "503"},
    ("GET", "/v1/admin/limits"): {"200", "401", "403", "503"},
    ("GET", "/v1/admin/limits/{job_type}"): {"200", "401", "403", "404", "422", "503"},
    ("PUT", "/v1/admin/limits/{job_type}"): {
        *("200", "401", "403", "404", "413", "415", "422", "503")
    },
    ("DELETE", "/v1/admin/limits/{job_type}"): {"204", "401", "403", "404", "422", "503"},
    ("GET", "/v1/admin/types"): {"200", "401", "403", "503"},
    ("GET", "/healthz"): {"200"},
    ("GET", "/readyz"): {"200", "503"},
    ("GET", "/metrics"): {"200"},
}


def test_each_operation_lists_only_the_statuses_it_can_answer(document: dict[str, Any]) -> None:
    declared = {key: set(op["responses"]) for key, op in operations(document).items()}
    for key, statuses in STATUSES.items():
        assert declared.get(key) == statuses, key
    for (method, path), statuses in declared.items():
        if method == "GET":
            assert not statuses & {"409", "413", "415"}, (method, path)


@pytest.mark.parametrize(
    ("method", "path", "schema"),
    [
        ("GET", "/v1/jobs/{job_id}/trace", "TraceView"),
        ("GET", "/v1/admin/jobs/{job_id}/trace", "TraceView"),
        ("GET", "/v1/admin/stats", "StatsView"),
        ("GET", "/v1/admin/quarantine", "QuarantineReport"),
        ("POST", "/v1/admin/jobs/{job_id}/replay", "ReplayView"),
        ("POST", "/v1/admin/jobs/{job_id}/cancel", "JobView"),
        ("GET", "/v1/admin/clients", "ClientList"),
        ("GET", "/v1/admin/queues", "QueueList"),
        ("POST", "/v1/admin/queues/{name}/pause", "QueueView"),
        ("GET", "/v1/admin/limits", "LimitList"),
        ("PUT", "/v1/admin/limits/{job_type}", "LimitView"),
        ("GET", "/v1/admin/types", "JobTypeList"),
    ],
)
def test_operator_answers_are_typed(
    document: dict[str, Any], method: str, path: str, schema: str
) -> None:
    ok = operations(document)[method, path]["responses"]["200"]["content"]["application/json"]
    assert ok["schema"] == {"$ref": f"#/components/schemas/{schema}"}
    component = document["components"]["schemas"][schema]
    assert component["type"] == "object" and component["required"], schema


def test_submission_documents_each_registered_types_payload(document: dict[str, Any]) -> None:
    body = operations(document)["POST", "/v1/jobs"]["requestBody"]
    schema = body["content"]["application/json"]["schema"]
    mapping = schema["discriminator"]["mapping"]
    assert schema["discriminator"]["propertyName"] == "type"
    assert set(mapping) == {"catalog.export", "demo.sleep", "demo.fail"}
    assert [variant["$ref"] for variant in schema["oneOf"]] == list(mapping.values())
    components = document["components"]["schemas"]
    sleep = components[mapping["demo.sleep"].rsplit("/", 1)[1]]
    assert sleep["properties"]["type"]["const"] == "demo.sleep"
    payload = components[sleep["properties"]["payload"]["$ref"].rsplit("/", 1)[1]]
    assert payload["required"] == ["seconds"]
    assert payload["properties"]["seconds"]["maximum"] == 3600


class MailPayload(BaseModel):
    model_config = ConfigDict(extra="forbid")
    to: str
    template: str = "welcome"


def test_the_payload_schemas_come_from_the_registry_the_app_is_created_with(
    settings: Settings,
) -> None:
    registry = Registry()

    @registry.job("mail.send", MailPayload)
    async def send(context: Any, payload: MailPayload) -> dict[str, Any]:
        """Send one e-mail."""
        return {}

    document = create_app(settings, registry=registry).openapi()
    schema = operations(document)["POST", "/v1/jobs"]["requestBody"]["content"]
    variants = schema["application/json"]["schema"]["discriminator"]["mapping"]
    assert list(variants) == ["mail.send"]
    variant = document["components"]["schemas"][variants["mail.send"].rsplit("/", 1)[1]]
    assert variant["description"] == "Send one e-mail."
    assert document["components"]["schemas"]["MailPayload"]["required"] == ["to"]


async def test_typed_answers_match_their_documented_shape(
    api: httpx.AsyncClient, alice: str, admin: str
) -> None:
    """A trace and the stats validate against their models (the fuzz test checks the rest)."""
    submitted = await api.post("/v1/jobs", json=GOOD, headers=auth(alice, "typed"))
    job_id = submitted.json()["id"]
    trace = await api.get(f"/v1/jobs/{job_id}/trace", headers=auth(alice))
    stats = await api.get("/v1/admin/stats", headers=auth(admin))
    assert trace.status_code == 200 and trace.json()["intent"]["client"] == "alice"
    assert stats.status_code == 200 and stats.json()["jobs_by_state"]["queued"] == 1


# --- a document a client can be generated from (tests/integration/test_generated_client.py) ---


def test_every_error_answer_references_the_one_problem_component(
    document: dict[str, Any],
) -> None:
    """The problem schema was copied inline into every answer: generators made a class per
    answer, or none."""
    for (method, path), operation in operations(document).items():
        for status, answer in operation["responses"].items():
            problem = answer.get("content", {}).get("application/problem+json")
            if int(status) >= 400 and path.startswith("/v1/"):
                assert problem == {"schema": {"$ref": "#/components/schemas/Problem"}}, (
                    method,
                    path,
                    status,
                )
    errors = document["components"]["schemas"]["Problem"]["properties"]["errors"]
    assert errors["anyOf"][0]["items"] == {"$ref": "#/components/schemas/FieldError"}


def test_every_operation_has_a_chosen_id_and_its_resources_tag(document: dict[str, Any]) -> None:
    ids = [operation["operationId"] for operation in operations(document).values()]
    assert len(set(ids)) == len(ids)
    assert all(re.fullmatch(r"[a-z]+(?:[A-Z][a-z]+)*", name) for name in ids), ids
    assert operations(document)["POST", "/v1/jobs"]["operationId"] == "submitJob"
    for (_, path), operation in operations(document).items():
        tag = (
            "admin"
            if path.startswith("/v1/admin/")
            else "workflows"
            if path.startswith("/v1/workflows")
            else "jobs"
            if path.startswith("/v1/")
            else "health"
        )
        assert operation["tags"] == [tag], path
    assert [tag["name"] for tag in document["tags"]] == ["jobs", "workflows", "admin", "health"]


def test_no_two_schemas_share_a_title(document: dict[str, Any]) -> None:
    """The batch items had the single submissions' titles (``Submit demo.sleep``)."""
    titles = [s["title"] for s in document["components"]["schemas"].values() if "title" in s]
    assert len(set(titles)) == len(titles), sorted(titles)


def test_the_422_answer_names_invalid_schedule(document: dict[str, Any]) -> None:
    answer = operations(document)["POST", "/v1/jobs"]["responses"]["422"]
    assert "invalid_schedule" in answer["description"]
