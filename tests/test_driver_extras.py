"""A server URL without its driver installed names the extra to install, wherever the ledger's
engine is made: the store at boot, ``voltro migrate``, the migrations from code."""

from __future__ import annotations

import sys

import pytest
from fastapi import FastAPI
from typer.testing import CliRunner

from fastapi_voltro_schedules import Scheduling, SchedulingConfig
from fastapi_voltro_schedules.cli import app as cli_app
from fastapi_voltro_schedules.errors import ConfigurationError
from fastapi_voltro_schedules.migrations import upgrade_to_head
from fastapi_voltro_schedules.store.engines import make_engine

CASES = [
    ("asyncpg", "postgres://app:s3cret-pw@127.0.0.1:1/app", "postgres"),
    ("asyncmy", "mysql://app:s3cret-pw@127.0.0.1:1/app", "mysql"),
]


@pytest.fixture(params=CASES, ids=[c[2] for c in CASES])
def missing_driver(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> tuple[str, str]:
    module, url, extra = request.param
    monkeypatch.setitem(sys.modules, module, None)  # `import asyncpg` now raises ImportError
    return url, f"pip install 'fastapi-voltro-schedules[{extra}]'"


def test_the_store_engine_names_the_extra(missing_driver: tuple[str, str]) -> None:
    url, remedy = missing_driver
    with pytest.raises(ConfigurationError) as raised:
        make_engine(url)
    assert remedy in str(raised.value)
    assert "s3cret-pw" not in str(raised.value)


async def test_boot_names_the_extra(missing_driver: tuple[str, str]) -> None:
    url, remedy = missing_driver
    scheduling = Scheduling([], config=SchedulingConfig(database_url=url))
    with pytest.raises(ConfigurationError, match=remedy.replace("[", r"\[").replace("]", r"\]")):
        async with scheduling.run(FastAPI()):
            pass


async def test_migrations_from_code_name_the_extra(missing_driver: tuple[str, str]) -> None:
    url, remedy = missing_driver
    with pytest.raises(ConfigurationError) as raised:
        await upgrade_to_head(url)
    assert remedy in str(raised.value)


def test_voltro_migrate_names_the_extra(missing_driver: tuple[str, str]) -> None:
    url, remedy = missing_driver
    result = CliRunner().invoke(cli_app, ["migrate", "--database-url", url])
    assert result.exit_code == 1
    assert remedy in result.stderr
    assert "s3cret-pw" not in result.output
