"""A handler's result the store cannot keep quarantines its job as ``invalid_result`` at once:
the check is the core's (``core/jsonvalues.py``), as for payloads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from jobrelay.core.message import Envelope
from jobrelay.core.registry import JobContext, Registry
from jobrelay.core.states import JobState
from tests.support.consumer_fakes import InMemoryExecutionStore
from tests.support.worker_fakes import Clock, Empty, FakeDelivery, unit_worker

_cycle: dict[str, Any] = {}
_cycle["self"] = _cycle

UNSTORABLE = {
    "not a dict": ([1, 2], "no dict"),
    "a NaN": ({"ratio": float("nan")}, "not JSON"),
    "a key that is no string": ({1: "one"}, "key"),
    "a NUL": ({"text": "a\x00b"}, "NUL"),
    "a set": ({"tags": {"a"}}, "not JSON"),
    "a cycle": (_cycle, "not JSON"),
}


@pytest.mark.parametrize("name", sorted(UNSTORABLE))
async def test_a_result_the_store_cannot_keep_quarantines_the_job_as_invalid_result(
    name: str, tmp_path: Path
) -> None:
    result, said = UNSTORABLE[name]
    clock = Clock()
    store = InMemoryExecutionStore(clock)
    registry = Registry()

    @registry.job("t.returns", Empty)
    async def returns(context: JobContext, payload: Empty) -> Any:
        return result

    job = store.add("t.returns")
    delivery = FakeDelivery(Envelope(job_id=job.id, type=job.type).encode())
    verdict = await unit_worker(store, registry, clock, tmp_path).handle(delivery)
    assert (verdict.outcome, delivery.settled) == ("quarantined", ["dead_letter"])
    stored = store.jobs[job.id]
    assert (stored.state, stored.last_error_code) == (JobState.QUARANTINED, "invalid_result")
    assert stored.last_error is not None and said in stored.last_error
