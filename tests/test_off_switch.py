"""The off switch, ``VOLTRO_SCHEDULER_ENABLED=false``: what a user's own test suite relies on.

``TestClient(app)`` on an app whose scheduler is off must fire nothing and write no file, and
the package's routes must say why (``503 scheduler_disabled``) instead of failing obscurely.
Each test runs the same app with the switch on as a control, so the "nothing happened" half
cannot pass by accident (a schedule that would not have fired anyway, a file written elsewhere).
"""

from __future__ import annotations

import re
import time
import warnings
from pathlib import Path

import pytest
from fastapi import FastAPI
from prometheus_client.parser import text_string_to_metric_families
from support.waiting import wait_for

from fastapi_voltro_schedules import (
    ConfigurationError,
    Scheduling,
    SchedulingConfig,
    define_schedule,
    schedules_router,
)

with warnings.catch_warnings():
    # Starlette asks for its httpx fork ("httpx2") when plain httpx is installed; the warning
    # is about the test client's transport, not about anything tested here.
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
    from fastapi.testclient import TestClient


def _app(fired: list[str]) -> FastAPI:
    """An app as a user writes it: default config (so the env decides), default database."""

    async def tick(ctx: object) -> None:
        fired.append("tick")

    scheduling = Scheduling(
        [define_schedule(name="tick", cron="* * * * * *", timezone="UTC", handler=tick)]
    )
    app = FastAPI(lifespan=scheduling.lifespan)
    app.include_router(schedules_router)
    return app


def _tick_count(exposition: str) -> float:
    """``voltro_schedule_runs_total`` of "tick" in one scrape (the registry is the process's:
    the enabled control run above counted there too)."""
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            if sample.name == "voltro_schedule_runs_total" and sample.labels.get("name") == "tick":
                return sample.value
    return 0.0


def _route_calls(app: FastAPI) -> list[tuple[str, str]]:
    """Every route the app's OpenAPI lists under the package's tag, path parameters filled."""
    calls = []
    for path, operations in app.openapi()["paths"].items():
        for method, operation in operations.items():
            if "voltro schedules" in operation.get("tags", ()):
                calls.append((method.upper(), re.sub(r"\{[^}]+\}", "tick", path)))
    return calls


def test_disabled_testclient_fires_nothing_and_writes_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("VOLTRO_SCHEDULE_TRIGGER_TOKEN", "t" * 32)
    monkeypatch.setenv("VOLTRO_INSPECT_TOKEN", "i" * 32)

    # Control: the switch on — the every-second schedule fires and ./voltro.db appears.
    monkeypatch.setenv("VOLTRO_SCHEDULER_ENABLED", "true")
    fired_on: list[str] = []
    with TestClient(_app(fired_on)):
        wait_for(lambda: fired_on, interval=0.05, what="control: the enabled scheduler to fire")
    assert (tmp_path / "voltro.db").exists()
    for path in tmp_path.iterdir():
        path.unlink()

    monkeypatch.setenv("VOLTRO_SCHEDULER_ENABLED", "false")
    fired_off: list[str] = []
    headers = {"Authorization": "Bearer " + "i" * 32}
    with TestClient(_app(fired_off)) as client:
        # Nothing is armed — no engine, no timer — so nothing can fire, however long we wait.
        scheduling = client.app.state.scheduling  # type: ignore[attr-defined]
        assert scheduling.engine is None and not scheduling.fires_here
        calls = _route_calls(client.app)  # type: ignore[arg-type]
        assert len(calls) >= 5  # trigger, run status, inspect list/runs/run-now/backfill…
        # /metrics keeps answering: a scrape of a switched-off app still gets the process's
        # (and the app's HTTP) series, and no run was recorded.
        calls.remove(("GET", "/metrics"))
        scrape = client.get("/metrics")
        assert scrape.status_code == 200
        ticks_before = _tick_count(scrape.text)
        # The liveness probe answers while the process serves (a switched-off app is alive);
        # the readiness probe says why it is not ready in its own body.
        calls.remove(("GET", "/_voltro/health/live"))
        assert client.get("/_voltro/health/live").status_code == 200
        calls.remove(("GET", "/_voltro/health/ready"))
        ready = client.get("/_voltro/health/ready")
        assert ready.status_code == 503 and ready.json()["code"] == "scheduler_disabled"
        assert "VOLTRO_SCHEDULER_ENABLED" in ready.json()["detail"]
        for method, path in calls:
            response = client.request(method, path, headers=headers, json={})
            assert response.status_code == 503, (method, path, response.text)
            body = response.json()
            assert body["code"] == "scheduler_disabled", (method, path, body)
            assert body["variable"] == "VOLTRO_SCHEDULER_ENABLED"
            assert "VOLTRO_SCHEDULER_ENABLED" in body["detail"]
        # why this sleep is safe: it only lets two every-second slots pass; with nothing armed
        # (asserted above) no delay can make a tick appear
        time.sleep(2.2)
        assert _tick_count(client.get("/metrics").text) == ticks_before
    assert fired_off == []
    assert sorted(p.name for p in tmp_path.iterdir()) == []


async def test_disabled_run_opens_no_store_but_still_validates(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def noop(ctx: object) -> None:
        return None

    url = f"sqlite+aiosqlite:///{tmp_path}/never.db"
    config = SchedulingConfig(database_url=url, scheduler_enabled=False)
    scheduling = Scheduling(
        [define_schedule(name="a", cron="0 9 * * *", timezone="UTC", handler=noop)],
        config=config,
    )
    app = FastAPI()
    with caplog.at_level("INFO", logger="fastapi_voltro_schedules"):
        async with scheduling.run(app):
            assert app.state.scheduling is scheduling
            assert scheduling.store is None and scheduling.engine is None
            with pytest.raises(Exception, match="VOLTRO_SCHEDULER_ENABLED=false"):
                scheduling.running_engine()
    assert not (tmp_path / "never.db").exists()
    assert any("scheduler: disabled" in r.getMessage() for r in caplog.records)

    # A wiring mistake is still reported with the switch off: the test suite is where it shows.
    broken = Scheduling(
        [define_schedule(name="s", cron="* * * * * *", timezone="UTC", handler=noop)],
        config=SchedulingConfig(database_url=url, scheduler_enabled=False, trigger="external"),
    )
    with pytest.raises(ConfigurationError, match="seconds field"):
        async with broken.run(None):
            pass


def test_env_value_reaches_the_field(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VOLTRO_SCHEDULER_ENABLED", "false")
    assert SchedulingConfig().scheduler_enabled is False
    monkeypatch.setenv("VOLTRO_SCHEDULER_ENABLED", "0")
    assert SchedulingConfig().scheduler_enabled is False
    monkeypatch.delenv("VOLTRO_SCHEDULER_ENABLED")
    assert SchedulingConfig().scheduler_enabled is True
