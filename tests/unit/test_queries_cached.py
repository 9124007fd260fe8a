"""Every named statement fits psycopg's statement cache (``db/engine.py``): a longer one would
be parsed again on every run, a cost that no test of behaviour would notice. That psycopg
really caches the longest one, through the raised limit, is asked of psycopg itself on a real
connection (tests/integration/test_statements_prepare.py)."""

from __future__ import annotations

from sqlalchemy.dialects import postgresql

from jobrelay.db import engine
from jobrelay.db.sql import STATEMENTS, clause


def test_every_named_statement_fits_the_cache() -> None:
    dialect = postgresql.psycopg.dialect()  # type: ignore[attr-defined]
    lengths = {
        name: len(str(clause(name).compile(dialect=dialect)).encode()) for name in STATEMENTS
    }
    assert len(lengths) > 50
    too_long = {n: size for n, size in lengths.items() if size > engine.STATEMENT_CACHE_LENGTH}
    assert not too_long
