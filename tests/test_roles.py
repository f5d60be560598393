"""The role matrix: every route of ``schedules_router`` × every kind of credential.

Credentials: none, a wrong token, the trigger token (new and rotated-old), the read-only token
(new and old), the operator token (new and old). Each variable holds ``new,old`` — the
rotation window — so both must open exactly what their role opens. Checked in-process through
``httpx.ASGITransport`` (starlette's ``TestClient`` warns about its httpx under
``filterwarnings=error``) and once over real uvicorn.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from support.running import served
from support.servers import Server, uvicorn_server

from fastapi_voltro_schedules import (
    ScheduleContext,
    Scheduling,
    SchedulingConfig,
    define_handler,
    define_schedule,
    schedules_router,
)
from fastapi_voltro_schedules.testing import ManualClock

TRIGGER_NEW, TRIGGER_OLD = "trigger-new-5f1e9a0c77d2", "trigger-old-0b4c2d9e18aa"
OPERATOR_NEW, OPERATOR_OLD = "operator-new-93ac1b7e5d40", "operator-old-6e02f4a9c3b1"
READ_NEW, READ_OLD = "viewer-new-1d7f3e8b2a95", "viewer-old-c4a06b1f9e37"
ALL_TOKENS = (TRIGGER_NEW, TRIGGER_OLD, OPERATOR_NEW, OPERATOR_OLD, READ_NEW, READ_OLD)

TOKEN_ENV = {
    "VOLTRO_SCHEDULE_TRIGGER_TOKEN": f"{TRIGGER_NEW},{TRIGGER_OLD}",
    "VOLTRO_INSPECT_TOKEN": f"{OPERATOR_NEW},{OPERATOR_OLD}",
    "VOLTRO_INSPECT_READ_TOKEN": f"{READ_NEW},{READ_OLD}",
}

CREDENTIALS: dict[str, str | None] = {
    "none": None,
    "wrong": "wrong-but-long-enough-token",
    "trigger": TRIGGER_NEW,
    "trigger-old": TRIGGER_OLD,
    "read": READ_NEW,
    "read-old": READ_OLD,
    "operator": OPERATOR_NEW,
    "operator-old": OPERATOR_OLD,
}
GRANTS = {
    "trigger": {"trigger", "trigger-old"},
    "read": {"read", "read-old", "operator", "operator-old"},
    "operator": {"operator", "operator-old"},
}

CLOCK_START = "2026-03-04T08:30:10+00:00"
BACKFILL = {"from": "2026-03-02T00:00:00Z", "to": "2026-03-03T00:00:00Z"}
PUT_BODY = {"cron": "0 4 * * *", "timezone": "UTC", "handler": "tenantReport"}


@dataclass(frozen=True)
class Route:
    method: str
    template: str
    needs: str  # trigger | read | operator
    url: str
    ok: frozenset[int]
    body: dict[str, Any] | None = field(default=None)


ROUTES = (
    Route("POST", "/_voltro/schedules/{name}/trigger", "trigger",
          "/_voltro/schedules/minutely/trigger", frozenset({200, 202})),
    Route("GET", "/_voltro/schedules/runs/{run_id}", "trigger",
          "/_voltro/schedules/runs/sr_0000", frozenset({404})),
    Route("GET", "/_voltro/inspect/schedules", "read",
          "/_voltro/inspect/schedules", frozenset({200})),
    Route("GET", "/_voltro/inspect/schedules/runs", "read",
          "/_voltro/inspect/schedules/runs?name=selfJob", frozenset({200})),
    Route("GET", "/_voltro/inspect/schedules/{name}", "read",
          "/_voltro/inspect/schedules/selfJob", frozenset({200})),
    Route("POST", "/_voltro/inspect/schedules/{name}/fire", "operator",
          "/_voltro/inspect/schedules/selfJob/fire", frozenset({202, 409})),
    Route("POST", "/_voltro/inspect/schedules/{name}/backfill", "operator",
          "/_voltro/inspect/schedules/selfJob/backfill", frozenset({200}), BACKFILL),
    # a run-time schedule: the first operator credential creates it, the next finds it so;
    # then the first deletes it and the next finds none
    Route("PUT", "/_voltro/inspect/schedules/{name}", "operator",
          "/_voltro/inspect/schedules/tenant.matrix", frozenset({200, 201}), PUT_BODY),
    Route("DELETE", "/_voltro/inspect/schedules/{name}", "operator",
          "/_voltro/inspect/schedules/tenant.matrix", frozenset({204, 404})),
    # every schedule at once, then all again (what follows must fire)
    Route("POST", "/_voltro/inspect/pause-all", "operator",
          "/_voltro/inspect/pause-all", frozenset({200}), {"reason": "matrix"}),
    Route("POST", "/_voltro/inspect/resume-all", "operator",
          "/_voltro/inspect/resume-all", frozenset({200})),
    # last: pause then resume, so the schedule is running again for whatever follows
    Route("POST", "/_voltro/inspect/schedules/{name}/pause", "operator",
          "/_voltro/inspect/schedules/selfJob/pause", frozenset({200}), {"reason": "matrix"}),
    Route("POST", "/_voltro/inspect/schedules/{name}/resume", "operator",
          "/_voltro/inspect/schedules/selfJob/resume", frozenset({200})),
)  # fmt: skip

EXEMPT: set[tuple[str, str]] = {
    # The dashboard's page is the sign-in form until a session exists, the sign-in route is
    # where a token is presented (as a form field), and signing out needs nothing; its data
    # comes from the inspect routes above. tests/test_dashboard.py covers their answers.
    ("GET", "/_voltro/dashboard"),
    ("POST", "/_voltro/dashboard/session"),
    ("POST", "/_voltro/dashboard/signout"),
    # Probes and scrapes carry no credential (SPEC §6); their bodies hold no secret.
    # tests/test_metrics_http.py, tests/test_manifest_cronjob.py and tests/test_health.py
    # cover them over HTTP.
    ("GET", "/metrics"),
    ("GET", "/_voltro/health"),
    ("GET", "/_voltro/health/live"),
    ("GET", "/_voltro/health/ready"),
}
"""Package routes that take no token on purpose."""

Send = Callable[[Route, dict[str, str]], Awaitable[httpx.Response]]


def test_every_package_route_is_in_the_matrix() -> None:
    app = FastAPI()
    app.include_router(schedules_router)
    served = {
        (method.upper(), path)
        for path, operations in app.openapi()["paths"].items()
        for method in operations
    }
    covered = {(r.method, r.template) for r in ROUTES} | EXEMPT
    assert served - covered == set(), "classify every new route in ROUTES (or EXEMPT)"
    assert covered - EXEMPT <= served


async def check_matrix(send: Send) -> None:
    failures = []
    for route in ROUTES:
        for kind, token in CREDENTIALS.items():
            headers = {} if token is None else {"Authorization": f"Bearer {token}"}
            r = await send(route, headers)
            text = r.text
            assert not any(t in text for t in ALL_TOKENS), f"a token echoed by {route.url}"
            if kind in GRANTS[route.needs]:
                expected = route.ok
            elif route.needs == "operator" and kind in GRANTS["read"]:
                expected = frozenset({403})
            else:
                expected = frozenset({401})
            if r.status_code not in expected:
                failures.append(f"{route.method} {route.url} with {kind}: {r.status_code} {text}")
                continue
            if r.status_code == 409:  # authorised: the previous credential's Run now still runs
                assert r.json()["code"] == "busy", r.text
            if r.status_code == 401:
                assert r.json()["code"] == "unauthorized" and r.headers["WWW-Authenticate"]
            if r.status_code == 403:
                body = r.json()
                assert body["code"] == "forbidden_role", body
                assert body["required"] == "operator" and body["role"] == "read"
                assert "VOLTRO_INSPECT_TOKEN" in body["detail"]
    assert not failures, "\n".join(failures)


# ------------------------------------------------------------------------------ in-process


async def _noop(ctx: ScheduleContext) -> None:
    return None


def _scheduling(sqlite_url: str) -> Scheduling:
    schedules = [
        define_schedule(
            name="minutely", cron="* * * * *", timezone="UTC", trigger="external", handler=_noop
        ),
        define_schedule(name="selfJob", cron="0 3 * * *", timezone="UTC", handler=_noop),
    ]
    config = SchedulingConfig(
        database_url=sqlite_url,
        schedule_trigger_token=TOKEN_ENV["VOLTRO_SCHEDULE_TRIGGER_TOKEN"],
        inspect_token=TOKEN_ENV["VOLTRO_INSPECT_TOKEN"],
        inspect_read_token=TOKEN_ENV["VOLTRO_INSPECT_READ_TOKEN"],
        external_missed_policy="off",
    )
    clock = ManualClock(datetime.fromisoformat(CLOCK_START))
    handlers = [define_handler(name="tenantReport")(_noop)]
    return Scheduling(schedules, config=config, clock=clock, handlers=handlers)



async def test_role_matrix_in_process(sqlite_url: str) -> None:
    async with served(_scheduling(sqlite_url)) as client:
        await check_matrix(lambda route, headers: client.request(
            route.method, route.url, headers=headers, json=route.body))  # fmt: skip


async def test_read_role_only_needs_one_variable(sqlite_url: str) -> None:
    """Only the read token set: reads open, operator actions 403, and an unset operator
    token does not 503 the reads."""
    config = SchedulingConfig(database_url=sqlite_url, inspect_read_token=READ_NEW)
    only_read = Scheduling(
        [define_schedule(name="selfJob", cron="0 3 * * *", timezone="UTC", handler=_noop)],
        config=config,
    )
    auth = {"Authorization": f"Bearer {READ_NEW}"}
    async with served(only_read) as c:
        assert (await c.get("/_voltro/inspect/schedules", headers=auth)).status_code == 200
        r = await c.post("/_voltro/inspect/schedules/selfJob/fire", headers=auth)
        assert r.status_code == 403 and r.json()["code"] == "forbidden_role"
        r = await c.get("/_voltro/inspect/schedules")
        assert r.status_code == 401 and "VOLTRO_INSPECT_READ_TOKEN" in r.json()["detail"]


async def test_no_inspect_token_at_all_shuts_the_inspect_routes(sqlite_url: str) -> None:
    config = SchedulingConfig(database_url=sqlite_url, schedule_trigger_token=TRIGGER_NEW)
    async with served(Scheduling([], config=config)) as c:
        r = await c.get(
            "/_voltro/inspect/schedules", headers={"Authorization": f"Bearer {TRIGGER_NEW}"}
        )
        assert r.status_code == 503 and r.json()["variable"] == "VOLTRO_INSPECT_TOKEN"
        assert "VOLTRO_INSPECT_READ_TOKEN" in r.json()["detail"]


# ------------------------------------------------------------------------------ over HTTP


@pytest.mark.slow
async def test_role_matrix_over_uvicorn(tmp_path: Path) -> None:
    env = {
        "VOLTRO_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'voltro.db'}",
        "VOLTRO_EXTERNAL_MISSED_POLICY": "off",
        "EXT_CLOCK_START": CLOCK_START,
        "VOLTRO_DEV": "",
        **TOKEN_ENV,
    }
    server: Server
    with uvicorn_server("apps.external_app:app", tmp_path, env, name="roles") as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
            await check_matrix(lambda route, headers: http.request(
                route.method, route.url, headers=headers, json=route.body))  # fmt: skip
        log = server.log()
    assert not any(t in log for t in ALL_TOKENS)
