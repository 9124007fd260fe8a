"""After a PostgreSQL restart no store call fails once the database answers again (issue 24,
items 11 and 18): every pooled connection died with the server, and each used to fail one
call before the pool replaced it (ten in a row with a pool of ten)."""

from __future__ import annotations

import asyncio

from sqlalchemy import text

from jobrelay.db import queries as q
from jobrelay.db.engine import PoolMode
from jobrelay.db.store import Store
from tests.support.faults import pg_restart

POOL = 6
# Long enough that POOL calls at once each need their own connection.
HOLD = text("SELECT pg_sleep(0.2)")


async def use_every_connection(store: Store) -> None:
    """Hold POOL connections of the fast pool at once (and the other pool's), so that every
    one of them is open and back in the pool when the server goes away."""
    await asyncio.gather(*(store.fetch_one(HOLD) for _ in range(POOL)))
    async with store.transaction() as first, store.transaction() as second:
        await first.execute(q.PING)
        await second.execute(q.PING)


async def test_right_after_a_restart_every_call_on_every_pooled_connection_succeeds(
    database_url: str, pool_mode: PoolMode
) -> None:
    store = Store.connect(database_url, pool_size=POOL, pool_mode=pool_mode)
    try:
        await use_every_connection(store)
        assert store.fast_engine.pool.checkedin() == POOL  # type: ignore[attr-defined]
        await asyncio.to_thread(pg_restart)  # returns once it accepts connections

        failures: list[str] = []
        for _ in range(3 * POOL):
            try:
                await store.ping()
                await store.stats()  # the multi-statement pool
            except Exception as error:
                failures.append(f"{type(error).__name__}: {error}")
        assert failures == []
        # Concurrently too: every connection of the pool at once.
        await asyncio.gather(*(store.fetch_one(HOLD) for _ in range(POOL)))
    finally:
        await store.close()
