"""a ledger that stays small: hourly rollups of successes, and the definitions' record policy

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-07 15:00:00

``define_schedule(..., record="failures")`` / ``put_schedule(..., record=...)`` keep a ledger
row only for the runs that did not succeed: a success of a clock-driven run is counted in
``_voltro_schedule_rollups`` — ``(name, hour)``: how many, their summed and longest run time —
in the transaction that deletes its row, once a newer success of the schedule replaces it.
The policy is part of the definition, so the versions keep it (``record``: ``NULL`` reads as
``all`` — the versions written before this migration add no version on upgrade).
Self-contained like 0001 (no package imports).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0013"
down_revision: str | Sequence[str] | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _utc_datetime() -> sa.types.TypeEngine[object]:
    # what models.UTCDateTime stores: ISO text on SQLite, DATETIME(6) on MySQL, timestamptz
    from sqlalchemy.dialects import mysql

    return (
        sa.DateTime(timezone=True)
        .with_variant(sa.String(32), "sqlite")
        .with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
    )


def upgrade() -> None:
    op.create_table(
        "_voltro_schedule_rollups",
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("hour", _utc_datetime(), nullable=False),
        sa.Column("succeeded", sa.BigInteger(), nullable=False),
        sa.Column("total_ms", sa.BigInteger(), nullable=False),
        sa.Column("max_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name", "hour"),
    )
    # A plain ADD COLUMN (nullable), in place on every store, so `voltro migrate --sql` prints it.
    op.add_column(
        "_voltro_schedule_definitions", sa.Column("record", sa.String(16), nullable=True)
    )


def downgrade() -> None:
    with op.batch_alter_table("_voltro_schedule_definitions") as batch:
        batch.drop_column("record")
    op.drop_table("_voltro_schedule_rollups")
