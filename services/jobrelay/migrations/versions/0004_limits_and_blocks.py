"""Per-client rate limits and the broker's blocks, for running under pressure (docs/overload.md).

- ``clients.rate_limit_per_second`` / ``clients.rate_limit_burst``: a client's own submission
  limit; empty, the API's ``JOBRELAY_RATE_LIMIT_*`` apply.
- ``rate_limits`` (UNLOGGED): one row per limited client, the time from which its next
  submission fits its limit (the generic cell rate algorithm, ``queries.TAKE_RATE_TOKEN``).
  Unlogged because it is written on every limited submission and worth nothing after a crash:
  PostgreSQL empties it then, and every client starts with a full burst.
- ``broker_blocks`` (UNLOGGED): each dispatcher that RabbitMQ blocks from publishing (a memory
  or disk alarm) says so here while it lasts, for ``jobrelay stats``.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"  # no branch labels, no dependencies

CLIENT_CHECKS = {
    "ck_clients_rate_limit_positive": "rate_limit_per_second > 0 AND rate_limit_burst >= 1",
    "ck_clients_rate_limit_whole": "(rate_limit_per_second IS NULL) = (rate_limit_burst IS NULL)",
}


def upgrade() -> None:
    # Nullable columns without a default: adding them rewrites nothing.
    op.add_column("clients", sa.Column("rate_limit_per_second", sa.Float(), nullable=True))
    op.add_column("clients", sa.Column("rate_limit_burst", sa.Integer(), nullable=True))
    for name, condition in CLIENT_CHECKS.items():
        # NOT VALID, then VALIDATE: the check of existing rows does not lock the table.
        op.execute(f"ALTER TABLE clients ADD CONSTRAINT {name} CHECK ({condition}) NOT VALID")
        op.execute(f"ALTER TABLE clients VALIDATE CONSTRAINT {name}")
    op.create_table(
        "rate_limits",
        sa.Column("client_id", sa.Uuid(), nullable=False),
        sa.Column("allowed_from", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("client_id", name="pk_rate_limits"),
        prefixes=["UNLOGGED"],
    )
    op.create_table(
        "broker_blocks",
        sa.Column("dispatcher", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("since", sa.DateTime(timezone=True), nullable=False),
        sa.Column("seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("dispatcher", name="pk_broker_blocks"),
        prefixes=["UNLOGGED"],
    )


def downgrade() -> None:
    op.drop_table("broker_blocks")
    op.drop_table("rate_limits")
    for name in CLIENT_CHECKS:
        op.execute(f"ALTER TABLE clients DROP CONSTRAINT {name}")
    op.drop_column("clients", "rate_limit_burst")
    op.drop_column("clients", "rate_limit_per_second")
