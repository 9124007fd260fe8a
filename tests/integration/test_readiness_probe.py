"""``/readyz`` keeps one broker connection per API process (issue 24, item 6).

It opened a new AMQP connection on every probe: a Kubernetes probe every 2 s per pod was a
connection storm on the broker. Now the probe's connection (``jobrelay.broker.health``) is
opened at the first probe, reused, opened again after the broker closed it, closed at shutdown.
Connections are counted through the RabbitMQ management API.
"""

from __future__ import annotations

import asyncio
import urllib.parse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx

from jobrelay.api.app import create_app
from jobrelay.broker.health import CONNECTION_NAME
from jobrelay.db.store import Store
from tests.conftest import MakeSettings
from tests.support import faults
from tests.support.faults import close_all_broker_connections
from tests.support.servers import Servers, management_request
from tests.support.waiting import eventually


@asynccontextmanager
async def api_app(settings: Any, store: Store) -> AsyncIterator[tuple[Any, httpx.AsyncClient]]:
    app = create_app(settings, store=store)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://jobrelay.test") as http:
            yield app, http
    finally:
        await app.state.context.broker_probe.close()


def probe_connections(servers: Servers, amqp_url: str) -> list[str]:
    """The names ("peer -> node") of the probe's connections on the test's vhost."""
    vhost = urllib.parse.unquote(urllib.parse.urlsplit(amqp_url).path.lstrip("/"))
    path = f"/api/vhosts/{urllib.parse.quote(vhost, safe='')}/connections"
    found = management_request(servers.rabbitmq_api_url, "GET", path) or []
    return [
        entry["name"]
        for entry in found
        if (entry.get("client_properties") or {}).get("connection_name") == CONNECTION_NAME
    ]


async def _broker_check(http: httpx.AsyncClient) -> str:
    return str((await http.get("/readyz")).json()["checks"]["broker"])


async def test_many_probes_share_one_broker_connection(
    servers: Servers, make_settings: MakeSettings, store: Store
) -> None:
    settings = make_settings()
    async with api_app(settings, store) as (app, http):
        assert (await http.get("/readyz")).status_code == 200

        async def one_connection() -> list[str]:
            names = probe_connections(servers, settings.amqp_url)
            return names if len(names) == 1 else []

        # The old probe closed its connection at once: none was ever listed.
        first = await eventually(one_connection, within=15, what="the probe's connection listed")
        for _ in range(3):  # 30 probes, 10 at a time
            answers = await asyncio.gather(*(http.get("/readyz") for _ in range(10)))
            assert [answer.status_code for answer in answers] == [200] * 10
        await asyncio.sleep(1.5)  # long enough for the management API to list new ones
        assert probe_connections(servers, settings.amqp_url) == first, "the same one connection"

        await app.state.context.broker_probe.close()  # as at shutdown
        await eventually(
            lambda: _none_listed(servers, settings.amqp_url), within=15, what="it closed"
        )


async def _none_listed(servers: Servers, amqp_url: str) -> bool:
    return probe_connections(servers, amqp_url) == []


async def test_a_closed_connection_is_opened_again_at_the_next_probe(
    servers: Servers, make_settings: MakeSettings, store: Store
) -> None:
    settings = make_settings()
    async with api_app(settings, store) as (_app, http):
        assert await _broker_check(http) == "ok"
        close_all_broker_connections()
        # The broker is up: the probe after the close connects again rather than fail for good.
        await eventually(lambda: _is_ok(http), within=10, what="readyz ok again")
        assert await _broker_check(http) == "ok"


async def _is_ok(http: httpx.AsyncClient) -> bool:
    return await _broker_check(http) == "ok"


async def test_readyz_says_unavailable_while_the_broker_is_stopped_and_recovers_after(
    make_settings: MakeSettings, store: Store
) -> None:
    settings = make_settings()
    async with api_app(settings, store) as (_app, http):
        assert await _broker_check(http) == "ok"
        await asyncio.to_thread(faults.rabbit_stop_app)
        try:
            answer = await http.get("/readyz")
            assert answer.status_code == 503
            assert answer.json()["checks"] == {"database": "ok", "broker": "unavailable"}
        finally:
            await asyncio.to_thread(faults.rabbit_start_app)
        await eventually(lambda: _is_ok(http), within=30, what="readyz ok after the restart")
