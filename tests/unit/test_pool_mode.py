"""Behind PgBouncer's transaction pooling (``database_pool_mode="transaction"``, docs/pgbouncer.md):
no server-side prepared statements, no session state set at connect, and LISTEN only on a
direct URL."""

from __future__ import annotations

import logging

import pytest
from sqlalchemy import event

from jobrelay.core.settings import Settings
from jobrelay.db.engine import _keep_generic_plans, connect_args, make_engine
from jobrelay.db.listener import listen_url_for

URL = "postgresql+psycopg://jobrelay:secret@pooler:6432/jobrelay"
DIRECT = "postgresql+psycopg://jobrelay:secret@db:5432/jobrelay"


def test_in_transaction_mode_psycopg_prepares_nothing() -> None:
    assert connect_args("jobrelay-api", "transaction")["prepare_threshold"] is None


def test_in_session_mode_psycopg_keeps_its_automatic_prepared_statements() -> None:
    assert "prepare_threshold" not in connect_args("jobrelay-api", "session")


def test_both_modes_name_the_application_and_bound_the_connect() -> None:
    for mode in ("session", "transaction"):
        args = connect_args("jobrelay-dispatcher", mode)
        assert args["application_name"] == "jobrelay-dispatcher"
        assert args["connect_timeout"] == 5


@pytest.mark.parametrize(
    ("mode", "sets_plan_cache_mode"), [("session", True), ("transaction", False)]
)
async def test_generic_plans_are_set_at_connect_only_in_session_mode(
    mode: str, sets_plan_cache_mode: bool
) -> None:
    engine = make_engine(URL, autocommit=True, generic_plans=True, pool_mode=mode)  # type: ignore[arg-type]
    try:
        assert event.contains(engine.sync_engine, "connect", _keep_generic_plans) is (
            sets_plan_cache_mode
        )
    finally:
        await engine.dispose()


def test_the_listen_url_wins_in_either_mode() -> None:
    for mode in ("session", "transaction"):
        settings = Settings(database_url=URL, database_pool_mode=mode, listen_database_url=DIRECT)
        assert listen_url_for(settings, "dispatcher") == DIRECT


def test_session_mode_listens_on_the_database_url() -> None:
    settings = Settings(database_url=URL, database_pool_mode="session", listen_database_url=None)
    assert listen_url_for(settings, "API") == URL


def test_transaction_mode_without_a_listen_url_does_not_listen_and_says_so_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = Settings(
        database_url=URL, database_pool_mode="transaction", listen_database_url=None
    )
    with caplog.at_level(logging.INFO, logger="jobrelay.db.listener"):
        assert listen_url_for(settings, "API") is None
    [record] = caplog.records
    assert record.levelno == logging.WARNING
    assert "JOBRELAY_LISTEN_DATABASE_URL" in record.getMessage()
    assert "polls" in record.getMessage()
    assert "secret" not in record.getMessage()
