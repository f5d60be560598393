"""runs: an index on scheduled_at alone, for the runs list of every schedule

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02 10:00:00

``GET /_voltro/inspect/runs`` without ``name`` reads ``ORDER BY scheduled_at DESC, id DESC
LIMIT n``: with only the ``(name, …)`` indexes every dialect sorted the whole table (2.8 s at
1 M rows). The per-schedule queries already have ``ix_voltro_runs_name_scheduled``.
Self-contained on purpose, like 0001.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index(
        "ix_voltro_runs_scheduled", "_voltro_schedule_runs", ["scheduled_at"], unique=False
    )


def downgrade() -> None:
    op.drop_index("ix_voltro_runs_scheduled", table_name="_voltro_schedule_runs")
