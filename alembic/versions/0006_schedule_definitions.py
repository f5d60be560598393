"""schedule definitions: _voltro_schedule_definitions

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-05 10:00:00

One row per version of a schedule's definition (cron, zone, trigger, overlap, backfill,
handler, args) with the instant it took effect: catch-up, ``missed`` accounting and the audit
start each version there. Self-contained like 0001 (no package imports).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

# revision identifiers, used by Alembic.
revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
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
        "_voltro_schedule_definitions",
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("version", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("cron", sa.String(length=200), nullable=False),
        sa.Column("timezone", sa.String(length=64), nullable=False),
        sa.Column("trigger", sa.String(length=16), nullable=False),
        sa.Column("on_overlap", sa.String(length=16), nullable=False),
        sa.Column("backfill", sa.String(length=16), nullable=False),
        sa.Column("handler", sa.String(length=500), nullable=False),
        sa.Column("args", sa.Text(), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("effective_from", _utc_datetime(), nullable=False),
        sa.Column("recorded_by", sa.String(length=200), nullable=False),
        sa.PrimaryKeyConstraint("name", "version"),
    )


def downgrade() -> None:
    op.drop_table("_voltro_schedule_definitions")
