"""The package's OpenAPI is a contract a client can be generated from, and the server keeps it.

* The document: one stable ``operationId`` per route (a snapshot: renaming one renames a
  generated client's method), one tag, and every refusal a route can answer documented with
  the error body's schema — ``401``/``503`` on each route behind a token, ``403`` on each that
  needs the operator.
* The server: schemathesis (``--checks all``: server errors, undocumented statuses, content
  types and headers, response schemas, schema-valid requests refused, schema-invalid ones
  accepted, ``Allow``, stateful links…) over every route of the example app served by uvicorn
  — the package's and the app's own (``/tenants``, ``/billing``) — once with the
  operator token and once with the read-only one (the trigger routes get the trigger token in
  both), a bounded number of examples per operation, deterministic generation. The answer
  must be no failure at all, and no unhandled exception in the server's log.
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from support.servers import REPO, Server, uvicorn_server
from support.waiting import HANG

from fastapi_voltro_schedules import schedules_router

pytestmark = pytest.mark.slow

OPERATION_IDS = {
    ("POST", "/_voltro/schedules/{name}/trigger"): "triggerSchedule",
    ("GET", "/_voltro/schedules/runs/{run_id}"): "getTriggeredRun",
    ("GET", "/_voltro/inspect/schedules"): "listSchedules",
    ("GET", "/_voltro/inspect/schedules/runs"): "listRuns",
    ("GET", "/_voltro/inspect/schedules/{name}"): "getSchedule",
    ("PUT", "/_voltro/inspect/schedules/{name}"): "putSchedule",
    ("DELETE", "/_voltro/inspect/schedules/{name}"): "deleteSchedule",
    ("POST", "/_voltro/inspect/schedules/{name}/fire"): "fireSchedule",
    ("POST", "/_voltro/inspect/schedules/{name}/backfill"): "backfillSchedule",
    ("POST", "/_voltro/inspect/schedules/{name}/pause"): "pauseSchedule",
    ("POST", "/_voltro/inspect/schedules/{name}/resume"): "resumeSchedule",
    ("POST", "/_voltro/inspect/pause-all"): "pauseAll",
    ("POST", "/_voltro/inspect/resume-all"): "resumeAll",
    ("GET", "/_voltro/health/live"): "getLiveness",
    ("GET", "/_voltro/health/ready"): "getReadiness",
    ("GET", "/_voltro/health"): "getHealth",
    ("GET", "/metrics"): "getMetrics",
    ("GET", "/_voltro/dashboard"): "getDashboard",
    ("POST", "/_voltro/dashboard/session"): "signIn",
    ("POST", "/_voltro/dashboard/signout"): "signOut",
}
"""Every route of ``schedules_router`` and its operationId: a client generator's method name."""

ERROR_BODY = {"$ref": "#/components/schemas/ErrorBody"}

APP = "example_app.main:app"
TRIGGER_TOKEN = "trigger-contract-5b1e07c2-not-a-real-secret"
OPERATOR_TOKEN = "operator-contract-8a6d42f1-not-a-real-secret"
READ_TOKEN = "read-contract-3c9f5e0b-not-a-real-secret"
APP_OPERATIONS = {
    ("GET", "/billing/health"),
    ("POST", "/tenants"),
    ("PATCH", "/tenants/{tenant_id}"),
    ("DELETE", "/tenants/{tenant_id}"),
}
"""The example app's own routes: fuzzed beside the package's, under the same checks."""
EXAMPLES = 40
"""Per operation and phase. The two passes take two to three minutes on a 2-core box, most of it
the coverage phase sending each IANA zone of the published enum to POST and PATCH /tenants
(each POST writes a row and its schedule)."""


def package_openapi() -> dict[str, Any]:
    app = FastAPI()
    app.include_router(schedules_router)
    return app.openapi()


