"""The API's context (``api/context.py``) is wired once per app, by one function: in production
by the lifespan at startup, on the store it opens; in the tests by ``create_app``, on the store
it is given. The routes read that one value (``context_of``)."""

from __future__ import annotations

import uuid

import httpx

from jobrelay.api.app import create_app
from jobrelay.api.context import ApiContext
from jobrelay.core.settings import Settings
from jobrelay.db.store import Store
from tests.conftest import auth


async def test_the_lifespan_wires_the_context_at_startup_on_a_store_of_its_own(
    settings: Settings, store: Store, alice: str
) -> None:
    app = create_app(settings)
    assert not hasattr(app.state, "context"), "nothing connects before startup"
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://jobrelay.test") as http,
    ):
        wired: ApiContext = app.state.context
        assert wired.store is not store and wired.settings is settings
        body = {"type": "demo.sleep", "payload": {"seconds": 0}}
        submitted = await http.post("/v1/jobs", json=body, headers=auth(alice, "context-1"))
        assert submitted.status_code == 202, submitted.text
        assert (await http.get("/readyz")).json()["checks"]["database"] == "ok"
    # Through the lifespan's own store, into the database the test reads.
    assert await store.get_job(uuid.UUID(submitted.json()["id"])) is not None


def test_an_app_given_a_store_is_wired_at_once_on_that_store(
    settings: Settings, store: Store
) -> None:
    first, second = create_app(settings, store=store), create_app(settings, store=store)
    wired: ApiContext = first.state.context
    assert wired.store is store and wired.auth is not second.state.context.auth  # one per app
