"""pause history: _voltro_schedule_pause_spans

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-05 19:40:00

Every paused span of every schedule (the pauses table keeps only each schedule's latest pause,
so a schedule paused twice lost its first span and the audit reported it as gaps). The spans
known so far — each schedule's latest — are copied in. Self-contained like 0001 (no package
imports).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

# revision identifiers, used by Alembic.
revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _utc_datetime() -> sa.types.TypeEngine[object]:
    return (
        sa.DateTime(timezone=True)
        .with_variant(sa.String(length=32), "sqlite")
        .with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
    )


COLUMNS = "name, paused_at, paused_by, reason, resumed_at, resumed_by"


def upgrade() -> None:
    op.create_table(
        "_voltro_schedule_pause_spans",
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("paused_at", _utc_datetime(), nullable=False),
        sa.Column("paused_by", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.String(length=500), nullable=True),
        sa.Column("resumed_at", _utc_datetime(), nullable=True),
        sa.Column("resumed_by", sa.String(length=16), nullable=True),
        sa.PrimaryKeyConstraint("name", "paused_at"),
    )
    op.execute(
        f"INSERT INTO _voltro_schedule_pause_spans ({COLUMNS}) "
        f"SELECT {COLUMNS} FROM _voltro_schedule_pauses"
    )


def downgrade() -> None:
    op.drop_table("_voltro_schedule_pause_spans")
