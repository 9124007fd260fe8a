"""jobrelay's side of a PostgreSQL failover (SPEC section 18, "PostgreSQL with a standby"),
against the real server, without Patroni: a libpq multi-host URL whose first host is dead works
for every entry point; a connection whose server refuses writes (25006, as a standby does) is
dropped with every connection pooled before it; terminated pooled connections cost no call;
the listener leaves a server in recovery. Patroni's own failover is ``make chaos-failover``."""

from __future__ import annotations

import asyncio
import socket
import urllib.parse
import uuid
from collections.abc import AsyncIterator, Iterator

import psycopg
import pytest
from sqlalchemy import exc as sa_exc, text

from jobrelay.core.errors import StoreUnavailable
from jobrelay.core.settings import Settings, libpq_url, normalize_database_url
from jobrelay.db.engine import is_connection_error, make_engine
from jobrelay.db.listener import Listener
from jobrelay.db.store import Store
from jobrelay.healthcheck import check_database
from tests.support import databases
from tests.support.processes import jobrelay_env, run_cli
from tests.support.servers import Servers
from tests.support.waiting import eventually

POOL = 4
PROBE = "failover_probe"
WRITE = text(f"INSERT INTO {PROBE} (n) VALUES (1)")
BACKEND = text("SELECT pg_backend_pid() AS pid")
HOLD = text("SELECT pg_backend_pid() AS pid, pg_sleep(0.2)")
READ_ONLY = text("SELECT set_config('default_transaction_read_only', 'on', false)")


@pytest.fixture
def dead_port() -> int:
    """A local port nothing listens on: connecting is refused at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def behind_a_dead_host(url: str, dead_port: int) -> str:
    """``url`` as libpq's multi-host form, a dead server first, as after a failover that left
    the old primary's address first in the list."""
    parts = urllib.parse.urlsplit(libpq_url(url))
    userinfo, _, hostport = parts.netloc.rpartition("@")
    netloc = f"{userinfo}@127.0.0.1:{dead_port},{hostport}"
    query = "&".join(filter(None, [parts.query, "target_session_attrs=read-write"]))
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, query, ""))


@pytest.fixture
def multi_url(direct_database_url: str, dead_port: int) -> str:
    return behind_a_dead_host(direct_database_url, dead_port)


@pytest.fixture
def probe_table(direct_database_url: str) -> str:
    databases.admin_execute(direct_database_url, f"CREATE TABLE {PROBE} (n int)")
    return direct_database_url


@pytest.fixture
async def small_store(probe_table: str) -> AsyncIterator[Store]:
    store = Store.connect(probe_table, pool_size=2 * POOL, application_name=APP)
    yield store
    await store.close()


APP = f"jobrelay-failover-{uuid.uuid4().hex[:6]}"


# --- a dead first host ------------------------------------------------------------------------


async def test_settings_the_engine_and_the_store_work_past_a_dead_first_host(
    multi_url: str,
) -> None:
    for form in (multi_url, multi_url.replace("postgresql://", "postgres://")):
        settings = Settings(database_url=form, listen_database_url=form)
        engine = make_engine(settings.database_url, pool_size=1)
        try:
            async with engine.connect() as connection:
                assert (await connection.execute(text("SELECT 1"))).scalar() == 1
        finally:
            await engine.dispose()
        store = Store.connect(settings.database_url, pool_size=2)
        try:
            await store.ping()
            async with store.transaction() as connection:
                await connection.execute(text("SELECT 1"))
        finally:
            await store.close()


async def test_the_listener_hears_notifications_past_a_dead_first_host(multi_url: str) -> None:
    heard = asyncio.Event()
    states: list[bool] = []
    listener = Listener(
        Settings(database_url=multi_url).database_url,
        on_notify=lambda: None,
        listen="LISTEN failover_test",
        on_message=lambda _channel, _payload: heard.set(),
        on_state=states.append,
    )
    task = asyncio.create_task(listener.run())
    try:
        await eventually(lambda: _true(states == [True]), what="the listener to connect")
        with psycopg.connect(libpq_url(multi_url), autocommit=True) as connection:
            connection.execute("NOTIFY failover_test, 'x'")
        await asyncio.wait_for(heard.wait(), timeout=10)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def test_migrate_and_the_health_check_run_past_a_dead_first_host(
    servers: Servers, dead_port: int
) -> None:
    empty = databases.create_empty_database(servers.database_url)
    try:
        url = behind_a_dead_host(empty, dead_port)
        migrated = run_cli(jobrelay_env({"JOBRELAY_DATABASE_URL": url}), "migrate")
        assert migrated.returncode == 0, migrated.stderr[-2000:]
        # The database half of ``jobrelay healthcheck`` (the other half needs the topology).
        assert check_database(url, timeout=5) == "database ok"
        password = urllib.parse.urlsplit(url).password
        assert password and f":{password}@" not in migrated.stdout + migrated.stderr
    finally:
        databases.drop_database(servers.database_url, empty)


# --- a server that refuses writes -------------------------------------------------------------


async def _pids(store: Store) -> set[int]:
    """The backends of every connection of the fast pool, each held at once."""
    rows = await asyncio.gather(*(store.fetch_one(HOLD) for _ in range(POOL)))
    return {row.pid for row in rows}


