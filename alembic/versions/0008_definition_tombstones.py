"""run-time schedules: tombstone versions and the changes read

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-06 10:00:00

A run-time schedule (``Scheduling.put_schedule``) is deleted by adding a version whose
``deleted`` is true: the version row is the tombstone, effective from the deletion (no slot of
the schedule is owed after it; the slots before it still are). ``NULL`` (every row written
before this migration) and false mean a definition. The index serves each replica's read of
the versions written since the last it saw (``Store.definitions_since``). Self-contained like
0001 (no package imports).

``max_runtime_ms`` holds a run-time schedule's watchdog bound (``NULL`` for a declared one:
its code says it), so every replica that loads the schedule runs it under the same bound.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("_voltro_schedule_definitions") as batch:
        batch.add_column(sa.Column("deleted", sa.Boolean(), nullable=True))
        batch.add_column(sa.Column("max_runtime_ms", sa.BigInteger(), nullable=True))
    op.create_index(
        "ix_voltro_definitions_effective_from",
        "_voltro_schedule_definitions",
        ["effective_from"],
    )


def downgrade() -> None:
    op.drop_index("ix_voltro_definitions_effective_from", "_voltro_schedule_definitions")
    with op.batch_alter_table("_voltro_schedule_definitions") as batch:
        batch.drop_column("max_runtime_ms")
        batch.drop_column("deleted")
