"""schedule pauses: _voltro_schedule_pauses

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01 10:00:00

One row per schedule an operator paused: who (the token role) and when, an optional reason,
and — once resumed — when and by whom. Self-contained like 0001 (no package imports).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

# revision identifiers, used by Alembic.
revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _utc_datetime() -> sa.types.TypeEngine[object]:
    return (
        sa.DateTime(timezone=True)
        .with_variant(sa.String(length=32), "sqlite")
        .with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
    )


def upgrade() -> None:
    op.create_table(
        "_voltro_schedule_pauses",
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("paused_at", _utc_datetime(), nullable=False),
        sa.Column("paused_by", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.String(length=500), nullable=True),
        sa.Column("resumed_at", _utc_datetime(), nullable=True),
        sa.Column("resumed_by", sa.String(length=16), nullable=True),
        sa.PrimaryKeyConstraint("name"),
    )


def downgrade() -> None:
    op.drop_table("_voltro_schedule_pauses")
