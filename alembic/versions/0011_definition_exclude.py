"""exclusions: the days a definition version does not run

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-07 05:00:00

``define_schedule(..., exclude=...)`` / ``put_schedule(..., exclude=...)`` name days a schedule
does not run (listed dates, a holidays calendar): an excluded slot is recorded ``skipped``. The
exclusion is part of the definition, so the versions keep it (``exclude``: canonical JSON,
``NULL`` for none — the versions written before this migration read as "none", so upgrading
adds no version). Every replica rebuilds a run-time schedule's exclusions from it.
Self-contained like 0001 (no package imports).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A plain ADD COLUMN (nullable), in place on every store, so `voltro migrate --sql` prints it.
    op.add_column("_voltro_schedule_definitions", sa.Column("exclude", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("_voltro_schedule_definitions") as batch:
        batch.drop_column("exclude")