async def test_a_write_refused_on_the_fast_path_replaces_every_pooled_connection(
    small_store: Store,
) -> None:
    # Every pooled connection's session refuses writes, as the sessions of a demoted primary
    # still answering would.
    rows = await asyncio.gather(
        *(small_store.fetch_one(text(f"{READ_ONLY.text}, pg_sleep(0.2)")) for _ in range(POOL))
    )
    assert len(rows) == POOL
    before = await _pids(small_store)

    with pytest.raises(StoreUnavailable, match="read-only transaction"):
        await small_store.fetch_all(WRITE)
    # The next calls get fresh connections, every one of them: none fails.
    for _ in range(2 * POOL):
        await small_store.fetch_all(WRITE)
    assert not (await _pids(small_store)) & before


async def test_a_write_refused_in_a_transaction_invalidates_the_connection(
    small_store: Store,
) -> None:
    async with small_store.engine.connect() as connection:
        await connection.execute(READ_ONLY)
        await connection.commit()
        first = (await connection.execute(BACKEND)).scalar()
        with pytest.raises(sa_exc.DBAPIError) as raised:
            await connection.execute(WRITE)
    assert raised.value.connection_invalidated
    assert is_connection_error(raised.value)  # "try again later", never "the job failed"

    async with small_store.transaction() as connection:
        assert (await connection.execute(BACKEND)).scalar() != first
        await connection.execute(WRITE)


async def test_a_database_set_read_only_gives_store_unavailable_until_it_takes_writes(
    small_store: Store, probe_table: str, servers: Servers
) -> None:
    """Writes against a server that takes none (a standby behind a URL without
    ``target_session_attrs``) are "the database is unavailable", and once it takes writes again
    the same store writes, with no restart."""
    name = urllib.parse.urlsplit(probe_table).path.lstrip("/")
    databases.admin_execute(
        servers.database_url, f'ALTER DATABASE "{name}" SET default_transaction_read_only = on'
    )
    try:
        for write in (small_store.fetch_all(WRITE), _write_in_transaction(small_store)):
            with pytest.raises(StoreUnavailable):
                await write
        await small_store.ping()  # reads still work
    finally:
        databases.admin_execute(
            servers.database_url, f'ALTER DATABASE "{name}" RESET default_transaction_read_only'
        )
    await eventually(lambda: _writes(small_store), what="writes once the database takes them")


async def _write_in_transaction(store: Store) -> None:
    async with store.transaction() as connection:
        await connection.execute(WRITE)


async def _writes(store: Store) -> bool:
    await store.fetch_all(WRITE)
    await _write_in_transaction(store)
    return True


async def test_terminated_pooled_connections_cost_no_failed_call(small_store: Store) -> None:
    await _pids(small_store)
    async with small_store.transaction() as first, small_store.transaction() as second:
        await first.execute(BACKEND)
        await second.execute(BACKEND)
    with psycopg.connect(libpq_url(small_store.url), autocommit=True) as admin:
        killed = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            (APP,),
        ).fetchall()
    assert len(killed) >= POOL
    await asyncio.sleep(0.1)  # the server has closed their sockets
    for _ in range(2 * POOL):
        await small_store.fetch_all(WRITE)
        await _write_in_transaction(small_store)


# --- the listener and a server in recovery ----------------------------------------------------


@pytest.fixture
def recovery_switch(direct_database_url: str) -> Iterator[str]:
    """The test database's sessions see a ``pg_is_in_recovery()`` of the test's own (a schema
    searched before pg_catalog), read from ``fake_recovery.state``: a server going into
    recovery, without a standby."""
    name = urllib.parse.urlsplit(direct_database_url).path.lstrip("/")
    with psycopg.connect(libpq_url(direct_database_url), autocommit=True) as connection:
        connection.execute("CREATE SCHEMA fake_recovery")
        connection.execute("CREATE TABLE fake_recovery.state (in_recovery boolean NOT NULL)")
        connection.execute("INSERT INTO fake_recovery.state VALUES (false)")
        connection.execute(
            "CREATE FUNCTION fake_recovery.pg_is_in_recovery() RETURNS boolean LANGUAGE sql "
            "AS 'SELECT in_recovery FROM fake_recovery.state'"
        )
        connection.execute(
            f'ALTER DATABASE "{name}" SET search_path = fake_recovery, pg_catalog, public'
        )
    yield direct_database_url


def _set_recovery(url: str, value: bool) -> None:
    with psycopg.connect(libpq_url(url), autocommit=True) as connection:
        connection.execute("UPDATE fake_recovery.state SET in_recovery = %s", (value,))


async def test_the_listener_leaves_a_server_that_went_into_recovery(recovery_switch: str) -> None:
    states: list[bool] = []
    listener = Listener(
        normalize_database_url(recovery_switch),
        on_notify=lambda: None,
        on_state=states.append,
        health_check_seconds=0.2,
        max_backoff_seconds=0.2,
    )
    task = asyncio.create_task(listener.run())
    try:
        await eventually(lambda: _true(states == [True]), what="the listener to connect")
        await asyncio.sleep(0.5)  # pings on the primary keep it connected
        assert states == [True]
        _set_recovery(recovery_switch, True)
        await eventually(lambda: _true(False in states), what="the listener to leave")
        _set_recovery(recovery_switch, False)
        await eventually(
            lambda: _true(states[-1] is True and len(states) >= 3), what="it to come back"
        )
        settled = len(states)
        await asyncio.sleep(0.5)
        assert len(states) == settled  # connected for good again
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def _true(value: bool) -> bool:
    return value
