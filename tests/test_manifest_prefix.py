"""Generated manifests honour the prefix the app mounts ``schedules_router`` under: the URLs
they call are the routes the app serves."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
import yaml
from support.servers import REPO
from typer.testing import CliRunner

from fastapi_voltro_schedules.cli import app as cli_app
from fastapi_voltro_schedules.manifests.targets import route_prefix


@pytest.fixture
def on_path(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.syspath_prepend(str(REPO / "tests"))
    monkeypatch.chdir(REPO / "tests")
    yield
    sys.modules.pop("apps.prefixed_app", None)


def env_of(cronjob: dict) -> dict[str, str]:  # type: ignore[type-arg]
    container = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


def test_the_kubernetes_manifest_calls_the_prefixed_routes(on_path: None) -> None:
    result = CliRunner().invoke(
        cli_app,
        [
            "schedule-manifest",
            "--app",
            "apps.prefixed_app:app",
            "--provider",
            "kubernetes",
            "--base-url",
            "http://api.default.svc:8000/",
        ],
    )
    assert result.exit_code == 0, result.output
    (cronjob,) = [d for d in yaml.safe_load_all(result.stdout) if d]
    env = env_of(cronjob)
    assert env["VOLTRO_TRIGGER_URL"] == (
        "http://api.default.svc:8000/api/_voltro/schedules/nightly/trigger"
    )
    assert env["VOLTRO_RUNS_URL"] == "http://api.default.svc:8000/api/_voltro/schedules/runs"

    from apps.prefixed_app import app

    served = [getattr(r, "path", "") for r in app.routes]
    assert route_prefix(app) == "/api", served


def test_an_unprefixed_app_and_no_app_have_no_prefix() -> None:
    from fastapi import FastAPI

    from fastapi_voltro_schedules import schedules_router

    plain = FastAPI()
    plain.include_router(schedules_router)
    assert route_prefix(plain) == ""
    assert route_prefix(None) == ""
