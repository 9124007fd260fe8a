"""The chaos history's final rows (chaos/history.py, docs/history.md) read from a real
database: each row one line of plain JSON (ids as text, times as epoch seconds), a job's key
only when a client gave it, each job's journal in its order."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from chaos.history import HISTORY_FILE, History
from jobrelay.core.states import JobState
from jobrelay.db.store import Store
from tests.support import factories


async def test_the_final_rows_are_written_one_line_each_as_plain_json(
    store: Store, direct_database_url: str, tmp_path: Path
) -> None:
    parent = await factories.job(
        store, state=JobState.SUCCEEDED, result={"slept": 0.01}, idempotency_key="chaos-1-7"
    )
    child = await factories.job(store, state=JobState.QUEUED, parent_job_id=parent.id)
    history = History(tmp_path / HISTORY_FILE)

    await asyncio.to_thread(history.write_rows, direct_database_url)
    history.close()

    written = [json.loads(line) for line in history.path.read_text().splitlines()]
    jobs = {line["id"]: line for line in written if line["record"] == "job"}
    assert set(jobs) == {str(parent.id), str(child.id)}
    made = jobs[str(parent.id)]
    assert (made["key"], made["state"], made["attempts"]) == ("chaos-1-7", "succeeded", 1)
    assert made["client"] == str(parent.client_id) and made["payload"] == {"seconds": 0}
    assert jobs[str(child.id)]["key"] is None  # a child's key is jobrelay's, not a client's
    assert jobs[str(child.id)]["parent_job_id"] == str(parent.id)
    [result] = [line for line in written if line["record"] == "result"]
    assert result == {
        "record": "result",
        "job_id": str(parent.id),
        "attempt": 1,
        "result": {"slept": 0.01},
    }
    events: list[dict[str, Any]] = [line for line in written if line["record"] == "event"]
    of_parent = [event for event in events if event["job_id"] == str(parent.id)]
    assert of_parent and all(isinstance(event["at"], float) for event in of_parent)
    assert [event["seq"] for event in of_parent] == sorted(event["seq"] for event in of_parent)
