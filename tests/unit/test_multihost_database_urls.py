"""``JOBRELAY_DATABASE_URL`` with one host or several (SPEC section 18, "PostgreSQL with a
standby"): SQLAlchemy's form, libpq's form, masking, and clear errors for bad ones."""

from __future__ import annotations

import psycopg.conninfo
import pytest
from pydantic import ValidationError
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from jobrelay.core.masking import Masker
from jobrelay.core.settings import Settings, libpq_url, mask_url, normalize_database_url

MULTI = (
    "postgresql://u:p%40ss%2Cw@h1:5432,h2:5433/db?target_session_attrs=read-write&sslmode=prefer"
)
ALCHEMY = (
    "postgresql+psycopg://u:p%40ss%2Cw@/db?host=h1:5432&host=h2:5433"
    "&target_session_attrs=read-write&sslmode=prefer"
)


def connect_args(url: str) -> dict[str, object]:
    """What SQLAlchemy's psycopg dialect hands to psycopg for ``url``."""
    engine = create_async_engine("postgresql+psycopg://u@h/db")
    params = engine.dialect.create_connect_args(make_url(url))[1]
    params.pop("context", None)
    return params


@pytest.mark.parametrize("scheme", ["postgresql", "postgres", "postgresql+psycopg"])
def test_several_hosts_become_sqlalchemys_host_parameters(scheme: str) -> None:
    url = MULTI.replace("postgresql://", f"{scheme}://")
    assert normalize_database_url(url) == ALCHEMY


def test_sqlalchemy_and_libpq_hand_the_same_servers_to_psycopg() -> None:
    expected = {
        "user": "u",
        "password": "p@ss,w",
        "dbname": "db",
        "host": "h1,h2",
        "port": "5432,5433",
        "target_session_attrs": "read-write",
        "sslmode": "prefer",
    }
    assert connect_args(normalize_database_url(MULTI)) == expected
    assert psycopg.conninfo.conninfo_to_dict(libpq_url(MULTI)) == expected


def test_the_two_forms_round_trip() -> None:
    assert libpq_url(ALCHEMY) == MULTI
    assert libpq_url(normalize_database_url(MULTI)) == MULTI
    assert normalize_database_url(libpq_url(ALCHEMY)) == ALCHEMY
    assert normalize_database_url(ALCHEMY) == ALCHEMY


def test_one_host_is_left_as_written() -> None:
    url = "postgresql+psycopg://jobrelay:s%2Fcret@127.0.0.1:5432/jobrelay?application_name=x"
    assert normalize_database_url(url) == url
    assert libpq_url(url) == url.replace("postgresql+psycopg://", "postgresql://")
    socket = "postgresql:///jobrelay?host=/run/postgresql"
    assert libpq_url(socket) == socket
    assert connect_args(normalize_database_url(socket)) == {
        "dbname": "jobrelay",
        "host": "/run/postgresql",
    }


def test_several_hosts_without_target_session_attrs_look_for_the_primary() -> None:
    url = "postgres://u:p@h1,h2:5433/db"
    assert normalize_database_url(url) == (
        "postgresql+psycopg://u:p@/db?host=h1&host=h2:5433&target_session_attrs=read-write"
    )
    assert libpq_url(url) == "postgresql://u:p@h1,h2:5433/db?target_session_attrs=read-write"
    # Said out loud, libpq's own default stays.
    assert "read-write" not in libpq_url("postgres://u:p@h1,h2/db?target_session_attrs=any")
    assert "target_session_attrs" not in libpq_url("postgres://u:p@h1/db")


def test_ipv6_hosts_use_the_comma_lists_sqlalchemy_also_takes() -> None:
    url = "postgresql://u:p@[::1]:5432,h2:5433/db?target_session_attrs=read-write"
    assert normalize_database_url(url) == (
        "postgresql+psycopg://u:p@/db?host=::1,h2&port=5432,5433&target_session_attrs=read-write"
    )
    assert connect_args(normalize_database_url(url))["host"] == "::1,h2"
    assert psycopg.conninfo.conninfo_to_dict(libpq_url(url))["host"] == "::1,h2"


def test_settings_take_several_hosts_for_both_urls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBRELAY_DATABASE_URL", MULTI)
    monkeypatch.setenv("JOBRELAY_LISTEN_DATABASE_URL", MULTI.replace("postgresql:", "postgres:"))
    settings = Settings()
    assert settings.database_url == ALCHEMY
    assert settings.listen_database_url == ALCHEMY
    make_url(settings.database_url)  # parses


@pytest.mark.parametrize("url", [MULTI, ALCHEMY, "postgresql://u@h1,h2/db?password=s3cr3t&x=1"])
def test_both_forms_are_masked(url: str) -> None:
    for form in (url, normalize_database_url(url), libpq_url(url)):
        masked = mask_url(form)
        assert "p%40ss" not in masked and "s3cr3t" not in masked
        assert "***" in masked


def test_the_log_masker_finds_the_password_of_both_forms() -> None:
    for form in (MULTI, ALCHEMY):
        masker = Masker.for_urls([form])
        assert masker("password p@ss,w leaked") == "password *** leaked"


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("postgresql://u:s3cr3t@h1:5432,,h2/db", "host 2 of 3"),
        ("postgresql://u:s3cr3t@h1:5432,/db", "host 2 of 2"),
        ("postgresql://u:s3cr3t@h1:54x2,h2/db", "host 1 of 2 of the database URL has a port"),
        ("postgresql://u:s3cr3t@h1:99999/db", "the host of the database URL has a port"),
        ("postgresql://u:s3cr3t@h1,[::1/db", "host 2 of 2"),
        ("postgresql://u:s3cr3t@h1,h2/db?host=h3", "names hosts twice"),
        ("postgresql+psycopg://u:s3cr3t@/db?host=h1:1&host=h2:2&port=3", "mixes"),
        ("postgresql+psycopg://u:s3cr3t@/db?host=h1:1&host=h2:x", "is not HOST or HOST:PORT"),
        ("postgresql+psycopg://u:s3cr3t@/db?host=h1:1&host=", "host 2 of 2 in ?host="),
        ("mysql://u:s3cr3t@h1,h2/db", "not a PostgreSQL URL"),
    ],
)
def test_a_bad_url_is_a_clear_error_without_the_password(url: str, says: str) -> None:
    for parse in (normalize_database_url, libpq_url):
        with pytest.raises(ValueError) as raised:
            parse(url)
        assert says in str(raised.value)
        assert "s3cr3t" not in str(raised.value)


def test_a_bad_url_in_settings_never_shows_the_password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBRELAY_DATABASE_URL", "postgresql://u:s3cr3t@h1:5432,h2:x/db")
    with pytest.raises(ValidationError) as raised:
        Settings()
    (error,) = raised.value.errors(include_input=False)
    assert error["loc"] == ("database_url",)
    assert "port" in error["msg"] and "s3cr3t" not in error["msg"]
