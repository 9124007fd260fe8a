"""The two sides of the outbox store's contract test
(``tests/integration/test_outbox_store_contract.py``): the in-memory outbox of
``tests/support/dispatcher_fakes.py`` and ``db/relay_store.py::RelayStore`` on a real migrated
database, each behind the same small harness.

A scenario writes outbox rows, drives the store through ``port`` (the ``OutboxStore`` port, and
nothing else), and reads what happened to each row. Rows are written the way each side writes
them: the fake through its ``add``, PostgreSQL as a queued job of one client with its outbox row
(``tests/support/factories.py``).

Times: the fake runs on a hand-driven clock, PostgreSQL on its own. ``pass_time`` moves the
outbox's clock forward on both: the fake's clock itself; on PostgreSQL every time the outbox
holds moves back by as much, which is the same to every statement that compares it with
``now()``. The real time a PostgreSQL scenario takes besides shows in ``mark()``: two reads
bracket what a scenario measures (the fake's operations take no time, its marks are all 0).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

from sqlalchemy import func, text

from jobrelay.core.relay import OutboxStore
from jobrelay.db.relay_store import RelayStore
from jobrelay.db.store import Store
from tests.support import factories
from tests.support.dispatcher_fakes import InMemoryOutbox


@dataclass(frozen=True)
class Seen:
    """One outbox row as a scenario reads it; ``due_in``: seconds until it is due (negative:
    overdue), leased rows included (a lease moves the due time past it)."""

    published: bool
    publish_attempts: int
    last_error: str | None
    due_in: float


class Side(Protocol):
    """One outbox store under the contract, with what a scenario needs around it."""

    name: str
    port: OutboxStore

    async def add(self, job_type: str = "demo.sleep", *, due_in: float = 0.0) -> int:
        """A queued job's outbox row, due in ``due_in`` seconds; its id."""
        ...

    async def row(self, outbox_id: int) -> Seen | None:
        """The row; None once deleted."""
        ...

    async def pass_time(self, seconds: float) -> None: ...

    async def mark(self) -> float:
        """A reading of the real clock, in seconds (0 on the fake)."""
        ...

    async def queues(self) -> set[str]:
        """The work queues the store has registered."""
        ...

    async def broker_blocks(self) -> dict[str, str]:
        """The dispatchers reported blocked, with the reason."""
        ...

    async def close(self) -> None: ...


class MemorySide:
    name = "memory"

    def __init__(self) -> None:
        # As the relay's unit tests build it: its clock (``now``) starts at 0.
        self.outbox = InMemoryOutbox()
        self.port: OutboxStore = self.outbox

    async def add(self, job_type: str = "demo.sleep", *, due_in: float = 0.0) -> int:
        return self.outbox.add(job_type, due_in=due_in).id

    async def row(self, outbox_id: int) -> Seen | None:
        found = self.outbox.rows.get(outbox_id)
        if found is None:
            return None
        due_in = found.due_at - self.outbox.now
        return Seen(found.published, found.publish_attempts, found.last_error, due_in)

    async def pass_time(self, seconds: float) -> None:
        self.outbox.now += seconds

    async def mark(self) -> float:
        return 0.0

    async def queues(self) -> set[str]:
        return set(self.outbox.queues)

    async def broker_blocks(self) -> dict[str, str]:
        return dict(self.outbox.broker_blocks)

    async def close(self) -> None:
        pass


class PostgresSide:
    name = "postgresql"

    def __init__(self, store: Store) -> None:
        self.store = store
        self.relay = RelayStore(store)
        self.port: OutboxStore = self.relay
        # Every row one client's, so the flow pick's turns among clients order nothing.
        self.client_id: uuid.UUID | None = None

    async def add(self, job_type: str = "demo.sleep", *, due_in: float = 0.0) -> int:
        if self.client_id is None:
            self.client_id = (await factories.client(self.store)).id
        async with factories.connection(self.store) as connection:
            due = func.now() + timedelta(seconds=due_in)
            [job] = await factories.jobs(
                connection, 1, client_id=self.client_id, job_type=job_type, available_at=due
            )
            [made] = await factories.outbox(connection, [job])
        return int(made.id)

    async def row(self, outbox_id: int) -> Seen | None:
        rows = await self._rows(
            "SELECT published_at IS NOT NULL AS published, publish_attempts, last_error,"
            " EXTRACT(EPOCH FROM available_at - now()) AS due_in"
            " FROM jobrelay.outbox WHERE id = :id",
            id=outbox_id,
        )
        if not rows:
            return None
        [found] = rows
        return Seen(found.published, found.publish_attempts, found.last_error, float(found.due_in))

    async def pass_time(self, seconds: float) -> None:
        await self._rows(
            "UPDATE jobrelay.outbox SET"
            " available_at = available_at - make_interval(secs => :seconds),"
            " created_at = created_at - make_interval(secs => :seconds),"
            " published_at = published_at - make_interval(secs => :seconds)",
            seconds=seconds,
        )

    async def mark(self) -> float:
        [row] = await self._rows("SELECT EXTRACT(EPOCH FROM clock_timestamp()) AS seconds")
        return float(row.seconds)

    async def queues(self) -> set[str]:
        return {row.name for row in await self._rows("SELECT name FROM jobrelay.queues")}

    async def broker_blocks(self) -> dict[str, str]:
        rows = await self._rows("SELECT dispatcher, reason FROM jobrelay.broker_blocks")
        return {row.dispatcher: row.reason for row in rows}

    async def close(self) -> None:
        pass

    async def _rows(self, sql: str, **params: Any) -> list[Any]:
        async with self.store.transaction() as connection:
            result = await connection.execute(text(sql), params)
            return list(result.all()) if result.returns_rows else []
