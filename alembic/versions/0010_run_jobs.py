"""hand-offs: the job a firing was given to, and what the row's final status means

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-07 05:00:00

A schedule whose firing is handed to a distributed job engine (Celery, arq, procrastinate —
``fastapi_voltro_schedules.handoff``) records the engine's job id on its run row
(``job_id``: derived from the slot, ``<name>@<slot>``, written before the enqueue so that a
replica taking a silent row over enqueues the same, deduplicated job), and how the row's final
status relates to the job (``job_tracking``: ``followed`` — the status is the job's — or
``handed-off`` — ``succeeded`` means enqueued). Both ``NULL`` for a firing run in process.
Self-contained like 0001 (no package imports).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Plain ADD COLUMNs (nullable), as 0009: `voltro migrate --sql` prints them on every store.
    runs = "_voltro_schedule_runs"
    op.add_column(runs, sa.Column("job_id", sa.String(250), nullable=True))
    op.add_column(runs, sa.Column("job_tracking", sa.String(16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("_voltro_schedule_runs") as batch:
        batch.drop_column("job_tracking")
        batch.drop_column("job_id")
