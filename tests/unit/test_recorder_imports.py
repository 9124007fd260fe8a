"""The testing kit's ``Recorder`` is pure Python: recording, repeating and conflicting under a
key load neither a database driver nor jobrelay's database adapter (its checks, hash and key
decision are the pure core's, ``core/idempotency.py``), so a user's unit tests need neither."""

from __future__ import annotations

import subprocess
import sys

RECORD = """
import sys
from jobrelay_client.errors import IdempotencyConflict
from jobrelay.testing import Recorder

recorder = Recorder()
made = recorder.submit("t", {"a": 1}, key="k")
assert recorder.submit("t", {"a": 1}, key="k") == made
try:
    recorder.submit("t", {"a": 2}, key="k")
except IdempotencyConflict:
    pass
else:
    raise AssertionError("no conflict")
loaded = ("sqlalchemy", "psycopg", "jobrelay.db", "jobrelay.transactional")
print(" ".join(name for name in loaded if name in sys.modules))
"""


def test_the_recorder_records_repeats_and_conflicts_without_sqlalchemy_or_psycopg() -> None:
    done = subprocess.run(
        [sys.executable, "-c", RECORD], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.split() == []


DURABLE = """
import sys
from jobrelay import JobContext, Registry
from jobrelay.testing import run_durable
from pydantic import BaseModel

registry = Registry()

class Empty(BaseModel):
    pass

@registry.job("t.nap", Empty)
async def nap(context: JobContext, payload: Empty) -> dict:
    value = await context.step("a", lambda: 1)
    await context.sleep(3600)
    return {"a": value, "signal": await context.wait_for_signal("go")}

life = run_durable(nap, Empty(), signals={"go": 2})
assert life.succeeded and life.result == {"a": 1, "signal": 2}, life.verdicts
loaded = ("sqlalchemy", "psycopg", "jobrelay.db", "jobrelay.transactional")
print(" ".join(name for name in loaded if name in sys.modules))
"""


def test_the_durable_kit_runs_a_life_without_sqlalchemy_or_psycopg() -> None:
    done = subprocess.run(
        [sys.executable, "-c", DURABLE], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.split() == []
