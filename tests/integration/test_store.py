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


PLAN_CACHE_MODE = text("SELECT current_setting('plan_cache_mode') AS mode")
PLAN_CACHE_MODE_SLOWLY = text(
    "SELECT current_setting('plan_cache_mode') AS mode, pg_backend_pid() AS pid, pg_sleep(0.2)"
)


async def test_generic_plans_are_kept_only_where_asked_and_only_on_single_statements(
    store: Store, direct_database_url: str
) -> None:
    """The dispatcher's pool keeps one generic plan per prepared statement (docs/flow-control.md,
    "What flow control costs"); every other pool, and every transaction, plans as PostgreSQL
    decides. Session state set at connect: on the server itself (behind PgBouncer's
    transaction pooling it would leak to other clients' sessions, see the next test)."""
    dispatcher = Store.connect(direct_database_url, generic_plans=True)
    try:
        # At once, so that they run on three connections of the pool, not only the first.
        rows = await asyncio.gather(*(dispatcher.fetch_one(PLAN_CACHE_MODE_SLOWLY) for _ in "abc"))
        assert len({row.pid for row in rows}) == 3
        assert {row.mode for row in rows} == {"force_generic_plan"}
        async with dispatcher.transaction() as connection:
            assert (await connection.execute(PLAN_CACHE_MODE)).scalar_one() == "auto"
    finally:
        await dispatcher.close()
    assert (await store.fetch_one(PLAN_CACHE_MODE)).mode == "auto"


async def test_behind_a_transaction_pooler_no_session_state_is_set_at_connect(
    store: Store, database_url: str
) -> None:
    """In transaction mode the dispatcher's pool sets no ``plan_cache_mode``: through PgBouncer
    the SET would stay on a server session that other clients' transactions run on next."""
    dispatcher = Store.connect(database_url, generic_plans=True, pool_mode="transaction")
    try:
        rows = await asyncio.gather(*(dispatcher.fetch_one(PLAN_CACHE_MODE_SLOWLY) for _ in "abc"))
        assert {row.mode for row in rows} == {"auto"}
    finally:
        await dispatcher.close()
    assert (await store.fetch_one(PLAN_CACHE_MODE)).mode == "auto"
