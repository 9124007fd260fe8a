"""The JSON Schemas of docs/schemas/ against the code's own data: the pydantic models of the API,
the limits of core/bounds.py, the states of core/states.py and the message the publisher builds.
What the API really answers and the dispatcher really publishes: the integration test
tests/integration/test_published_schemas.py."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest
from pydantic import BaseModel, ValidationError

from jobrelay.api.problems import problem_document, request_error_document
from jobrelay.api.schemas import (
    MAX_BATCH_JOBS,
    BatchItem,
    DebouncedJobView,
    DeduplicatedJobView,
    JobLinks,
    JobView,
    Problem,
    ProgressView,
    SubmitJob,
    step_views,
)
from jobrelay.broker.publisher import build_message
from jobrelay.core import bounds
from jobrelay.core.durable import StepKind, StepRecord, StepStatus
from jobrelay.core.errors import (
    IdempotencyConflict,
    InvalidPayload,
    InvalidSchedule,
    UnknownJobType,
)
from jobrelay.core.message import MAX_TYPE_LENGTH, MESSAGE_VERSION, Envelope
from jobrelay.core.registry import safe_validation_errors
from jobrelay.core.relay import OutboxRow
from jobrelay.core.states import JobState
from jobrelay.core.type_catalog import schema_errors

SCHEMAS = Path(__file__).resolve().parents[2] / "docs" / "schemas"
DRAFT_2020_12 = "https://json-schema.org/draft/2020-12/schema"
FILES = sorted(path.name for path in SCHEMAS.glob("*.schema.json"))


def schema(name: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((SCHEMAS / name).read_text())
    return document


def compiled(document: dict[str, Any]) -> jsonschema_rs.Validator:
    return jsonschema_rs.validator_for(document, validate_formats=True)


def refs_of(node: Any) -> list[str]:
    """Every ``$ref`` of a schema, however deep."""
    if isinstance(node, dict):
        own = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return own + [ref for value in node.values() for ref in refs_of(value)]
    if isinstance(node, list):
        return [ref for value in node for ref in refs_of(value)]
    return []


def fields(model: type[BaseModel]) -> set[str]:
    return set(model.model_fields)


def required_fields(model: type[BaseModel]) -> set[str]:
    return {name for name, field in model.model_fields.items() if field.is_required()}


def test_the_five_schemas_are_published() -> None:
    assert FILES == [
        "job.schema.json",
        "message.schema.json",
        "problem.schema.json",
        "submission-batch.schema.json",
        "submission.schema.json",
    ]


@pytest.mark.parametrize("name", FILES)
def test_each_schema_is_a_valid_draft_2020_12_schema_named_by_its_file(name: str) -> None:
    document = schema(name)

    assert document["$schema"] == DRAFT_2020_12
    assert document["$id"] == f"https://jobrelay.dev/schemas/{name}"
    assert document["title"] and document["description"]
    assert document["type"] == "object" and document["required"]
    assert jsonschema_rs.meta.is_valid(document)
    compiled(document)  # compiling checks the meta-schema too, and every $ref resolves


@pytest.mark.parametrize("name", FILES)
def test_no_schema_needs_another_document(name: str) -> None:
    # Every $ref points inside its own file: nothing to fetch, nothing to bundle.
    assert all(ref.startswith("#/") for ref in refs_of(schema(name)))


def test_the_readme_names_every_schema() -> None:
    readme = (SCHEMAS / "README.md").read_text()
    for name in FILES:
        assert f"]({name})" in readme, name


# --- the submission ---------------------------------------------------------------------------


def test_the_submission_has_the_models_fields_and_refuses_others_as_the_api_does() -> None:
    document = schema("submission.schema.json")

    assert set(document["properties"]) == fields(SubmitJob)
    assert set(document["required"]) == required_fields(SubmitJob)
    assert SubmitJob.model_config.get("extra") == "forbid"
    assert document["additionalProperties"] is False


def test_the_submissions_limits_are_those_of_core_limits() -> None:
    properties = schema("submission.schema.json")["properties"]
    flow_key = schema("submission.schema.json")["$defs"]["flow_key"]

    assert properties["type"]["maxLength"] == bounds.TYPE_NAME_MAX
    assert properties["max_attempts"]["maximum"] == bounds.MAX_ATTEMPTS_MAX
    assert properties["delay_seconds"]["maximum"] == bounds.MAX_DELAY_SECONDS
    assert (properties["priority"]["minimum"], properties["priority"]["maximum"]) == (
        bounds.PRIORITY_MIN,
        bounds.PRIORITY_MAX,
    )
    assert flow_key["maxLength"] == bounds.FLOW_KEY_MAX


def test_a_batch_item_is_a_submission_with_its_key() -> None:
    single = schema("submission.schema.json")
    batch = schema("submission-batch.schema.json")
    item = batch["$defs"]["item"]

    assert set(item["properties"]) == fields(BatchItem)
    assert set(item["required"]) == required_fields(BatchItem)
    # The same rules as a single submission, repeated so that the file stands alone.
    assert {k: v for k, v in item["properties"].items() if k != "idempotency_key"} == single[
        "properties"
    ]
    assert item["not"] == single["not"] and item["additionalProperties"] is False
    assert {k: batch["$defs"][k] for k in single["$defs"]} == single["$defs"]
    assert item["properties"]["idempotency_key"]["maxLength"] == bounds.IDEMPOTENCY_KEY_MAX
    assert batch["properties"]["jobs"]["maxItems"] == MAX_BATCH_JOBS


def test_every_field_of_a_batch_item_is_checked_by_the_model_as_the_schema_says() -> None:
    valid = compiled(schema("submission-batch.schema.json"))
    item = {"idempotency_key": "k", "type": "demo.sleep", "priority": 3, "unique_key": "u"}

    assert valid.is_valid({"jobs": [item]})
    BatchItem.model_validate(item)  # the API's model takes it too


# --- the job view -----------------------------------------------------------------------------


def test_the_job_view_requires_every_field_the_api_always_sends() -> None:
    document = schema("job.schema.json")

    assert set(document["required"]) == fields(JobView)
    assert set(document["properties"]) == fields(DeduplicatedJobView) | fields(DebouncedJobView)
    assert document["additionalProperties"] is True  # the view grows


def test_the_job_views_states_are_the_states_of_core_states() -> None:
    document = schema("job.schema.json")

    assert sorted(document["properties"]["state"]["enum"]) == sorted(JobState)


def test_the_job_views_parts_have_their_models_fields() -> None:
    properties = schema("job.schema.json")["properties"]

    assert set(properties["progress"]["required"]) == fields(ProgressView)
    assert set(properties["links"]["required"]) == fields(JobLinks)
    assert properties["priority"]["minimum"] == bounds.PRIORITY_MIN
    assert properties["priority"]["maximum"] == bounds.PRIORITY_MAX


def test_a_view_with_every_field_set_matches_the_schema_as_the_api_writes_it() -> None:
    """Every field with a value, as the API serializes the models: the integration test never
    sees a job with progress, and sees a workflow's job only while it waits."""
    valid = compiled(schema("job.schema.json"))
    at = datetime(2026, 12, 3, 8, 0, tzinfo=UTC)
    view = JobView(
        id=uuid.uuid4(),
        type="catalog.export",
        state=JobState.SUCCEEDED,
        idempotency_key=f"workflow:{uuid.uuid4()}:export",
        payload={"course": "JavaScript"},
        attempts=2,
        max_attempts=103,  # a replay's: past what a submission may ask
        created_at=at,
        updated_at=at,
        available_at=at,
        run_at=at,
        cancel_requested_at=at,
        finished_at=at,
        lease_until=None,
        last_error_code="timeout",
        last_error="the attempt took longer than 30 s",
        result={"key": "reports/x.csv"},
        priority=-100,
        concurrency_key="tenant-7",
        unique_key="nightly",
        workflow_id=uuid.uuid4(),
        progress=ProgressView(fraction=0.5, message=None, at=at),
        no_consumer=False,
        parent_job_id=uuid.uuid4(),
        sequence_key="customer-7",
        blocked_by=uuid.uuid4(),
        steps=step_views(
            (
                StepRecord("charge", StepKind.STEP, 1, at, value={"charged": 12}),
                StepRecord("sleep", StepKind.SLEEP, 1, at, wake_at=at),
                StepRecord("child:x", StepKind.CHILD, 2, at, child_id=uuid.uuid4(), value=[1]),
                StepRecord("signal:go", StepKind.SIGNAL, 2, at, status=StepStatus.WAITING),
            ),
            values=True,
        ),
        links=JobLinks(self=f"/v1/jobs/{uuid.uuid4()}", events=f"/v1/jobs/{uuid.uuid4()}/events"),
    )
    deduplicated = DeduplicatedJobView(**dict(view), deduplicated=True)
    debounced = DebouncedJobView(**dict(view), debounced=True)
    # A sleeper's own fields, which no other state has.
    sleeper = view.model_copy(
        update={
            "state": JobState.SLEEPING,
            "finished_at": None,
            "result": None,
            "wake_at": at,
            "waiting_for": {"signal": "approved"},
        }
    )
    assert not [error.message for error in valid.iter_errors(sleeper.model_dump(mode="json"))]
    asleep_elsewhere = dict(view.model_dump(mode="json"), waiting_for={"child": str(uuid.uuid4())})
    assert list(valid.iter_errors(asleep_elsewhere))  # a succeeded job waits for nothing

    asleep_only = {"wake_at", "waiting_for"}  # null in every other state
    for model in (view, deduplicated, debounced):
        document = model.model_dump(mode="json")
        assert all(
            document[name] is not None for name in fields(JobView) - {"lease_until", *asleep_only}
        )
        errors = [error.message for error in valid.iter_errors(document)]
        assert not errors, (model, errors)


