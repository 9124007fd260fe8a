"""``jobrelay_enqueue(..., sequence_key)``: the SQL function takes a sequence
(docs/submitting.md, "From any language: SQL"; docs/flow-control.md, "Sequences").

- ``jobrelay_enqueue(client, type, payload, idempotency_key, run_at, priority, sequence_key)``:
  0018's function with a seventh argument, ``sequence_key`` (DEFAULT NULL, so every call of
  the six-argument function reads as before, by position or by name). Given, the function takes
  the sequence's advisory lock as ``db/policed_accept.py`` names it, then, in a statement of its
  own (a VOLATILE plpgsql function's statements each take a new snapshot under READ COMMITTED,
  so it sees every job an accept of the key committed before the lock was granted), whether a
  job of the sequence has not yet succeeded or been cancelled: the new job then waits
  (``sequence_waits``, no outbox row) for the release that ends the one ahead. The lock is held
  until the caller's transaction ends. Without it, the function runs the statements it ran.
- ``jobrelay_request_hash(type, payload, run_at, priority, sequence_key)``: the five-argument
  twin of 0010's hash, with ``"sequence_key"`` at its sorted place, as
  ``core/fingerprint.py`` writes ``Flow.given()``: one key used from Python and from SQL with
  the same sequence is one request.

The six-argument function is dropped, not kept beside: two functions whose defaults both take
four arguments would make such a call ambiguous. The downgrade puts 0018's back.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-05
"""

import importlib

from alembic import op

from jobrelay.db.history import FLOW_KEY_MAX_0020

revision = "0020"
down_revision = "0019"  # no branch labels, no dependencies

_ENQUEUE_0010 = importlib.import_module("jobrelay.migrations.versions.0010_enqueue_function")
_ENQUEUE_0018 = importlib.import_module("jobrelay.migrations.versions.0018_lean_journal")
_OWN_SCHEMA_0012 = importlib.import_module("jobrelay.migrations.versions.0012_own_schema")

SIGNATURE_0018 = "jobrelay_enqueue(text, text, jsonb, text, timestamptz, int)"
SIGNATURE = "jobrelay_enqueue(text, text, jsonb, text, timestamptz, int, text)"
HASH_SIGNATURE = "jobrelay_request_hash(text, jsonb, timestamptz, int, text)"


def _replaced(text: str, old: str, new: str) -> str:
    """``text`` with its one ``old`` replaced: an earlier revision's definition, edited; it
    fails loudly when that definition is not the one this revision was written against."""
    assert text.count(old) == 1, f"{old!r}: the earlier definition changed; update 0020"
    return text.replace(old, new)


def _request_hash() -> str:
    """0010's hash with a fifth argument, ``sequence_key``, between schedule and type (the
    sorted order of ``request_hash_of_json``'s fields)."""
    definition = str(_ENQUEUE_0010.REQUEST_HASH)
    definition = _replaced(
        definition,
        "priority int\n) RETURNS text",
        "priority int, sequence_key text\n) RETURNS text",
    )
    return _replaced(
        definition,
        "           END\n        || ',\"type\":'",
        "           END\n"
        "        || CASE WHEN sequence_key IS NULL THEN '' ELSE\n"
        "               ',\"sequence_key\":' || to_json(sequence_key)::text END\n"
        "        || ',\"type\":'",
    )


