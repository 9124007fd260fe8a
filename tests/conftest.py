"""Shared fixtures: real servers, a fresh database and a fresh RabbitMQ vhost per test."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import httpx
import pytest

from jobrelay.core.fingerprint import token_hash
from jobrelay.core.settings import Settings
from jobrelay.db.client_store import ClientStore
from jobrelay.db.store import Store
from tests.support import databases
from tests.support.servers import (
    NoServers,
    Servers,
    create_vhost,
    delete_vhost,
    discover,
    vhost_amqp_url,
)

if TYPE_CHECKING:
    from tests.support.system import System


@pytest.fixture(scope="session")
def servers() -> Iterator[Servers]:
    try:
        found = discover()
    except NoServers as error:
        # Fail, never skip: a test that cannot reach its servers proves nothing.
        pytest.fail(str(error), pytrace=False)
    if found.faults is not None:
        # Servers in containers: the fault helpers stop and start those instead of the
        # servers of scripts/servers.py.
        from tests.support import faults

        faults.servers_script = lambda: found.faults  # type: ignore[assignment]
    try:
        yield found
    finally:
        found.close()  # containers started for the session are removed


@pytest.fixture(scope="session")
def template_database(servers: Servers) -> Iterator[str]:
    name = databases.create_template(servers.database_url)
    yield name
    databases.admin_execute(servers.database_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def direct_database_url(servers: Servers, template_database: str) -> Iterator[str]:
    """The test's fresh database on the server itself, never through PgBouncer: for what
    needs a session of its own (LISTEN, pg_terminate_backend, its own pg_stat_activity rows)."""
    url = databases.copy_template(servers.database_url, template_database)
    yield url
    databases.drop_database(servers.database_url, url)


@pytest.fixture
def database_url(servers: Servers, direct_database_url: str) -> str:
    """The test's fresh database as jobrelay reaches it: through PgBouncer in the
    ``make test-pgbouncer`` tier (with ``pool_mode`` "transaction"), else directly."""
    return servers.through_pooler(direct_database_url)


@pytest.fixture
def pool_mode(servers: Servers) -> Literal["session", "transaction"]:
    """``Settings.database_pool_mode`` for ``database_url``."""
    return servers.pool_mode


@pytest.fixture
def amqp_url(servers: Servers) -> Iterator[str]:
    vhost = f"jobrelay-test-{uuid.uuid4().hex[:10]}"
    create_vhost(servers.rabbitmq_api_url, vhost)
    yield vhost_amqp_url(servers.amqp_url, vhost)
    delete_vhost(servers.rabbitmq_api_url, vhost)


@pytest.fixture
def settings(database_url: str, pool_mode: str, tmp_path: Any) -> Settings:
    return Settings(
        database_url=database_url,
        database_pool_mode=pool_mode,
        amqp_url="amqp://guest:guest@127.0.0.1:1/",  # tests that need the broker override it
        results_dir=tmp_path / "results",
        poll_interval_seconds=0.2,
        # The tests submit the demo types (demo.*, catalog.export), off by default in production.
        builtins=True,
    )


# The one set of fast timings for tests that run consumers, dispatchers or whole systems: leases
# expire, retries come due and shutdowns end within seconds.
FAST_TIMINGS: dict[str, Any] = {
    "lease_seconds": 2.0,
    "retry_base_seconds": 0.2,
    "retry_max_seconds": 1.0,
    "poll_interval_seconds": 0.2,
    "shutdown_grace_seconds": 5.0,
}

MakeSettings = Callable[..., Settings]


@pytest.fixture
def make_settings(settings: Settings, amqp_url: str) -> MakeSettings:
    """``make_settings(**overrides)``: the test's settings on its own RabbitMQ vhost, with the
    fast timings; a test that needs other values names them as keyword arguments."""

    def make(**overrides: Any) -> Settings:
        return settings.model_copy(update={"amqp_url": amqp_url, **FAST_TIMINGS, **overrides})

    return make


@pytest.fixture
async def store(
    database_url: str, pool_mode: Literal["session", "transaction"]
) -> AsyncIterator[Store]:
    store = Store.connect(database_url, pool_size=20, pool_mode=pool_mode)
    yield store
    await store.close()


async def make_client(store: Store, name: str, *, admin: bool = False) -> str:
    """Create a client and return its bearer token."""
    token = "jr_" + secrets.token_urlsafe(24)
    await ClientStore(store).create_client(name, token_hash(token), is_admin=admin)
    return token


@asynccontextmanager
async def api_client(settings: Settings, store: Store) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client on the API app (in process), for the given settings."""
    from jobrelay.api.app import create_app

    app = create_app(settings, store=store)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://jobrelay.test") as client:
        yield client


@pytest.fixture
async def api(settings: Settings, store: Store) -> AsyncIterator[httpx.AsyncClient]:
    async with api_client(settings, store) as client:
        yield client


@pytest.fixture
async def alice(store: Store) -> str:
    return await make_client(store, "alice")


@pytest.fixture
async def bob(store: Store) -> str:
    return await make_client(store, "bob")


@pytest.fixture
async def admin(store: Store) -> str:
    return await make_client(store, "ops", admin=True)


def auth(token: str, key: str | None = None) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {token}"}
    if key is not None:
        headers["Idempotency-Key"] = key
    return headers


@pytest.fixture
def system(
    api: httpx.AsyncClient,
    store: Store,
    alice: str,
    admin: str,
    make_settings: MakeSettings,
    tmp_path: Path,
) -> System:
    """The test's whole system, not yet running (tests/support/system.py)."""
    from tests.support.system import System  # it imports this module

    return System(make_settings, api, store, alice, admin, log_dir=tmp_path)
