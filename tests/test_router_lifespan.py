"""The design card's one-liner: ``app.include_router(schedules_router)`` boots the scheduler.

In-process tests run the app's merged lifespan (``app.router.lifespan_context``) on apps built
in a module of their own, the way a user's ``main.py`` holds both ``scheduling`` and ``app``;
the last test runs such an app under real uvicorn and counts the handler's own side effects.
"""

from __future__ import annotations

import itertools
import sys
import textwrap
import types
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.servers import uvicorn_server
from support.waiting import wait_for

from fastapi_voltro_schedules import ConfigurationError

_counter = itertools.count()

PRELUDE = """
from datetime import UTC, datetime
from fastapi import FastAPI
from fastapi_voltro_schedules import Scheduling, SchedulingConfig, define_schedule
from fastapi_voltro_schedules import schedules_router
from fastapi_voltro_schedules.testing import ManualClock

async def noop(ctx):
    return None

def make(url):
    return Scheduling(
        [define_schedule(name="digest", cron="0 9 * * *", timezone="UTC", handler=noop)],
        config=SchedulingConfig(database_url=url),
        clock=ManualClock(datetime(2026, 6, 1, 12, tzinfo=UTC)),
    )
"""


@pytest.fixture
def user_module(tmp_path: Path) -> Iterator[Any]:
    """``user_module(body)``: a fresh importable module running PRELUDE then ``body``."""
    made: list[str] = []

    def build(body: str) -> types.ModuleType:
        name = f"voltro_test_user_app_{next(_counter)}"
        module = types.ModuleType(name)
        module.__dict__["URL"] = f"sqlite+aiosqlite:///{tmp_path}/{name}.db"
        sys.modules[name] = module
        made.append(name)
        exec(compile(PRELUDE + textwrap.dedent(body), f"<{name}>", "exec"), module.__dict__)
        return module

    yield build
    for name in made:
        sys.modules.pop(name, None)


def boot_lines(caplog: pytest.LogCaptureFixture) -> int:
    return sum("scheduler: starting" in r.getMessage() for r in caplog.records)


async def test_include_router_alone_starts_the_module_level_scheduling(
    user_module: Any, caplog: pytest.LogCaptureFixture
) -> None:
    mod = user_module(
        """
        scheduling = make(URL)
        app = FastAPI()
        app.include_router(schedules_router)
        """
    )
    assert not mod.scheduling.active
    with caplog.at_level("INFO", logger="fastapi_voltro_schedules"):
        async with mod.app.router.lifespan_context(mod.app):
            assert mod.scheduling.active
            assert mod.app.state.scheduling is mod.scheduling
            assert mod.scheduling.store is not None
            assert await mod.scheduling.store.last_run("digest") is None
    assert not mod.scheduling.active and mod.scheduling.store is None  # stopped with the app
    assert boot_lines(caplog) == 1


async def test_a_scheduling_built_by_a_helper_module_is_found_beside_the_app(
    user_module: Any,
) -> None:
    # Module-level means held by a module's global, wherever it was constructed: a factory
    # in a helpers module (an app's settings package, say) builds it, main.py holds it.
    helpers = user_module("")
    mod = user_module(
        f"""
        from {helpers.__name__} import make as build
        scheduling = build(URL)
        app = FastAPI()
        app.include_router(schedules_router)
        """
    )
    async with mod.app.router.lifespan_context(mod.app):
        assert mod.scheduling.active and mod.app.state.scheduling is mod.scheduling
    assert not mod.scheduling.active


@pytest.mark.parametrize("wiring", ["lifespan=", "own lifespan"])
async def test_an_app_that_wires_its_scheduling_starts_it_once(
    user_module: Any, caplog: pytest.LogCaptureFixture, wiring: str
) -> None:
    # A second module-level Scheduling: had the router tried to pick one, it would refuse.
    if wiring == "lifespan=":
        body = """
        scheduling = make(URL)
        other = make(URL + "-other")
        app = FastAPI(lifespan=scheduling.lifespan)
        app.include_router(schedules_router)
        """
    else:
        body = """
        from contextlib import asynccontextmanager
        scheduling = make(URL)
        other = make(URL + "-other")

        @asynccontextmanager
        async def lifespan(app):
            async with scheduling.run(app):
                yield

        app = FastAPI(lifespan=lifespan)
        app.include_router(schedules_router)
        """
    mod = user_module(body)
    with caplog.at_level("INFO", logger="fastapi_voltro_schedules"):
        async with mod.app.router.lifespan_context(mod.app):
            assert mod.app.state.scheduling is mod.scheduling and mod.scheduling.active
            assert not mod.other.active
    assert boot_lines(caplog) == 1


