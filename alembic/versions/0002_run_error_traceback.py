"""runs: error_traceback, the bounded traceback of a failed run beside its message

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02 10:00:00

A nullable ``TEXT`` column, so existing rows stay valid and the upgrade is a metadata-only
change on every dialect (no table rewrite). Batch mode for SQLite's downgrade (older SQLite
builds cannot ``DROP COLUMN``).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("_voltro_schedule_runs") as batch:
        batch.add_column(sa.Column("error_traceback", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("_voltro_schedule_runs") as batch:
        batch.drop_column("error_traceback")
