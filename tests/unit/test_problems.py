"""The API decides the HTTP status of the core's request errors (``api/problems.py``)."""

from __future__ import annotations

import pytest

from jobrelay.api.problems import STATUSES, status_of
from jobrelay.core import errors


def _request_errors() -> list[type[errors.RequestError]]:
    found: list[type[errors.RequestError]] = []
    pending = list(errors.RequestError.__subclasses__())
    while pending:
        kind = pending.pop()
        found.append(kind)
        pending.extend(kind.__subclasses__())
    return found


@pytest.mark.parametrize("kind", _request_errors(), ids=lambda kind: kind.__name__)
def test_every_request_error_has_its_own_status(kind: type[errors.RequestError]) -> None:
    assert kind in STATUSES


def test_the_statuses_are_the_documented_ones() -> None:
    assert status_of(errors.JobNotFound()) == 404
    assert status_of(errors.IdempotencyConflict()) == 409
    assert status_of(errors.Forbidden()) == 403
    assert status_of(errors.UnknownJobType()) == 422
