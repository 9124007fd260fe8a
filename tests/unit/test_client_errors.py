"""``ApiError``'s text names the invalid fields of a 422 (they were only in ``.problem``), in
one line, and ``.problem`` is documented."""

from __future__ import annotations

import json

from jobrelay_client.errors import FIELD_ERRORS_SHOWN, ApiError


def validation_problem(*fields: str) -> bytes:
    return json.dumps(
        {
            "type": "https://jobrelay.dev/problems/validation_error",
            "title": "The request is not valid",
            "status": 422,
            "code": "validation_error",
            "errors": [
                {"loc": ["body", field], "msg": "Input should be a valid integer", "type": "x"}
                for field in fields
            ],
        }
    ).encode()


def test_the_text_of_a_422_names_its_invalid_fields() -> None:
    error = ApiError.from_answer(422, validation_problem("max_attempts"), reason="Unprocessable")
    assert str(error) == (
        "422 validation_error: The request is not valid "
        "(body.max_attempts: Input should be a valid integer)"
    )
    assert error.problem["errors"][0]["loc"] == ["body", "max_attempts"]


def test_past_a_few_fields_the_text_counts_the_rest() -> None:
    fields = [f"f{n}" for n in range(FIELD_ERRORS_SHOWN + 2)]
    text = str(ApiError.from_answer(422, validation_problem(*fields), reason=""))
    assert "body.f0: " in text and f"body.f{FIELD_ERRORS_SHOWN - 1}: " in text
    assert f"body.f{FIELD_ERRORS_SHOWN}:" not in text
    assert text.endswith("; 2 more)")
    assert "\n" not in text


def test_a_problem_without_field_errors_reads_as_before() -> None:
    body = json.dumps({"code": "job_not_found", "title": "No such job", "status": 404}).encode()
    assert (
        str(ApiError.from_answer(404, body, reason="Not Found")) == "404 job_not_found: No such job"
    )
    assert (
        str(ApiError.from_answer(502, b"<html>", reason="Bad Gateway"))
        == "502 http_502: Bad Gateway"
    )


def test_the_problem_attribute_is_documented() -> None:
    assert "``problem`` is the whole problem body" in (ApiError.__doc__ or "")
