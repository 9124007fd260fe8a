"""``JOBRELAY_DATABASE_URL`` in every form it accepts, ``postgresql+psycopg://`` too, opens a
psycopg connection through ``jobrelay.libpq_url`` for ``enqueue`` (issue 24, item 13: psycopg
refuses the SQLAlchemy form with ``missing "=" after …``)."""

from __future__ import annotations

import uuid

import psycopg
import pytest

import jobrelay
from jobrelay.core.settings import Settings
from jobrelay.db.store import Store
from tests.support.consumer_kit import new_client


def forms(url: str) -> list[str]:
    rest = url.partition("://")[2]
    return [f"postgresql+psycopg://{rest}", f"postgresql://{rest}", f"postgres://{rest}"]


def test_psycopg_refuses_the_documented_form_as_it_is(database_url: str) -> None:
    assert database_url.startswith("postgresql+psycopg://")
    with pytest.raises(psycopg.ProgrammingError):
        psycopg.connect(database_url, connect_timeout=5).close()


@pytest.mark.parametrize("form", range(3))
async def test_every_accepted_form_connects_and_enqueues_through_libpq_url(
    database_url: str, store: Store, form: int
) -> None:
    client_id = await new_client(store)
    url = forms(Settings(database_url=database_url).database_url)[form]
    key = uuid.uuid4().hex
    with psycopg.connect(jobrelay.libpq_url(url), connect_timeout=5) as connection:
        job = jobrelay.enqueue(connection, client=client_id, type="demo.echo", payload={}, key=key)
    stored = await store.get_job(job.id)
    assert stored is not None and stored.idempotency_key == key


def test_another_database_is_refused_without_its_password() -> None:
    with pytest.raises(ValueError) as refused:
        jobrelay.libpq_url("mysql://root:s3cret-pw@db/app")
    assert "s3cret-pw" not in str(refused.value)
