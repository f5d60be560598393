"""cluster: _voltro_schedule_members (live replicas) and _voltro_schedule_leases (owners)

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-04 10:00:00

``coordination="cluster"``: each replica beats its row in ``_voltro_schedule_members``; each
schedule is owned by one live replica through its row in ``_voltro_schedule_leases`` (owner,
fencing token, expiry on the database's clock). Two new tables, nothing existing changes, so
the upgrade is safe under live replicas of the previous version (they never read them).
Self-contained like 0001 (the UTC datetime column types spelled out).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

# revision identifiers, used by Alembic.
revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
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
        "_voltro_schedule_members",
        sa.Column("replica_id", sa.String(length=200), nullable=False),
        sa.Column("heartbeat_at", _utc_datetime(), nullable=False),
        sa.Column("started_at", _utc_datetime(), nullable=False),
        sa.PrimaryKeyConstraint("replica_id"),
    )
    op.create_table(
        "_voltro_schedule_leases",
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("owner", sa.String(length=200), nullable=False),
        sa.Column("token", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", _utc_datetime(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )


def downgrade() -> None:
    op.drop_table("_voltro_schedule_leases")
    op.drop_table("_voltro_schedule_members")
