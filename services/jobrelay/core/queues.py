"""The work queues as operators see them (``GET /v1/admin/queues``, ``jobrelay queues list``,
the console's queues page): each queue's pause, what waits for it in the outbox, what runs, and
what the broker holds for it.

The database's side (``QueueState``: the ``queues`` row, the backlog, the running jobs) and the
broker's (``core/relay.py::QueueDepth``, from a passive ``queue.declare``) are read apart and
joined here, so a broker that does not answer leaves its figures unknown (``None``) and never
the whole answer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from jobrelay.core.relay import QueueDepth
from jobrelay.core.topology import queue_short_name

QUEUE_NAME_MAX = 200
# ``jobrelay.jobs.slow`` → ``slow``, the name of a row of ``queues`` (core/topology.py's).
short_queue_name = queue_short_name


@dataclass(frozen=True)
class QueueState:
    """The database's side of a queue: its row, its due and unpublished outbox rows, and its
    running jobs."""

    name: str
    paused_at: datetime | None
    paused_by: str | None
    backlog: int
    running: int

    @property
    def paused(self) -> bool:
        return self.paused_at is not None


@dataclass(frozen=True)
class QueuesReport:
    """Every queue with both sides; ``broker_reachable`` False: the broker's figures are
    unknown (``null``), the database's are still given."""

    queues: Sequence[QueueState]
    depths: Mapping[str, QueueDepth] | None

    @property
    def broker_reachable(self) -> bool:
        return self.depths is not None

    def find(self, name: str) -> QueueState | None:
        return next((queue for queue in self.queues if queue.name == name), None)

    def queue_document(self, queue: QueueState) -> dict[str, Any]:
        depth = None if self.depths is None else self.depths.get(queue.name)
        return {
            "name": queue.name,
            "paused": queue.paused,
            "paused_at": queue.paused_at.isoformat() if queue.paused_at else None,
            "paused_by": queue.paused_by,
            "backlog": queue.backlog,
            "window_in_use": None if depth is None else depth.ready,
            "running": queue.running,
            "consumers": None if depth is None else depth.consumers,
        }

    def as_document(self) -> dict[str, Any]:
        return {
            "queues": [self.queue_document(queue) for queue in self.queues],
            "broker": "ok" if self.broker_reachable else "unavailable",
        }