# --- the message ------------------------------------------------------------------------------


def test_the_message_the_publisher_builds_matches_the_schema_and_its_properties() -> None:
    document = schema("message.schema.json")
    body = compiled(document)
    properties = compiled({"$schema": DRAFT_2020_12, **document["$defs"]["amqp_properties"]})
    row = OutboxRow(id=42, job_id=uuid.uuid4(), type="catalog.export", publish_attempts=0)
    traced = OutboxRow(
        id=43,
        job_id=uuid.uuid4(),
        type="demo.sleep",
        publish_attempts=1,
        traceparent="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    )

    for outbox_row in (row, traced):
        message = build_message(outbox_row)
        assert body.is_valid(json.loads(message.body))
        sent = {
            "exchange": "jobrelay.jobs",
            "routing_key": outbox_row.type,
            "content_type": message.content_type,
            "delivery_mode": int(message.delivery_mode),
            "message_id": message.message_id,
            "correlation_id": message.correlation_id,
            "priority": message.priority,
            "headers": dict(message.headers or {}),
        }
        errors = [error.message for error in properties.iter_errors(sent)]
        assert not errors, errors


def test_the_messages_version_and_type_length_are_the_envelopes() -> None:
    properties = schema("message.schema.json")["properties"]

    assert properties["version"]["const"] == MESSAGE_VERSION
    assert properties["type"]["maxLength"] == MAX_TYPE_LENGTH
    assert set(schema("message.schema.json")["required"]) == set(
        json.loads(Envelope(uuid.uuid4(), "t").encode())
    )


# --- the problem ------------------------------------------------------------------------------


class Order(BaseModel):
    lines: list[int]


def model_errors() -> list[dict[str, Any]]:
    """A loaded type's invalid_payload errors: pydantic's, a list index among the loc."""
    try:
        Order.model_validate({"lines": [1, "two"]})
    except ValidationError as error:
        return safe_validation_errors(error)
    raise AssertionError("the payload was valid")


def test_the_problems_the_api_writes_match_the_problem_schema() -> None:
    document = schema("problem.schema.json")
    valid = compiled(document)
    problems = [
        request_error_document(IdempotencyConflict("the key was used", job_id=str(uuid.uuid4()))),
        request_error_document(InvalidSchedule("give run_at or delay_seconds, not both")),
        request_error_document(UnknownJobType()),
        problem_document(
            422,
            "validation_error",
            "The request is not valid",
            errors=[{"loc": ["body", "priority"], "msg": "too big", "type": "less_than_equal"}],
        ),
        # invalid_payload, from a loaded type's model and from a type a consumer registered.
        request_error_document(
            InvalidPayload("payload does not match the schema of 't'", errors=model_errors())
        ),
        request_error_document(
            InvalidPayload(
                "payload does not match the schema of 't'",
                errors=schema_errors(
                    jsonschema_rs.validator_for(
                        {"type": "object", "required": ["n"], "properties": {"n": {"minimum": 1}}}
                    ),
                    {"n": 0, "extra": [1]},
                )
                + schema_errors(jsonschema_rs.validator_for({"required": ["n"]}), {}),
            )
        ),
        # A batch's item error, as its model dumps it (nulls included).
        Problem(
            type="https://jobrelay.dev/problems/x", title="X", status=400, code="x"
        ).model_dump(),
    ]

    for problem in problems:
        errors = [error.message for error in valid.iter_errors(problem)]
        assert not errors, (problem, errors)
    assert set(document["properties"]) == fields(Problem)
    assert set(document["required"]) == required_fields(Problem)
