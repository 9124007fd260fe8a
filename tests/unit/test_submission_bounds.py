"""The submission bounds are stated once (core/bounds.py) and every side reads them there
(issue 24, item 2); a batch result with a hole is a bug, not a shorter list (item 8)."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from pydantic import ValidationError

from jobrelay import transactional
from jobrelay.api.schemas import BatchItem, SubmitJob
from jobrelay.cli.common import CliError, settings_from_env
from jobrelay.core import bounds
from jobrelay.core.jobs import Job, JobRequest
from jobrelay.core.schedules import check_max_attempts
from jobrelay.core.settings import Settings
from jobrelay.db.accept import AcceptResult, all_present


def test_jobrelay_max_attempts_above_the_per_submission_cap_is_refused_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("JOBRELAY_MAX_ATTEMPTS", str(bounds.MAX_ATTEMPTS_MAX + 1))
    with pytest.raises(CliError) as refused:
        settings_from_env()
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith("invalid setting: JOBRELAY_MAX_ATTEMPTS: ")
    assert str(bounds.MAX_ATTEMPTS_MAX) in message


def test_the_cap_itself_is_a_valid_setting_and_the_default_is_the_enqueue_default() -> None:
    assert Settings(max_attempts=bounds.MAX_ATTEMPTS_MAX).max_attempts == bounds.MAX_ATTEMPTS_MAX
    assert Settings().max_attempts == bounds.DEFAULT_MAX_ATTEMPTS
    assert transactional.DEFAULT_MAX_ATTEMPTS == bounds.DEFAULT_MAX_ATTEMPTS


@pytest.mark.parametrize("attempts", [bounds.MAX_ATTEMPTS_MAX, bounds.MAX_ATTEMPTS_MAX + 1])
def test_the_api_the_schedules_and_enqueue_agree_on_max_attempts(attempts: int) -> None:
    allowed = attempts <= bounds.MAX_ATTEMPTS_MAX
    outcomes = []
    for check in (
        lambda: SubmitJob(type="t", max_attempts=attempts),
        lambda: check_max_attempts(attempts),
        lambda: transactional.checked_submission("t", {}, "k", None, None, attempts, None),
    ):
        try:
            check()
            outcomes.append(True)
        except (ValueError, ValidationError):
            outcomes.append(False)
    assert outcomes == [allowed] * 3


def test_the_api_and_enqueue_agree_on_the_type_and_key_lengths() -> None:
    long_type, long_key = "t" * (bounds.TYPE_NAME_MAX + 1), "k" * (bounds.IDEMPOTENCY_KEY_MAX + 1)
    with pytest.raises(ValidationError):
        SubmitJob(type=long_type)
    with pytest.raises(ValidationError):
        BatchItem(type="t", idempotency_key=long_key)
    for job_type, key in ((long_type, "k"), ("t", long_key)):
        with pytest.raises(ValueError):
            transactional.checked_submission(job_type, {}, key, None, None, None, None)
    SubmitJob(type="t" * bounds.TYPE_NAME_MAX)
    BatchItem(type="t", idempotency_key="k" * bounds.IDEMPOTENCY_KEY_MAX)


def accepted() -> AcceptResult:
    now = dt.datetime.now(dt.UTC)
    job: Job = JobRequest("k", "t", {}, 3).as_new_job(uuid.uuid4(), uuid.uuid4(), at=now)
    return AcceptResult(job=job, created=True, conflict=False)


def test_a_batch_result_with_a_hole_is_an_error_not_a_shorter_list() -> None:
    full = [accepted(), accepted()]
    assert all_present(full) == full
    with pytest.raises(AssertionError, match=r"\[1\]"):
        all_present([full[0], None, full[1]])
