"""ledger tables: _voltro_schedule_runs and _voltro_schedule_claims

Revision ID: 0001
Revises:
Create Date: 2026-11-30 08:40:48

Self-contained on purpose (no import of the package's Python types): the UTC datetime columns
are ``VARCHAR(32)`` ISO-8601 text on SQLite, ``DATETIME(6)`` on MySQL/MariaDB (microseconds
kept) and ``TIMESTAMP WITH TIME ZONE`` everywhere else — exactly what ``UTCDateTime`` in
``fastapi_voltro_schedules/models.py`` maps to, so autogenerate finds no difference.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

# revision identifiers, used by Alembic.
revision: str = "0001"
down_revision: str | Sequence[str] | None = None
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
        "_voltro_schedule_runs",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("scheduled_at", _utc_datetime(), nullable=False),
        sa.Column("fired_at", _utc_datetime(), nullable=True),
        sa.Column("finished_at", _utc_datetime(), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("trigger", sa.String(length=16), nullable=False),
        sa.Column("coordination_outcome", sa.String(length=16), nullable=False),
        sa.Column("replica_id", sa.String(length=200), nullable=False),
        sa.Column("heartbeat_at", _utc_datetime(), nullable=True),
        sa.Column("error_tag", sa.String(length=200), nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    # "last run of a schedule" and "queued rows of a schedule by scheduled_at"
    op.create_index(
        "ix_voltro_runs_name_scheduled",
        "_voltro_schedule_runs",
        ["name", "scheduled_at"],
        unique=False,
    )
    op.create_index(
        "ix_voltro_runs_name_status_scheduled",
        "_voltro_schedule_runs",
        ["name", "status", "scheduled_at"],
        unique=False,
    )
    # the retention sweep walks finished rows by age
    op.create_index(
        "ix_voltro_runs_finished", "_voltro_schedule_runs", ["finished_at"], unique=False
    )

    op.create_table(
        "_voltro_schedule_claims",
        sa.Column("key", sa.String(length=255), nullable=False),
        sa.Column("claimed_at", _utc_datetime(), nullable=False),
        sa.Column("replica_id", sa.String(length=200), nullable=False),
        sa.PrimaryKeyConstraint("key"),
    )
    op.create_index(
        "ix_voltro_claims_claimed_at", "_voltro_schedule_claims", ["claimed_at"], unique=False
    )


def downgrade() -> None:
    op.drop_index("ix_voltro_claims_claimed_at", table_name="_voltro_schedule_claims")
    op.drop_table("_voltro_schedule_claims")
    op.drop_index("ix_voltro_runs_finished", table_name="_voltro_schedule_runs")
    op.drop_index("ix_voltro_runs_name_status_scheduled", table_name="_voltro_schedule_runs")
    op.drop_index("ix_voltro_runs_name_scheduled", table_name="_voltro_schedule_runs")
    op.drop_table("_voltro_schedule_runs")
