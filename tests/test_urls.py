"""Database URLs: one normaliser (``urls.py``) for the config, boot and every CLI command, and
``voltro migrate --app`` migrating the database that app's ``Scheduling`` actually uses.

Each driver-less form is tested end to end against its real server: ``voltro migrate
--database-url <form>``, then a boot with ``VOLTRO_DATABASE_URL=<form>`` — which on a server
database refuses to start unless that very database was migrated.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import reset_database, run_async
from pydantic import ValidationError
from sqlalchemy import inspect, make_url
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool
from typer.testing import CliRunner

from fastapi_voltro_schedules import ConfigurationError, Scheduling, SchedulingConfig
from fastapi_voltro_schedules.cli import app as cli_app
from fastapi_voltro_schedules.migrations import head_revision
from fastapi_voltro_schedules.models import RUNS_TABLE
from fastapi_voltro_schedules.store import create_store
from fastapi_voltro_schedules.urls import normalize_database_url


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("postgres://u:pw@db:5432/app", "postgresql+asyncpg://u:pw@db:5432/app"),
        ("postgresql://u@db/app", "postgresql+asyncpg://u@db/app"),
        ("postgres+asyncpg://u@db/app", "postgresql+asyncpg://u@db/app"),
        ("postgresql+asyncpg://u@db/app", "postgresql+asyncpg://u@db/app"),
        ("mysql://root@db:3306/app", "mysql+asyncmy://root@db:3306/app"),
        ("mariadb://root@db/app", "mysql+asyncmy://root@db/app"),
        ("mysql+asyncmy://root@db/app", "mysql+asyncmy://root@db/app"),
        ("sqlite:///./voltro.db", "sqlite+aiosqlite:///./voltro.db"),
        ("sqlite:////abs/voltro.db", "sqlite+aiosqlite:////abs/voltro.db"),
        ("sqlite://", "sqlite+aiosqlite://"),
        ("sqlite+aiosqlite:///x.db", "sqlite+aiosqlite:///x.db"),
    ],
)
def test_the_driverless_forms_get_the_async_drivers(given: str, expected: str) -> None:
    url = normalize_database_url(given)
    assert url.render_as_string(hide_password=False) == expected
    assert normalize_database_url(url) == url  # idempotent
    assert SchedulingConfig(database_url=given).database_url == expected  # config: same rule


@pytest.mark.parametrize(
    ("given", "fragment"),
    [
        ("postgresql+psycopg2://u:pw9@h/db", "postgresql+psycopg2 is a synchronous driver"),
        ("mysql+pymysql://u:pw9@h/db", "use mysql+asyncmy://"),
        ("oracle://u:pw9@h/db", 'backend "oracle" is not supported'),
        ("not a url pw9", "cannot parse the database URL"),
    ],
)
def test_unusable_urls_are_refused_with_the_fix_and_without_the_password(
    given: str, fragment: str
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        normalize_database_url(given)
    assert fragment in str(caught.value) and "pw9" not in str(caught.value)
    result = CliRunner().invoke(cli_app, ["migrate", "--database-url", given])
    assert result.exit_code == 1
    assert fragment in result.stderr and "pw9" not in result.output
    with pytest.raises(ValidationError) as refused:  # the config: same rule, same secrecy
        SchedulingConfig(database_url=given)
    assert "database_url" in str(refused.value) and fragment in str(refused.value)
    assert "pw9" not in str(refused.value)


def _forms(url: str, backends: tuple[str, ...]) -> list[str]:
    """``url`` rewritten with each driver-less backend name."""
    parsed = make_url(url)
    return [parsed.set(drivername=b).render_as_string(hide_password=False) for b in backends]


def _tables(url: str) -> set[str]:
    async def read() -> set[str]:
        engine = create_async_engine(normalize_database_url(url), poolclass=NullPool)
        try:
            async with engine.connect() as conn:
                return set(await conn.run_sync(lambda c: inspect(c).get_table_names()))
        finally:
            await engine.dispose()

    return run_async(read())


def _drop_ledger(url: str) -> None:
    """Every table of ours (and the version table), as the fixtures leave them."""
    run_async(reset_database(normalize_database_url(url)))


def _migrate_then_boot(form: str, monkeypatch: pytest.MonkeyPatch) -> None:
    result = CliRunner().invoke(cli_app, ["migrate", "--database-url", form])
    assert result.exit_code == 0, result.output
    assert f"at {head_revision()}" in result.stdout
    monkeypatch.setenv("VOLTRO_DATABASE_URL", form)
    scheduling = Scheduling([])  # the config reads the env, as a deployed app does

    async def boot() -> None:
        async with scheduling.run(None, arm=False):
            assert scheduling.store is not None
            assert await scheduling.store.last_run("nothing") is None

    run_async(boot())
    assert RUNS_TABLE in _tables(form)


def test_each_postgres_form_migrates_and_boots(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for form in _forms(postgres_url, ("postgres", "postgresql")):
        _drop_ledger(postgres_url)
        _migrate_then_boot(form, monkeypatch)


def test_each_mariadb_form_migrates_and_boots(
    mariadb_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for form in _forms(mariadb_url, ("mysql", "mariadb")):
        _drop_ledger(mariadb_url)
        _migrate_then_boot(form, monkeypatch)


def test_the_sqlite_form_migrates_and_boots(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _migrate_then_boot(f"sqlite:///{tmp_path}/plain.db", monkeypatch)
    assert (tmp_path / "plain.db").exists()


def test_create_store_takes_a_driverless_url(tmp_path: Path) -> None:
    async def use() -> None:
        store = create_store(f"sqlite:///{tmp_path}/s.db")
        try:
            assert store.engine.url.drivername == "sqlite+aiosqlite"  # type: ignore[attr-defined]
        finally:
            await store.dispose()

    run_async(use())


@pytest.fixture
def app_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Where ``--app`` modules live for these tests; removed from ``sys.modules`` after."""
    monkeypatch.chdir(tmp_path)
    before = set(sys.modules)
    yield str(tmp_path)
    for name in set(sys.modules) - before:
        if name.startswith("voltro_url_app"):
            sys.modules.pop(name, None)


