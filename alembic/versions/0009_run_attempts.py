"""retries within the slot: the runs' attempt count and pending retry, the policy per version

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-07 02:00:00

A failed run of a schedule with a ``RetryPolicy`` is retried as another attempt of the same
slot, on the same row: ``attempt`` counts them (1 for a first run — the server default, so the
hot insert of a firing sends nothing new), and ``retry_at`` is the instant the next attempt is
due while the row waits between attempts (``NULL`` otherwise). Both live on the row so that a
replica that dies between attempts leaves the pending retry in the ledger for another replica
to take over.

The definition versions keep the policy (``retry_attempts``, ``retry_backoff_ms``,
``retry_max_backoff_ms``; ``NULL``: no retries), so every replica that loads a run-time
schedule retries it alike and the versions say when a declared schedule's policy changed.
Self-contained like 0001 (no package imports).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
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
    # Plain ADD COLUMNs, not a batch: every store adds a column in place (SQLite too — a NOT
    # NULL one with its default), and a batch on SQLite needs the live table to reflect, so
    # `voltro migrate --sql` (DDL for a DBA, no connection) could not print it.
    runs, definitions = "_voltro_schedule_runs", "_voltro_schedule_definitions"
    op.add_column(
        runs, sa.Column("attempt", sa.Integer(), nullable=False, server_default=sa.text("1"))
    )
    op.add_column(runs, sa.Column("retry_at", _utc_datetime(), nullable=True))
    op.add_column(definitions, sa.Column("retry_attempts", sa.Integer(), nullable=True))
    op.add_column(definitions, sa.Column("retry_backoff_ms", sa.BigInteger(), nullable=True))
    op.add_column(definitions, sa.Column("retry_max_backoff_ms", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("_voltro_schedule_definitions") as batch:
        batch.drop_column("retry_max_backoff_ms")
        batch.drop_column("retry_backoff_ms")
        batch.drop_column("retry_attempts")
    with op.batch_alter_table("_voltro_schedule_runs") as batch:
        batch.drop_column("retry_at")
        batch.drop_column("attempt")
