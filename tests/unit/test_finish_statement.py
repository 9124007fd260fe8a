"""Which statement finishes a group (``db/execution_store.py``): the lean FINISH_PLAIN_JOBS only
when no job of the group is a workflow's or a child, whose end moves other jobs."""

from __future__ import annotations

import uuid

from jobrelay.core.jobs import Succeeded
from jobrelay.db import queries as q
from jobrelay.db.execution_store import _FinishRequest, finish_statement


def request(*, related: bool) -> _FinishRequest:
    plain = _FinishRequest.of(uuid.uuid4(), uuid.uuid4(), Succeeded({}))
    return _FinishRequest(**{**plain.__dict__, "related": related})


def test_a_group_of_plain_jobs_is_finished_by_the_lean_statement() -> None:
    assert finish_statement([request(related=False) for _ in range(5)]) is q.FINISH_PLAIN_JOBS


def test_one_job_of_a_workflow_or_a_child_sends_the_whole_group_through_the_full_one() -> None:
    group = [request(related=False), request(related=True), request(related=False)]
    assert finish_statement(group) is q.FINISH_JOBS
    assert finish_statement([request(related=True)]) is q.FINISH_JOBS


def test_a_finish_that_says_nothing_of_its_job_takes_the_full_statement() -> None:
    assert _FinishRequest.of(uuid.uuid4(), uuid.uuid4(), Succeeded({})).related
