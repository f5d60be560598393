"""``define_handler`` (SPEC §7): code names the work a run-time schedule runs.

Validated when defined, found like schedules (``*_cron`` modules) or passed as
``Scheduling(handlers=[...])``; two handlers with one name are a ``ConfigurationError`` naming
both; a declared schedule's firing gets ``ctx.args == {}``.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from fastapi_voltro_schedules import (
    ConfigurationError,
    NamedHandler,
    ScheduleContext,
    ScheduleDefinitionError,
    Scheduling,
    define_handler,
    define_schedule,
    discover_handlers,
)
from fastapi_voltro_schedules.testing import make_context, run_once

HANDLER = """
from fastapi_voltro_schedules import define_handler

@define_handler(name="{name}")
async def work(ctx):
    return None
"""


@pytest.fixture
def make_package(tmp_path: Path) -> Iterator[object]:
    created: list[str] = []

    def make(package: str, files: dict[str, str]) -> str:
        for rel, text in files.items():
            path = tmp_path / package / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        for directory in {p for p in (tmp_path / package).rglob("*") if p.is_dir()}:
            (directory / "__init__.py").touch()
        (tmp_path / package / "__init__.py").touch()
        created.append(package)
        return package

    sys.path.insert(0, str(tmp_path))
    yield make
    sys.path.remove(str(tmp_path))
    for name in list(sys.modules):
        if any(name == p or name.startswith(p + ".") for p in created):
            del sys.modules[name]


def test_define_handler_names_an_async_or_plain_function() -> None:
    @define_handler(name="tenantReport")
    async def tenant_report(ctx: ScheduleContext) -> None:
        return None

    @define_handler(name="tenant.cleanup")
    def cleanup(ctx: ScheduleContext) -> None:
        return None

    assert isinstance(tenant_report, NamedHandler)
    assert (tenant_report.name, tenant_report.is_async) == ("tenantReport", True)
    assert (cleanup.name, cleanup.is_async) == ("tenant.cleanup", False)
    assert tenant_report.module == __name__


async def test_a_named_async_handler_given_to_define_schedule_runs_on_the_loop() -> None:
    """``define_schedule(handler=<define_handler result>)``: an ``async def`` is awaited on the
    event loop, a ``def`` runs in a worker thread — as if the function itself were given (the
    wrapper object once sent an ``async def`` through a worker thread first)."""
    threads: dict[str, threading.Thread] = {}

    @define_handler(name="onLoop")
    async def on_loop(ctx: ScheduleContext) -> None:
        threads["async"] = threading.current_thread()

    @define_handler(name="inThread")
    def in_thread(ctx: ScheduleContext) -> None:
        threads["plain"] = threading.current_thread()

    for handler in (on_loop, in_thread):
        schedule = define_schedule(
            name=handler.name, cron="* * * * *", timezone="UTC", handler=handler
        )
        await schedule(make_context(schedule, at=datetime(2026, 6, 1, tzinfo=UTC)))
    assert define_schedule(
        name="a", cron="* * * * *", timezone="UTC", handler=on_loop
    ).awaits_handler
    assert not define_schedule(
        name="p", cron="* * * * *", timezone="UTC", handler=in_thread
    ).awaits_handler
    assert threads["async"] is threading.main_thread()
    assert threads["plain"] is not threading.main_thread()


@pytest.mark.parametrize("name", ["", "has space", "-leading", "x" * 201, None, 7])
def test_a_bad_handler_name_is_refused_naming_it(name: object) -> None:
    with pytest.raises(ScheduleDefinitionError, match="not a valid handler name"):
        define_handler(name=name)  # type: ignore[arg-type]


def test_define_handler_refuses_what_is_not_a_one_argument_function() -> None:
    with pytest.raises(ScheduleDefinitionError, match="not a handler"):
        define_handler(name="x")(42)  # type: ignore[arg-type]
    with pytest.raises(ScheduleDefinitionError, match="exactly one argument"):

        @define_handler(name="y")
        async def two(ctx: ScheduleContext, extra: int) -> None:
            return None


def test_two_handlers_with_one_name_are_a_configuration_error() -> None:
    @define_handler(name="dup")
    async def one(ctx: ScheduleContext) -> None:
        return None

    @define_handler(name="dup")
    async def other(ctx: ScheduleContext) -> None:
        return None

    with pytest.raises(ConfigurationError, match='two handlers are named "dup"'):
        Scheduling(handlers=[one, other])
    # the same object twice is one handler
    assert list(Scheduling(handlers=[one, one]).handlers) == ["dup"]
    with pytest.raises(ConfigurationError, match="not a handler"):
        Scheduling(handlers=[lambda ctx: None])  # type: ignore[list-item]


def test_handlers_are_discovered_in_cron_modules(make_package) -> None:  # type: ignore[no-untyped-def]
    pkg = make_package(
        "hdl_app_one",
        {
            "tenants/reports_cron.py": HANDLER.format(name="tenantReport"),
            "tenants/helpers.py": HANDLER.format(name="notACronModule"),
        },
    )
    assert [h.name for h in discover_handlers(pkg)] == ["tenantReport"]
    scheduling = Scheduling.from_package(pkg)
    assert list(scheduling.handlers) == ["tenantReport"]


def test_discovered_handlers_with_one_name_name_both_modules(make_package) -> None:  # type: ignore[no-untyped-def]
    pkg = make_package(
        "hdl_app_two",
        {
            "a_cron.py": HANDLER.format(name="same"),
            "b_cron.py": HANDLER.format(name="same"),
        },
    )
    with pytest.raises(ConfigurationError) as caught:
        discover_handlers(pkg)
    assert "hdl_app_two.a_cron" in str(caught.value)
    assert "hdl_app_two.b_cron" in str(caught.value)


async def test_a_declared_schedules_firing_gets_empty_args() -> None:
    seen: list[dict[str, object]] = []

    async def handler(ctx: ScheduleContext) -> None:
        ctx.args["touched"] = True  # a fresh dict per firing: harmless
        seen.append(dict(ctx.args))

    schedule = define_schedule(name="plain", cron="0 9 * * *", timezone="UTC", handler=handler)
    at = datetime(2026, 3, 2, 9, tzinfo=UTC)
    await run_once(schedule, at)
    await run_once(schedule, datetime(2026, 3, 3, 9, tzinfo=UTC))
    assert seen == [{"touched": True}, {"touched": True}]
    assert make_context(schedule, at=at).args == {}