async def test_two_module_level_schedulings_and_none_wired_is_a_boot_error_naming_both(
    user_module: Any,
) -> None:
    mod = user_module(
        """
        billing = make(URL)
        reports = make(URL + "-2")
        app = FastAPI()
        app.include_router(schedules_router)
        """
    )
    with pytest.raises(ConfigurationError) as caught:
        async with mod.app.router.lifespan_context(mod.app):
            pytest.fail("the app must not start")
    message = str(caught.value)
    assert f"{mod.__name__}.billing" in message and f"{mod.__name__}.reports" in message
    assert "app = FastAPI(lifespan=billing.lifespan)" in message
    assert not mod.billing.active and not mod.reports.active


async def test_router_without_any_scheduling_in_its_module_says_so_and_starts_nothing(
    user_module: Any, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fastapi_voltro_schedules import wiring

    # Only what this test builds is known (other tests' module-level objects are not).
    monkeypatch.setattr(wiring, "_registry", weakref.WeakKeyDictionary())
    # A Scheduling that is not module-level (built inside a function) is not a candidate.
    mod = user_module(
        """
        def factory():
            return make(URL)
        kept = [factory()]
        app = FastAPI()
        app.include_router(schedules_router)
        """
    )
    assert len(wiring._registry) == 1 and wiring.module_level() == []
    with caplog.at_level("INFO", logger="fastapi_voltro_schedules"):
        async with mod.app.router.lifespan_context(mod.app):
            assert not mod.kept[0].active
    assert any("no Scheduling runs in this app" in r.getMessage() for r in caplog.records)


ONE_LINER_APP = """
from fastapi import FastAPI
from fastapi_voltro_schedules import Scheduling, schedules_router

scheduling = Scheduling.from_package("oneliner_jobs")
app = FastAPI()
app.include_router(schedules_router)
"""

TICK_CRON = """
import os
from fastapi_voltro_schedules import define_schedule

async def tick(ctx):
    with open(os.environ["ONELINER_OUT"], "a") as out:
        out.write(ctx.scheduled_at.isoformat() + "\\n")

tick_schedule = define_schedule(name="tick", cron="* * * * * *", timezone="UTC", handler=tick)
"""


@pytest.mark.slow
def test_real_uvicorn_app_with_only_include_router_fires_its_schedules(tmp_path: Path) -> None:
    (tmp_path / "oneliner_app.py").write_text(ONE_LINER_APP)
    jobs = tmp_path / "oneliner_jobs"
    jobs.mkdir()
    (jobs / "__init__.py").write_text("")
    (jobs / "tick_cron.py").write_text(TICK_CRON)
    out = tmp_path / "fired.txt"
    env = {"ONELINER_OUT": str(out), "VOLTRO_INSPECT_TOKEN": "inspect-" + "x" * 24}
    with uvicorn_server("oneliner_app:app", tmp_path, env) as server:
        wait_for(
            lambda: out.exists() and len(out.read_text().splitlines()) >= 3,
            what=f"three ticks (log: {server.log_path})",
        )
        listing = httpx.get(
            server.url + "/_voltro/inspect/schedules",
            headers={"Authorization": "Bearer inspect-" + "x" * 24},
        )
        log = server.log()
    slots = out.read_text().splitlines() if out.exists() else []
    assert len(slots) >= 3, log
    assert len(set(slots)) == len(slots), slots  # each slot once
    assert listing.status_code == 200, listing.text
    assert [s["name"] for s in listing.json()["schedules"]] == ["tick"]
    assert log.count("scheduler: starting") == 1, log
    assert (tmp_path / "voltro.db").exists()
