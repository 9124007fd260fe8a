"""What the worker's unit tests share: a hand-driven clock, a delivery that records how it was
settled, and an empty payload model (the in-memory store is ``jobrelay.consumer.fakes``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from pydantic import BaseModel

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

    async def ack(self, multiple: bool = False) -> None:
        self.settled.append("ack")

    async def nack(self, multiple: bool = False, requeue: bool = True) -> None:
        self.settled.append("requeue" if requeue else "dead_letter")


class Empty(BaseModel):
    pass
