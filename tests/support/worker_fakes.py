"""What the worker's unit tests share: a hand-driven clock, a delivery that records how it was
settled, an empty payload model and a worker with fast timings (the in-memory store is
``tests/support/consumer_fakes.py``)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from jobrelay.consumer.metrics import ConsumerMetrics
from jobrelay.consumer.patience import Backoff
from jobrelay.consumer.worker import Worker
from jobrelay.core.execution import ExecutionStore
from jobrelay.core.registry import Registry
from jobrelay.core.settings import Settings

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> datetime:
        return self.now


@dataclass
class FakeDelivery:
    body: bytes
    redelivered: bool | None = False
    settled: list[str] = field(default_factory=list)
    copy_failures: int = 0  # how many quarantine copies fail before one goes through

    async def ack(self, multiple: bool = False) -> None:
        self.settled.append("ack")

    async def nack(self, multiple: bool = False, requeue: bool = True) -> None:
        self.settled.append("requeue" if requeue else "dead_letter")

    async def dead_letter_after_ack(self) -> None:
        if self.copy_failures > 0:  # the broker away: the publish fails
            self.copy_failures -= 1
            raise ConnectionError("the broker is away (fake delivery)")
        self.settled.append("dead_letter_after_ack")


class Empty(BaseModel):
    pass


def unit_worker(
    store: ExecutionStore, registry: Registry, clock: Clock, tmp_path: Path, **options: Any
) -> Worker:
    """A worker on the in-memory store with a 30 s lease, a seeded rng and outages that pass in
    milliseconds; ``options``: Worker's keyword arguments to change (``heartbeat_interval``...),
    and ``long_job_ack_seconds``, the setting."""
    settings = Settings(
        lease_seconds=30.0,
        retry_base_seconds=1.0,
        results_dir=tmp_path,
        long_job_ack_seconds=options.pop("long_job_ack_seconds", 900.0),
    )
    return Worker(
        store,
        registry,
        settings,
        ConsumerMetrics(),
        **{
            "heartbeat_interval": 10.0,
            "store_patience": 0.02,
            "rng": random.Random(7),
            "name": "unit",
            "backoff": Backoff(base=0.001, cap=0.005),
            **options,
        },
    )
