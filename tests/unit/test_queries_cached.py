"""Every named statement fits psycopg's statement cache (``db/engine.py``): a longer one would
be parsed again on every run, a cost that no test of behaviour would notice."""

from __future__ import annotations

from psycopg import _queries as psycopg_queries
from sqlalchemy import TextClause
from sqlalchemy.dialects import postgresql

from jobrelay.db import engine, queries


def test_the_cache_limit_is_raised_where_psycopg_reads_it() -> None:
    # A psycopg upgrade that renamed the constant would leave the raise without effect.
    assert psycopg_queries.MAX_CACHED_STATEMENT_LENGTH >= engine.STATEMENT_CACHE_LENGTH


def test_every_named_statement_fits_the_cache() -> None:
    dialect = postgresql.psycopg.dialect()  # type: ignore[attr-defined]
    lengths = {
        name: len(str(value.compile(dialect=dialect)).encode())
        for name, value in vars(queries).items()
        if isinstance(value, TextClause)
    }
    assert len(lengths) > 50
    too_long = {n: size for n, size in lengths.items() if size > engine.STATEMENT_CACHE_LENGTH}
    assert not too_long