def test_migrate_app_uses_the_url_set_in_code(
    app_module: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = Path(app_module) / "data" / "in-code.db"
    (Path(app_module) / "voltro_url_app_sqlite.py").write_text(
        "from fastapi import FastAPI\n"
        "from fastapi_voltro_schedules import Scheduling, SchedulingConfig\n"
        f"scheduling = Scheduling([], config=SchedulingConfig(database_url='sqlite:///{target}'))\n"
        "app = FastAPI(lifespan=scheduling.lifespan)\n"
    )
    monkeypatch.delenv("VOLTRO_DATABASE_URL", raising=False)
    result = CliRunner().invoke(cli_app, ["migrate", "--app", "voltro_url_app_sqlite:app"])
    assert result.exit_code == 0, result.output
    assert RUNS_TABLE in _tables(f"sqlite:///{target}")
    assert not (Path(app_module) / "voltro.db").exists()  # not the default file
    assert str(target) in result.stderr  # says which database it migrated


def test_migrate_app_uses_the_server_url_set_in_code_over_the_env(
    app_module: str, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    in_code = _forms(postgres_url, ("postgres",))[0]
    (Path(app_module) / "voltro_url_app_pg.py").write_text(
        "from fastapi import FastAPI\n"
        "from fastapi_voltro_schedules import Scheduling, SchedulingConfig, schedules_router\n"
        f"scheduling = Scheduling([], config=SchedulingConfig(database_url={in_code!r}))\n"
        "app = FastAPI()\n"
        "app.include_router(schedules_router)\n"
    )
    monkeypatch.setenv("VOLTRO_DATABASE_URL", f"sqlite:///{app_module}/env.db")
    result = CliRunner().invoke(cli_app, ["migrate", "--app", "voltro_url_app_pg:app"])
    assert result.exit_code == 0, result.output
    assert "(postgresql)" in result.stdout
    assert RUNS_TABLE in _tables(postgres_url)
    assert not (Path(app_module) / "env.db").exists()
    assert "ignoring" in result.stderr  # the env URL differs: said, not silently dropped


def test_migrate_app_with_a_shared_engine_migrates_that_engine(
    app_module: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = Path(app_module) / "shared.db"
    (Path(app_module) / "voltro_url_app_engine.py").write_text(
        "from fastapi import FastAPI\n"
        "from sqlalchemy.ext.asyncio import create_async_engine\n"
        "from fastapi_voltro_schedules import Scheduling\n"
        f"engine = create_async_engine('sqlite+aiosqlite:///{target}')\n"
        "scheduling = Scheduling([], engine=engine)\n"
        "app = FastAPI(lifespan=scheduling.lifespan)\n"
    )
    monkeypatch.delenv("VOLTRO_DATABASE_URL", raising=False)
    result = CliRunner().invoke(cli_app, ["migrate", "--app", "voltro_url_app_engine:app"])
    assert result.exit_code == 0, result.output
    assert RUNS_TABLE in _tables(f"sqlite:///{target}")
    assert not (Path(app_module) / "voltro.db").exists()


def test_migrate_app_without_a_scheduling_says_how_to_point_it(app_module: str) -> None:
    (Path(app_module) / "voltro_url_app_none.py").write_text("app = object()\n")
    result = CliRunner().invoke(cli_app, ["migrate", "--app", "voltro_url_app_none:app"])
    assert result.exit_code == 1
    assert "no Scheduling" in result.stderr and "--database-url" in result.stderr
    assert not (Path(app_module) / "voltro.db").exists()
