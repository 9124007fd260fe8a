"""Which client may submit what (docs/submitting.md, "Which client may submit what").

- ``clients.type_patterns``: the shell-style globs of the types a client may submit; NULL for
  the default rule (every type but Django tasks and ``api=False`` types over HTTP; an admin
  client: every type).
- ``job_types.api``: false for a type a consumer registered as closed to HTTP by default (a
  Django task, a type declared ``api=False``).
- ``jobrelay_enqueue_check(...)`` (0010's) now also refuses a type the client's patterns do
  not name, as ``jobrelay.enqueue`` does: explicit patterns bind every path; the closed default
  for Django tasks and ``api=False`` types is for HTTP only. A pattern is matched with LIKE once
  its ``_`` is escaped and ``*``/``?`` are made ``%``/``_``: the patterns' alphabet
  (``core/clients.py``, ``TYPE_PATTERN``) holds no other character LIKE reads.

Two nullable or defaulted columns and a function replaced: nothing is rewritten.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-05
"""

import importlib

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from jobrelay.db.history import (
    IDEMPOTENCY_KEY_MAX_0010,
    PRIORITY_RANGE_0010,
    TYPE_NAME_MAX_0010,
)

revision = "0013"
down_revision = "0012"  # no branch labels, no dependencies

PRIORITY_MIN, PRIORITY_MAX = PRIORITY_RANGE_0010
SIGNATURE = "jobrelay_enqueue_check(text, text, jsonb, text, timestamptz, int)"

# 0010's checks of the arguments, as they were, then the client's patterns. The client is
# found as jobrelay_enqueue finds it (an id wins over a name); an unknown or disabled one is
# left to jobrelay_enqueue's unknown_client.
ENQUEUE_CHECK = f"""
CREATE OR REPLACE FUNCTION jobrelay_enqueue_check(
    client text, job_type text, payload jsonb, idempotency_key text,
    run_at timestamptz, priority int
) RETURNS void
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
DECLARE
    missing text := CASE
        WHEN client IS NULL THEN 'client'
        WHEN job_type IS NULL THEN 'type'
        WHEN payload IS NULL THEN 'payload'
        WHEN idempotency_key IS NULL THEN 'idempotency_key'
    END;
    by_id uuid;
    patterns text[];
BEGIN
    IF missing IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'null_value_not_allowed',
            MESSAGE = format('invalid_request: %s must not be NULL', missing);
    END IF;
    IF char_length(idempotency_key) NOT BETWEEN 1 AND {IDEMPOTENCY_KEY_MAX_0010}
       OR idempotency_key ~ '[^!-~]' THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = 'invalid_request: idempotency_key must be 1 to {IDEMPOTENCY_KEY_MAX_0010} '
                      'visible ASCII characters (0x21-0x7E)';
    END IF;
    IF char_length(job_type) NOT BETWEEN 1 AND {TYPE_NAME_MAX_0010} THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = 'invalid_request: type must be a text of 1 to {TYPE_NAME_MAX_0010} '
                      'characters';
    END IF;
    IF jsonb_typeof(payload) <> 'object' THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = format('invalid_request: payload must be a JSON object, not %s',
                             CASE jsonb_typeof(payload) WHEN 'array' THEN 'an array'
                                  WHEN 'null' THEN 'null' ELSE 'a ' || jsonb_typeof(payload)
                             END);
    END IF;
    IF priority NOT BETWEEN {PRIORITY_MIN} AND {PRIORITY_MAX} THEN
        RAISE EXCEPTION USING ERRCODE = 'numeric_value_out_of_range',
            MESSAGE = format('invalid_request: priority must be from {PRIORITY_MIN} to '
                             '{PRIORITY_MAX} (or NULL for the type''s default), not %s', priority);
    END IF;
    IF NOT isfinite(run_at)
       OR extract(year FROM run_at AT TIME ZONE 'UTC') NOT BETWEEN 1 AND 9999 THEN
        RAISE EXCEPTION USING ERRCODE = 'datetime_field_overflow',
            MESSAGE = 'invalid_request: run_at must be a time in the years 1 to 9999 '
                      '(or NULL for now)';
    END IF;
    IF client ~* '^[0-9a-f]{{8}}-?([0-9a-f]{{4}}-?){{3}}[0-9a-f]{{12}}$' THEN
        by_id := CAST(client AS uuid);
    END IF;
    SELECT c.type_patterns INTO patterns
    FROM clients AS c
    WHERE (c.id = by_id OR c.name = client) AND c.disabled_at IS NULL
    ORDER BY (c.id = by_id) IS TRUE DESC
    LIMIT 1;
    IF patterns IS NOT NULL AND NOT EXISTS (
        SELECT 1 FROM unnest(patterns) AS p(pattern)
        WHERE job_type LIKE replace(replace(replace(p.pattern, '_', '\\_'), '*', '%'), '?', '_')
    ) THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
            MESSAGE = format('type_not_allowed: jobrelay client %s may not submit type %s',
                             quote_literal(client), quote_literal(job_type)),
            HINT = 'Its type patterns do not name the type: jobrelay clients update NAME --types';
    END IF;
END
$$
"""


def _frozen_0010_check() -> str:
    """0010's own definition, for the downgrade (pinned again by ``_pinned_check``)."""
    revision_0010 = importlib.import_module("jobrelay.migrations.versions.0010_enqueue_function")
    definition: str = revision_0010.ENQUEUE_CHECK
    return definition


def _pinned_check() -> str:
    """0012's pin of the replaced function (``CREATE OR REPLACE`` drops a function's
    ``SET search_path``): ``pg_catalog, <schema>, pg_temp``, so no temporary table shadows
    jobrelay's."""
    revision_0012 = importlib.import_module("jobrelay.migrations.versions.0012_own_schema")
    action = "SET search_path = pg_catalog, %2$I, pg_temp"
    return str(revision_0012._each_function(("jobrelay_enqueue_check",), action))


def upgrade() -> None:
    op.add_column("clients", sa.Column("type_patterns", postgresql.ARRAY(sa.Text()), nullable=True))
    op.create_check_constraint(
        "ck_clients_type_patterns_not_empty",
        "clients",
        "cardinality(type_patterns) >= 1",
    )
    op.add_column(
        "job_types",
        sa.Column("api", sa.Boolean(), nullable=False, server_default=sa.text("true")),
    )
    op.execute(ENQUEUE_CHECK)
    op.execute(_pinned_check())


def downgrade() -> None:
    op.execute(_frozen_0010_check())
    op.execute(_pinned_check())
    op.drop_column("job_types", "api")
    op.drop_constraint("ck_clients_type_patterns_not_empty", "clients", type_="check")
    op.drop_column("clients", "type_patterns")