def operations(document: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in document["paths"].items():
        for method, operation in item.items():
            yield method.upper(), path, operation


def test_every_route_has_its_stable_operation_id_and_the_one_tag() -> None:
    document = package_openapi()
    found = {(method, path): op.get("operationId") for method, path, op in operations(document)}
    assert found == OPERATION_IDS
    assert {tuple(op["tags"]) for _, _, op in operations(document)} == {("voltro schedules",)}


def test_every_refusal_is_documented_with_the_error_body() -> None:
    document = package_openapi()
    error_body = document["components"]["schemas"]["ErrorBody"]
    assert error_body["required"] == ["detail", "code"], error_body
    for method, path, op in operations(document):
        where = (method, path)
        schemes = {name for item in op.get("security", []) for name in item}
        responses = op["responses"]
        if schemes:  # behind a token: no token is 401, an unset token 503
            for status in ("401", "503"):
                schema = responses[status]["content"]["application/json"]["schema"]
                assert schema == ERROR_BODY, (where, status, schema)
        if "VoltroInspectToken" in schemes and method != "GET":
            assert "forbidden_role" in responses["403"]["description"], where
        if op.get("parameters") or op.get("requestBody"):
            # FastAPI's own validation answer is the package's shape, not HTTPValidationError.
            if "422" in responses:
                schema = responses["422"]["content"]["application/json"]["schema"]
                assert schema == ERROR_BODY, (where, schema)
        for parameter in op.get("parameters", []):  # a header or a query has no null
            assert "anyOf" not in parameter["schema"], (where, parameter)
    assert "HTTPValidationError" not in document["components"]["schemas"]


# --------------------------------------------------------------------------- schemathesis


@pytest.fixture(scope="module")
def example_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    workdir = tmp_path_factory.mktemp("contract")
    env = {
        "VOLTRO_DATABASE_URL": f"sqlite+aiosqlite:///{workdir / 'voltro.db'}",
        "VOLTRO_SCHEDULE_TRIGGER_TOKEN": TRIGGER_TOKEN,
        "VOLTRO_INSPECT_TOKEN": OPERATOR_TOKEN,
        "VOLTRO_INSPECT_READ_TOKEN": READ_TOKEN,
        "VOLTRO_DEV": "",
    }
    with uvicorn_server(
        APP, workdir, env, name="contract", ready_path="/_voltro/health/ready"
    ) as server:
        yield server


def schemathesis_run(server: Server, inspect_token: str, workdir: Path) -> tuple[int, str, Path]:
    """``schemathesis run --checks all`` against ``server``: the exit code, the output and
    the JUnit report."""
    config = workdir / "schemathesis.toml"
    # Each of the OpenAPI's two bearer schemes gets its token: schemathesis sends the one an
    # operation's `security` names.
    config.write_text(
        "[generation]\ndeterministic = true\n"
        f'[auth.openapi.VoltroTriggerToken]\nbearer = "{TRIGGER_TOKEN}"\n'
        f'[auth.openapi.VoltroInspectToken]\nbearer = "{inspect_token}"\n'
    )
    junit = workdir / "junit.xml"
    cli = Path(sys.executable).with_name("schemathesis")
    env = {
        **os.environ,
        "PYTHONPATH": f"{REPO}:{REPO / 'tests'}",
        "SCHEMATHESIS_HOOKS": "support.schemathesis_hooks",
        "NO_COLOR": "1",
    }
    result = subprocess.run(
        [
            str(cli), "--config-file", str(config), "run", f"{server.url}/openapi.json",
            "--checks", "all",
            "--max-examples", str(EXAMPLES),
            "--workers", "1",
            "--no-shrink",
            "--report", "junit", "--report-junit-path", str(junit),
        ],
        cwd=workdir, env=env, capture_output=True, text=True, timeout=5 * HANG, check=False,
    )  # fmt: skip
    return result.returncode, result.stdout + result.stderr, junit


def test_the_served_openapi_lists_the_apps_handlers(example_server: Server) -> None:
    """Known only once the app's scheduler booted: the PUT body's handler is an enum of them,
    so a generated client (and the fuzzer) sends only names the route takes."""
    document = httpx.get(f"{example_server.url}/openapi.json", timeout=10).json()
    # What the fuzzer covers: the package's routes and the app's own, nothing filtered out.
    served = {(method, path) for method, path, _ in operations(document)}
    package = {(method, path) for method, path, _ in operations(package_openapi())}
    assert served == package | APP_OPERATIONS, served
    put = document["paths"]["/_voltro/inspect/schedules/{name}"]["put"]
    body = put["requestBody"]["content"]["application/json"]["schema"]
    assert body["properties"]["handler"]["enum"] == ["tenantReport"], body["properties"]
    # The router's own copy is untouched: another app gets its own handlers.
    bare = package_openapi()["paths"]["/_voltro/inspect/schedules/{name}"]["put"]
    handler = bare["requestBody"]["content"]["application/json"]["schema"]["properties"]
    assert "enum" not in handler["handler"]


@pytest.mark.parametrize("role", ["operator", "read-only"])
def test_schemathesis_finds_no_contract_violation(
    example_server: Server, role: str, tmp_path: Path
) -> None:
    token = OPERATOR_TOKEN if role == "operator" else READ_TOKEN
    document = httpx.get(f"{example_server.url}/openapi.json", timeout=10).json()
    every = len(list(operations(document)))  # no filter: the package's routes and the app's
    code, output, junit = schemathesis_run(example_server, token, tmp_path)
    tail = output[-6_000:]
    suite = ET.parse(junit).getroot()
    totals = {
        key: sum(int(s.get(key, "0")) for s in suite.iter("testsuite"))
        for key in ("tests", "failures", "errors")
    }
    assert totals["tests"] >= every, (totals, tail)  # every operation was run
    assert (totals["failures"], totals["errors"]) == (0, 0), tail
    assert code == 0, tail
    assert f"Selected: {every}/{every}" in output and f"Tested: {every}" in output, tail


def test_the_fuzzed_server_logged_no_unhandled_exception(example_server: Server) -> None:
    # Runs after the passes above (same module, same server).
    log = example_server.log()
    assert "/_voltro/inspect/schedules" in log  # the passes did reach it
    for marker in ("Exception in ASGI application", "Internal Server Error"):
        assert marker not in log, log[-5_000:]
