"""A job's journal in causal order, through the real system (issue 37 item 8.1): the relay
recorded a publish after its broker confirm, so a consumer's claim of the message could be
journaled first, and the `published` entry carried the job's attempt count at that moment (the
previous attempt's number for a retry). The API's trace, the CLI's and the console's timeline
must read published(1) < claimed(1) < retry < published(2) < claimed(2) < succeeded."""

from __future__ import annotations

import re
from typing import Any

from tests.conftest import auth
from tests.integration.test_console import console_client, signed_in
from tests.support.system import System

FAILS_ONCE = {"type": "demo.fail", "payload": {"mode": "transient", "times": 1}, "max_attempts": 3}

CAUSAL = [
    ("published", 1),
    ("claimed", 1),
    ("retry_scheduled", 1),
    ("published", 2),
    ("claimed", 2),
    ("succeeded", 2),
]
# The console lists each journal entry as a line: its event, then "attempt N · time".
CONSOLE_ENTRY = re.compile(
    r'<strong class="event">(\w+)</strong>\s*<span class="muted">attempt (\d+)'
)


def delivery_story(events: list[dict[str, Any]]) -> list[tuple[str, int]]:
    """The entries between the intent and the end (``received`` aside), in the order given."""
    return [(e["event"], e["attempt"]) for e in events if e["event"] != "received"]


async def test_a_retried_job_reads_in_causal_order_in_every_view(system: System) -> None:
    with system.running():
        job_id = await system.submit(FAILS_ONCE)
        await system.wait_for("succeeded", job_id, what="the success on attempt 2")

    owner = await system.api.get(f"/v1/jobs/{job_id}/trace", headers=auth(system.alice))
    assert owner.status_code == 200, owner.text
    events = owner.json()["events"]
    assert delivery_story(events) == CAUSAL
    times = [e["at"] for e in events]
    assert times == sorted(times), "each entry is dated no earlier than the one before"

    cli = system.cli_json("jobs", "trace", job_id)
    assert delivery_story(cli["events"]) == CAUSAL

    async with console_client(system.settings, system.store) as console:
        await signed_in(console, system.admin)
        page = await console.get(f"/ui/jobs/{job_id}")
    assert page.status_code == 200, page.text
    listed = [(event, int(n)) for event, n in CONSOLE_ENTRY.findall(page.text)]
    assert [entry for entry in listed if entry[0] != "received"] == CAUSAL
