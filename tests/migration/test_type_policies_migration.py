"""Before revision 0019 (no throttle columns in ``job_types`` or ``type_limits``) a consumer still
registers its types and an API still reads them, with no throttle: the code's throttles and the
runtime ones wait for ``jobrelay migrate`` (db/type_store.py), said once in a warning."""

from __future__ import annotations

import logging

import pytest
from alembic import command
from pydantic import BaseModel

from jobrelay.core.flow import Throttle
from jobrelay.core.registry import Registry
from jobrelay.core.type_catalog import RegisteredTypes, registrable_types
from jobrelay.db.store import Store
from jobrelay.db.type_store import POLICIES_NOT_MIGRATED, PgTypeStore
from tests.support import databases


class Sms(BaseModel):
    phone: str


def sms_registry() -> Registry:
    registry = Registry()
    registry.job(
        "sms.send", Sms, throttle="3/m", unique=lambda payload: payload.phone, unique_for=60
    )(lambda context, payload: {})
    return registry


async def test_before_0019_types_register_and_read_without_their_throttle(
    empty_database: str, caplog: pytest.LogCaptureFixture
) -> None:
    command.upgrade(databases.alembic_config(empty_database), "0018")
    store = Store.connect(empty_database, pool_size=2)
    try:
        types = PgTypeStore(store)
        registered = registrable_types(sms_registry(), by="test:1")
        assert registered[0].throttle == Throttle(3, 60)

        with caplog.at_level(logging.WARNING):
            await types.register_types(registered)
            await types.register_types(registered)
        catalog = await RegisteredTypes(types, Registry()).catalog_for(["sms.send"])

        assert "sms.send" in catalog
        assert catalog.throttle_for("sms.send") is None
        assert await types.runtime_throttles() == {}
        said = [r.getMessage() for r in caplog.records]
        assert said.count(POLICIES_NOT_MIGRATED) == 1
    finally:
        await store.close()


async def test_from_0019_a_registered_type_carries_its_throttle_and_window(
    empty_database: str,
) -> None:
    command.upgrade(databases.alembic_config(empty_database), "0019")
    store = Store.connect(empty_database, pool_size=2)
    try:
        types = PgTypeStore(store)
        await types.register_types(registrable_types(sms_registry(), by="test:1"))

        (row,) = await types.registered_types()

        assert (row.throttle, row.unique_for) == (Throttle(3, 60), 60.0)
    finally:
        await store.close()
