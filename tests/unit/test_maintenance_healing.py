"""The dispatcher's maintenance runs the healing hook (lost messages, the quarantine) every
round, wakes the relay when it wrote outbox rows, and survives its failures."""

from __future__ import annotations

import asyncio
import random

from jobrelay.core.errors import StoreUnavailable
from jobrelay.dispatcher.maintenance import Maintenance, MaintenanceConfig
from jobrelay.dispatcher.relay import Relay, RelayConfig
from tests.support.dispatcher_fakes import FakePublisher, InMemoryOutbox

CONFIG = RelayConfig(poll_interval=30)


async def test_healing_runs_every_round_survives_failures_and_wakes_the_relay() -> None:
    calls: list[str] = []
    answers: list[int | Exception] = [
        StoreUnavailable("database unavailable (fake)"),
        RuntimeError("a bug"),
        0,
        2,
    ]

    async def healing() -> int:
        answer = answers[len(calls)] if len(calls) < len(answers) else 0
        calls.append(type(answer).__name__)
        if isinstance(answer, Exception):
            raise answer
        return answer

    outbox = InMemoryOutbox()
    relay = Relay(outbox, FakePublisher(), CONFIG, rng=random.Random(1))
    maintenance = asyncio.create_task(
        Maintenance(
            outbox,
            MaintenanceConfig(interval=0.01),
            healing=healing,
            wake=relay.wake,
            stopping=relay.stopping,
        ).run()
    )
    try:
        for _ in range(200):
            if len(calls) >= 4:
                break
            await asyncio.sleep(0.01)
        assert calls[:4] == ["StoreUnavailable", "RuntimeError", "int", "int"]
        assert relay.wakeup.is_set(), "new outbox rows wake the relay"
    finally:
        relay.stop()
        await asyncio.wait_for(maintenance, 5)
