"""The sequences as operators see them (docs/flow-control.md): the keys with jobs waiting in
line behind their head, and the quarantined head that blocks one, for
``GET /v1/admin/sequences``, ``jobrelay sequences list`` and the console's Sequences page. It
only reads: a blocked sequence is unblocked through its blocker's replay or cancel."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from psycopg.errors import UndefinedColumn, UndefinedTable

from jobrelay.core.errors import ConfigurationError
from jobrelay.db import queries as q
from jobrelay.db.store import Store

# As many as the other admin lists show by default (the quarantine's, the jobs').
DEFAULT_LIMIT = 100


@dataclass(frozen=True)
class WaitingSequence:
    """A sequence with jobs waiting: ``blocked_by`` is its quarantined head (None: the head
    runs, or waits its turn, normally); ``waiting``, how many jobs wait behind the head."""

    client: str
    key: str
    blocked_by: uuid.UUID | None
    waiting: int

    def as_document(self) -> dict[str, Any]:
        blocked_by = None if self.blocked_by is None else str(self.blocked_by)
        return {
            "client": self.client,
            "key": self.key,
            "blocked_by": blocked_by,
            "waiting": self.waiting,
        }


class SequencesNotMigrated(ConfigurationError):
    """The database has no sequences yet: it was not migrated to 0019."""


class SequenceStore:
    def __init__(self, store: Store) -> None:
        self.store = store

    async def waiting(
        self, *, blocked: bool = False, limit: int = DEFAULT_LIMIT
    ) -> list[WaitingSequence]:
        """The sequences with jobs waiting (``blocked``: those a quarantined job blocks only),
        blocked first, then the longest lines, at most ``limit``."""
        try:
            rows = await self.store.fetch_all(q.WAITING_SEQUENCES, blocked=blocked, limit=limit)
        except (UndefinedTable, UndefinedColumn):
            raise SequencesNotMigrated(
                "the database has no sequences yet (revision 0019): run jobrelay migrate"
            ) from None
        return [
            WaitingSequence(
                client=row.client, key=row.key, blocked_by=row.blocked_by, waiting=int(row.waiting)
            )
            for row in rows
        ]