# The steps 0018's body gains, each replacing one passage of it.
_SEQUENCE_EDITS = (
    (
        "    priority int DEFAULT NULL\n) RETURNS uuid",
        "    priority int DEFAULT NULL,\n    sequence_key text DEFAULT NULL\n) RETURNS uuid",
    ),
    ("    held record;\n", "    held record;\n    waits boolean := false;\n"),
    # The hash with the sequence (the five-argument twin gives the six-argument one's hash
    # when it is NULL); the check of the key; the lock, then the read of the sequence in a
    # statement of its own.
    (
        "jobrelay_enqueue.priority);\n    FOR tried IN 1..3 LOOP\n",
        "jobrelay_enqueue.priority,\n"
        "                                         jobrelay_enqueue.sequence_key);\n"
        "    IF jobrelay_enqueue.sequence_key IS NOT NULL THEN\n"
        "        IF char_length(jobrelay_enqueue.sequence_key) NOT BETWEEN 1 AND "
        f"{FLOW_KEY_MAX_0020} THEN\n"
        "            RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',\n"
        "                MESSAGE = 'invalid_request: sequence_key must be a text of 1 to "
        f"{FLOW_KEY_MAX_0020} characters';\n"
        "        END IF;\n"
        "        PERFORM pg_advisory_xact_lock(hashtextextended(concat_ws(E'\\x1f', 'sequence',\n"
        "            the_client.id::text, jobrelay_enqueue.sequence_key), 41));\n"
        "        waits := EXISTS (\n"
        "            SELECT 1 FROM jobs a\n"
        "            WHERE a.client_id = the_client.id\n"
        "              AND a.sequence_key = jobrelay_enqueue.sequence_key\n"
        "              AND a.state NOT IN ('succeeded', 'cancelled'));\n"
        "    END IF;\n"
        "    FOR tried IN 1..3 LOOP\n",
    ),
    (
        "                              max_attempts, run_at, available_at, priority)\n",
        "                              max_attempts, run_at, available_at, priority,\n"
        "                              sequence_key, sequence_no, sequence_waits)\n",
    ),
    (
        "                    coalesce(jobrelay_enqueue.priority, defaults.priority))\n",
        "                    coalesce(jobrelay_enqueue.priority, defaults.priority),\n"
        "                    jobrelay_enqueue.sequence_key,\n"
        "                    CASE WHEN jobrelay_enqueue.sequence_key IS NOT NULL\n"
        "                         THEN nextval('job_sequence_order') END,\n"
        "                    waits)\n",
    ),
    (
        "            RETURNING id, available_at, priority, client_id, type\n",
        "            RETURNING id, available_at, priority, client_id, type, sequence_waits\n",
    ),
    (
        "            SELECT id, available_at, priority, client_id, type FROM j\n",
        "            SELECT id, available_at, priority, client_id, type FROM j "
        "WHERE NOT sequence_waits\n",
    ),
)


def _enqueue() -> str:
    """0018's ``jobrelay_enqueue`` with the sequence (``_SEQUENCE_EDITS``)."""
    definition = str(_ENQUEUE_0018._enqueue_without_received_row())
    for old, new in _SEQUENCE_EDITS:
        definition = _replaced(definition, old, new)
    return definition


def _pinned(names: tuple[str, ...]) -> str:
    """0012's pin of every function so named (``CREATE`` gives a new function none)."""
    return str(
        _OWN_SCHEMA_0012._each_function(names, "SET search_path = pg_catalog, %2$I, pg_temp")
    )


ENQUEUE_COMMENT = _replaced(
    str(_ENQUEUE_0010.ENQUEUE_COMMENT),
    SIGNATURE_0018,
    SIGNATURE,
).replace("under idempotency_key, ", "under idempotency_key (in the order of sequence_key), ")


def upgrade() -> None:
    op.execute(_request_hash())
    op.execute(f"DROP FUNCTION {SIGNATURE_0018}")
    op.execute(_enqueue())
    op.execute(_pinned(("jobrelay_request_hash", "jobrelay_enqueue")))
    op.execute(ENQUEUE_COMMENT)


def downgrade() -> None:
    op.execute(f"DROP FUNCTION {SIGNATURE}")
    op.execute(f"DROP FUNCTION {HASH_SIGNATURE}")
    op.execute(_ENQUEUE_0018._enqueue_without_received_row())
    op.execute(_ENQUEUE_0018._pinned_enqueue())
    op.execute(_ENQUEUE_0010.ENQUEUE_COMMENT)
