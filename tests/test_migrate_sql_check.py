"""``voltro migrate --sql`` (the DDL for a DBA, nothing touched) and ``--check`` (exit 1 when
the database is not at head, saying what to run)."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool
from typer.testing import CliRunner, Result

from fastapi_voltro_schedules.cli import app as cli_app
from fastapi_voltro_schedules.migrations import (
    VOLTRO_TABLES,
    current_revision,
    head_revision,
    schema_matches_models,
    upgrade_to_head,
)


def voltro(*args: str) -> Result:
    return CliRunner().invoke(cli_app, ["migrate", *args])


def creates(script: str) -> set[str]:
    return {line.split()[2] for line in script.splitlines() if line.startswith("CREATE TABLE ")}


def test_check_on_sqlite_says_what_to_run_until_the_file_is_at_head(tmp_path: Path) -> None:
    db = tmp_path / "ledger.db"
    url = f"sqlite+aiosqlite:///{db}"

    missing = voltro("--check", "--database-url", url)
    assert missing.exit_code == 1, missing.output
    assert "has no ledger tables" in missing.stderr
    assert f"run `voltro migrate --database-url {url}`" in missing.stderr
    assert not db.exists()  # a check creates no file

    sqlite3.connect(db).execute("CREATE TABLE theirs (id INTEGER)").connection.close()
    empty = voltro("--check", "--database-url", url)
    assert empty.exit_code == 1
    assert f"has no ledger tables, head is {head_revision()}" in empty.stderr

    asyncio.run(upgrade_to_head(url, revision="0006"))
    behind = voltro("--check", "--database-url", url)
    assert behind.exit_code == 1
    assert f"is at revision 0006, head is {head_revision()}" in behind.stderr
    assert asyncio.run(current_revision(url)) == "0006"  # the check migrated nothing

    assert voltro("--database-url", url).exit_code == 0
    at_head = voltro("--check", "--database-url", url)
    assert at_head.exit_code == 0, at_head.output
    assert at_head.stdout.strip() == f"voltro migrate: {url} is at the newest migration"


def test_sql_prints_the_ddl_and_leaves_the_database_alone(tmp_path: Path) -> None:
    db = tmp_path / "ledger.db"
    url = f"sqlite+aiosqlite:///{db}"

    result = voltro("--sql", "--database-url", url)
    assert result.exit_code == 0, result.output
    assert creates(result.stdout) == VOLTRO_TABLES | {"_voltro_alembic_version"}
    assert not db.exists()

    sqlite3.connect(db).execute("CREATE TABLE theirs (id INTEGER)").connection.close()
    before = (db.read_bytes(), db.stat().st_mtime_ns)
    again = voltro("--sql", "--database-url", url)
    assert again.exit_code == 0
    assert again.stdout == result.stdout
    assert (db.read_bytes(), db.stat().st_mtime_ns) == before

    # What a DBA runs by hand is what `voltro migrate` would have done: the app accepts it.
    connection = sqlite3.connect(db)
    connection.executescript(result.stdout)
    connection.close()
    assert voltro("--check", "--database-url", url).exit_code == 0
    assert asyncio.run(schema_matches_models(url))


def test_sql_reaches_no_server_and_speaks_its_dialect() -> None:
    # port 1 of a host that answers nothing: the URL only picks the dialect
    pg = voltro("--sql", "--database-url", "postgresql://app:pw@127.0.0.1:1/app")
    assert pg.exit_code == 0, pg.output
    assert "TIMESTAMP WITH TIME ZONE" in pg.stdout
    my = voltro("--sql", "--database-url", "mysql://app:pw@127.0.0.1:1/app")
    assert my.exit_code == 0, my.output
    assert "DATETIME(6)" in my.stdout
    assert creates(pg.stdout) == creates(my.stdout) == VOLTRO_TABLES | {"_voltro_alembic_version"}


def test_sql_and_check_do_not_go_together(tmp_path: Path) -> None:
    result = voltro("--sql", "--check", "--database-url", f"sqlite+aiosqlite:///{tmp_path}/x.db")
    assert result.exit_code == 1
    assert "--sql and --check" in result.stderr


def test_check_and_sql_on_postgres(postgres_url: str) -> None:
    missing = voltro("--check", "--database-url", postgres_url)
    assert missing.exit_code == 1, missing.output
    assert "has no ledger tables" in missing.stderr
    assert "run `voltro migrate" in missing.stderr

    script = voltro("--sql", "--database-url", postgres_url)
    assert script.exit_code == 0, script.output
    assert voltro("--check", "--database-url", postgres_url).exit_code == 1  # --sql ran nothing

    async def apply() -> None:
        engine = create_async_engine(postgres_url, poolclass=NullPool)
        try:
            async with engine.connect() as conn:
                driver = (await conn.get_raw_connection()).driver_connection
                assert driver is not None
                await driver.execute(script.stdout)  # the script holds its own BEGIN/COMMIT
        finally:
            await engine.dispose()

    asyncio.run(apply())
    at_head = voltro("--check", "--database-url", postgres_url)
    assert at_head.exit_code == 0, at_head.output
    assert asyncio.run(schema_matches_models(postgres_url))
