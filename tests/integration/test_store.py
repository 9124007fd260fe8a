"""The store's fast path on a real PostgreSQL: pooled connections stay healthy."""

from __future__ import annotations

import asyncio
import contextlib

from sqlalchemy import text

from jobrelay.db import queries as q
from jobrelay.db.store import Store

SLOW = text("SELECT pg_sleep(5)")


async def test_a_statement_cancelled_mid_flight_does_not_poison_the_pool(store: Store) -> None:
    slow = asyncio.create_task(store.fetch_one(SLOW))
    await asyncio.sleep(0.3)
    slow.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await slow

    # Sequential calls reuse the connection the cancelled query returned, if it was returned.
    for _ in range(5):
        assert (await store.fetch_one(q.PING)).ok == 1


async def test_statements_compile_once(store: Store) -> None:
    for _ in range(3):
        await store.ping()
    assert list(store._sql_cache) == [q.PING]
