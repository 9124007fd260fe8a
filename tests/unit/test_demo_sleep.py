"""``demo.sleep`` runs every sleep it accepts to its end (issue 24, item 23: it accepted up to
3,600 s while its handler timed out at 300 s)."""

from __future__ import annotations

import pydantic
import pytest

from jobrelay.handlers import builtin


def test_the_longest_sleep_demo_sleep_accepts_ends_before_its_timeout() -> None:
    job_type = builtin.registry.get("demo.sleep")
    longest = builtin.SleepPayload.model_json_schema()["properties"]["seconds"]["maximum"]
    builtin.SleepPayload(seconds=longest)  # accepted
    with pytest.raises(pydantic.ValidationError):
        builtin.SleepPayload(seconds=longest + 1)
    assert longest < job_type.timeout_seconds
