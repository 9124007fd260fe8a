"""A ``postgres://`` or ``postgresql://`` URL (what Heroku, libpq and most images hand out) was
once a 30-line ``NoSuchModuleError`` traceback; Settings now takes them."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from jobrelay.core.settings import Settings


@pytest.mark.parametrize(
    "url",
    [
        "postgres://jobrelay:pw@db:5432/jobrelay",
        "postgresql://jobrelay:pw@db:5432/jobrelay",
        "postgresql+psycopg://jobrelay:pw@db:5432/jobrelay",
        "POSTGRES://jobrelay:pw@db:5432/jobrelay",
    ],
)
def test_postgres_and_postgresql_urls_are_accepted_as_the_psycopg_driver(url: str) -> None:
    settings = Settings(database_url=url)
    assert settings.database_url == "postgresql+psycopg://jobrelay:pw@db:5432/jobrelay"


def test_postgres_urls_from_the_environment_are_normalized(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("JOBRELAY_DATABASE_URL", "postgres://u:p@h/d?sslmode=require")
    assert Settings().database_url == "postgresql+psycopg://u:p@h/d?sslmode=require"


@pytest.mark.parametrize("url", ["mysql://u:sentinel-pw@h/d", "sentinel-pw", ""])
def test_a_url_of_another_database_is_one_clear_error_without_the_password(url: str) -> None:
    with pytest.raises(ValidationError) as raised:
        Settings(database_url=url)
    (error,) = raised.value.errors(include_input=False)
    assert error["loc"] == ("database_url",)
    assert "not a PostgreSQL URL" in error["msg"]
    assert "sentinel-pw" not in error["msg"]
