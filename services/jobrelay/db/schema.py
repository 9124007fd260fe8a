"""Another schema than ``jobrelay``: the statements name it in place of the default.

Every statement names jobrelay's objects qualified with the default schema, as written in
db/sql/*.sql (``FROM jobrelay.jobs``), so that it never depends on a session's search_path
(PgBouncer in transaction mode allows no session SET and no startup ``options``; an
application's own connection, in ``enqueue`` or Django, has the application's path). With
``JOBRELAY_DATABASE_SCHEMA`` set to another name, each distinct statement text is translated
once (cached) where it is executed. Only jobrelay's own qualified objects are renamed, from
the list of them: a string such as the queue name ``'jobrelay.jobs.default'`` is left alone.
A default install installs nothing and pays nothing.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

from sqlalchemy import TextClause, event
from sqlalchemy.engine import Engine

from jobrelay.core.settings import DEFAULT_SCHEMA
from jobrelay.db.history import FUNCTIONS_0011, FUNCTIONS_0016, VIEWS_0018
from jobrelay.db.tables import metadata

# The objects statements name: every table of the models, every function and view of the
# migrations.
OBJECTS = frozenset(
    {table.name for table in metadata.tables.values()}
    | {*FUNCTIONS_0011, *FUNCTIONS_0016, *VIEWS_0018}
)

# The sequences statements name, always as a quoted regclass: the journal's ids, drawn when a
# job is leased for its ``published`` entry (db/sql/relay.sql, ``journal_id``), and the order
# of acceptance of a sequence's jobs (db/sql/policies.sql, ACCEPT_POLICED_JOB).
SEQUENCES = ("job_events_id_seq", "job_sequence_order")

Translate = Callable[[str], str]


@functools.cache
def translator(schema: str) -> Translate | None:
    """The translation of statement texts for ``schema``; None for the default schema."""
    if schema == DEFAULT_SCHEMA:
        return None
    names = "|".join(sorted(OBJECTS, key=len, reverse=True))
    # ``jobrelay.<object>`` as a whole identifier: not inside a longer one (``x_jobrelay.jobs``),
    # not a prefix of a dotted string (``jobrelay.jobs.default``), not quoted (``'jobrelay.jobs'``).
    pattern = re.compile(rf"(?<![\w.'\"$]){DEFAULT_SCHEMA}\.(?=(?:{names})\b(?![.'\"$]))")
    replacement = f"{schema}."
    # A sequence is named as a regclass literal (``nextval('jobrelay.job_events_id_seq')``).
    sequences = "|".join(SEQUENCES)
    sequence_literal = re.compile(rf"'{DEFAULT_SCHEMA}\.(?=(?:{sequences})')")

    @functools.lru_cache(maxsize=4096)
    def translate(sql: str) -> str:
        return sequence_literal.sub(f"'{schema}.", pattern.sub(replacement, sql))

    return translate


def in_schema(statement: TextClause, schema: str) -> TextClause:
    """``statement`` naming ``schema``'s objects (the same object for the default), for a
    connection jobrelay does not own (the application's SQLAlchemy connection in ``enqueue``)."""
    translate = translator(schema)
    return statement if translate is None else _translated_clause(statement, schema)


@functools.lru_cache(maxsize=1024)
def _translated_clause(statement: TextClause, schema: str) -> TextClause:
    translate = translator(schema)
    assert translate is not None
    clone = statement._generate()
    clone.text = translate(statement.text)
    return clone


def install(engine: Engine, schema: str) -> None:
    """Translate every statement ``engine`` runs into ``schema`` (nothing for the default)."""
    translate = translator(schema)
    if translate is None:
        return

    def before_cursor_execute(
        _connection: Any,
        _cursor: Any,
        statement: str,
        parameters: Any,
        _context: Any,
        _executemany: bool,
    ) -> tuple[str, Any]:
        return translate(statement), parameters

    event.listen(engine, "before_cursor_execute", before_cursor_execute, retval=True)
