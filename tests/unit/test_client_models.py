"""The slim client's views read from JSON without pydantic (``jobrelay_client/models.py``):
checked against their type hints, a field the API added later ignored, a missing or
mistyped one refused, and written back as the document they came from."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from jobrelay_client.models import (
    Job,
    UnexpectedAnswer,
    WorkflowView,
    as_json,
    read_answer,
)

JOB: dict[str, Any] = {
    "id": "0193a5b2-0000-7000-8000-000000000001",
    "type": "demo.sleep",
    "state": "succeeded",
    "idempotency_key": "k1",
    "payload": {"seconds": 0},
    "attempts": 1,
    "max_attempts": 3,
    "created_at": "2026-12-05T15:00:00.123456Z",
    "updated_at": "2026-12-05T15:00:01Z",
    "available_at": "2026-12-05T15:00:00.123456Z",
    "result": {"slept": 0},
    "progress": {"fraction": 1, "message": None, "at": "2026-12-05T15:00:01Z"},
    "links": {"self": "/v1/jobs/x", "events": "/v1/jobs/x/events"},
}


def test_a_job_view_is_read_typed_and_a_field_added_later_is_ignored() -> None:
    job = read_answer(Job, {**JOB, "added_in_a_later_api": True})
    assert job.id == uuid.UUID(JOB["id"])
    assert job.updated_at == datetime(2026, 12, 5, 15, 0, 1, tzinfo=UTC)
    assert job.progress is not None and job.progress.fraction == 1.0
    assert isinstance(job.progress.fraction, float)
    assert job.links.self == "/v1/jobs/x"
    assert (job.finished, job.priority, job.steps, job.deduplicated) == (True, 0, None, False)
    assert not hasattr(job, "added_in_a_later_api")


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"links": None}, "a dict, not NoneType"),
        ({"attempts": "1"}, "a int, not str"),
        ({"attempts": True}, "a number, not True"),
        ({"created_at": "yesterday"}, "yesterday"),
        ({"id": "not-a-uuid"}, "badly formed"),
        ({"payload": [1]}, "a dict, not list"),
    ],
)
def test_a_mistyped_field_is_refused(change: dict[str, Any], said: str) -> None:
    with pytest.raises(UnexpectedAnswer, match=said):
        read_answer(Job, {**JOB, **change})


def test_a_missing_field_without_a_default_is_refused() -> None:
    without_links = {name: value for name, value in JOB.items() if name != "links"}
    with pytest.raises(UnexpectedAnswer, match="Job has no links"):
        read_answer(Job, without_links)


def test_a_view_is_frozen_and_its_defaults_are_its_own() -> None:
    view = read_answer(
        WorkflowView,
        {"id": JOB["id"], "state": "running", "on_failure": "continue",
         "created_at": JOB["created_at"], "jobs": {}},
    )  # fmt: skip
    other = read_answer(WorkflowView, as_json(view))
    assert view == other and view.counts == {} and view.counts is not other.counts
    with pytest.raises(AttributeError):
        view.state = "cancelled"  # type: ignore[misc]


def test_a_view_is_written_back_as_the_document_it_was_read_from() -> None:
    document = as_json(read_answer(Job, JOB))
    assert {name: document[name] for name in JOB} == {
        **JOB,
        "progress": {**JOB["progress"], "fraction": 1.0},
    }
    assert read_answer(Job, document) == read_answer(Job, JOB)
