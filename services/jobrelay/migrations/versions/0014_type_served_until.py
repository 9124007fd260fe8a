"""Which job types a running consumer serves (docs/job-types.md, "Where a job goes").

- ``job_types.served_until``: every consumer that runs a type, while it consumes the type's
  queue, pushes this forward every few seconds (``queries.MARK_TYPES_SERVED``). A job of a type
  whose ``served_until`` is past (or that no consumer ever registered) shows ``no_consumer``:
  it waits in its type's queue until a consumer for it starts.

A nullable column without a default: adding it rewrites nothing and locks ``job_types`` only
for a moment.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-05
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"  # no branch labels, no dependencies


def upgrade() -> None:
    op.add_column("job_types", sa.Column("served_until", sa.DateTime(timezone=True)))


def downgrade() -> None:
    op.drop_column("job_types", "served_until")
