"""The app's own database: one ``AsyncEngine``, shared with the scheduler's ledger.

The ledger tables (``_voltro_*``) and the app's tables live in the same database; the app
creates its own tables at startup (a real app would use its own Alembic, see docs/migrations.md).

``example_tenants`` is the truth about tenants: each row wants a run-time schedule
``tenant-report.{id}`` (``example_app/tenants/schedules.py`` keeps the two in step), whose
firings write ``example_tenant_reports``.
"""

from __future__ import annotations

import os

from sqlalchemy import Column, DateTime, Integer, MetaData, String, Table, inspect
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

metadata = MetaData()

digests = Table(
    "example_digests",
    metadata,
    Column("slot", DateTime(timezone=True), primary_key=True),
    Column("recipients", Integer, nullable=False),
    Column("sent_by", String(200), nullable=False),
)

tenants = Table(
    "example_tenants",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(200), nullable=False),
    Column("timezone", String(64), nullable=False),
    Column("report_hour", Integer, nullable=False),  # 0-23, in the tenant's own zone
)

tenant_reports = Table(
    "example_tenant_reports",
    metadata,
    # One report per tenant and slot: a second firing of the slot (Run now, a backfill) finds
    # its row there.
    Column("tenant_id", Integer, primary_key=True),
    Column("slot", DateTime(timezone=True), primary_key=True),
    Column("tenant_name", String(200), nullable=False),
    Column("run_id", String(64), nullable=False),
)


def database_url() -> str:
    return os.environ.get("VOLTRO_DATABASE_URL", "sqlite+aiosqlite:///./voltro.db")


def make_engine(url: str | None = None) -> AsyncEngine:
    return create_async_engine(url or database_url())


async def create_tables(engine: AsyncEngine) -> None:
    """Create the app's tables if they are not there yet; safe when replicas boot together.

    ``create_all`` checks, then creates: two replicas booting at once on a fresh Postgres both see
    no table and the slower one's CREATE fails (``pg_type_typname_nsp_index`` or "already exists";
    on MariaDB error 1050). The loser of that race finds the tables made and carries on; any other
    failure, or a table still missing, is raised.

    With several tables the loser may fail on the first while the winner is still creating the
    next (SQLite and MariaDB commit each CREATE on its own): it checks again, and goes on with
    the tables still missing. Each failure is a table another replica made, so a loser goes
    round at most once per table.
    """
    for attempt in range(len(metadata.tables)):
        try:
            async with engine.begin() as conn:
                await conn.run_sync(metadata.create_all)
            return
        except DBAPIError:
            async with engine.connect() as conn:
                present = await conn.run_sync(lambda sync: set(inspect(sync).get_table_names()))
            if set(metadata.tables) <= present:
                return
            if attempt == len(metadata.tables) - 1:
                raise
