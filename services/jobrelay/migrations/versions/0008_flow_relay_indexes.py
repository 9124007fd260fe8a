"""The relay's flow pick (docs/flow-control.md): two partial indexes of unpublished outbox rows.

- ``ix_outbox_client_priority_due`` (client_id, priority DESC, available_at): the recursive skip
  scan over the clients with due rows (one probe per client) and each client's pick in priority,
  then due, order (``queries.LEASE_FLOW_PICK``).
- ``ix_outbox_legacy_unpublished`` (available_at), rows without a type or a client (written
  before revision 0007, or by a process still running older code): read with their job, in due
  order. Empty once those rows are published.

Built CONCURRENTLY, outside the migration's transaction, so writes to the outbox go on.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from alembic import op

revision = "0008"
down_revision = "0007"  # no branch labels, no dependencies

INDEXES = {
    "ix_outbox_client_priority_due": (
        "ON outbox (client_id, priority DESC, available_at) WHERE published_at IS NULL"
    ),
    "ix_outbox_legacy_unpublished": (
        "ON outbox (available_at) "
        "WHERE published_at IS NULL AND (type IS NULL OR client_id IS NULL)"
    ),
}


def upgrade() -> None:
    with op.get_context().autocommit_block():
        for name, definition in INDEXES.items():
            op.execute(f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} {definition}")


def downgrade() -> None:
    with op.get_context().autocommit_block():
        for name in INDEXES:
            op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
