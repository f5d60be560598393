"""``example_app/deploy/``: every object passes kubernetes-validate strict, the CronJobs are what
``voltro schedule-manifest`` generates today (and ``--check`` finds them in sync), and the
Deployment, Service, Secrets and CronJobs agree with each other and with the app."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml
from fastapi import FastAPI
from support.servers import REPO
from typer.testing import CliRunner

from fastapi_voltro_schedules import schedules_router
from fastapi_voltro_schedules.cli import app as cli_app
from fastapi_voltro_schedules.cli import serve as cli_serve

DEPLOY = REPO / "example_app" / "deploy"
K8S_VERSION = "1.37.0"
BASE_URL = "http://voltro-example:8000"
GENERATE = (
    "schedule-manifest", "--app", "example_app.main:app", "--provider", "kubernetes",
    "--base-url", BASE_URL,
)  # fmt: skip


def voltro(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fastapi_voltro_schedules", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)},
    )


def objects_in(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def deploy_files() -> list[Path]:
    files = [*sorted(DEPLOY.rglob("*.yaml")), DEPLOY / "secret.yaml.example"]
    assert len(files) >= 4, files
    return files


def all_objects() -> list[dict[str, Any]]:
    return [o for f in deploy_files() for o in objects_in(f)]


def one(kind: str, name: str | None = None) -> dict[str, Any]:
    found = [
        o
        for o in all_objects()
        if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]
    assert len(found) == 1, (kind, name, len(found))
    return found[0]


@pytest.mark.parametrize(
    "obj", all_objects(), ids=lambda o: f"{o['kind']}/{o['metadata']['name']}"
)
def test_every_object_passes_strict_validation(obj: dict[str, Any]) -> None:
    kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_the_kinds_of_the_deploy_story() -> None:
    kinds = sorted(o["kind"] for o in all_objects())
    assert kinds == ["CronJob", "Deployment", "Secret", "Secret", "Secret", "Service"]


def test_the_cronjobs_are_what_the_generator_writes_today(tmp_path: Path) -> None:
    out = tmp_path / "cronjobs"
    result = voltro(*GENERATE, "--out", str(out))
    assert result.returncode == 0, result.stderr
    generated = {p.name: p.read_text() for p in out.glob("*.yaml")}
    committed = {p.name: p.read_text() for p in (DEPLOY / "cronjobs").glob("*.yaml")}
    assert generated == committed, (
        "example_app/deploy/cronjobs is stale — regenerate: voltro " + " ".join(GENERATE)
        + " --out example_app/deploy/cronjobs"
    )


def test_the_drift_check_finds_the_deploy_directory_in_sync() -> None:
    result = voltro("schedule-manifest", "--app", "example_app.main:app", "--check", str(DEPLOY))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "in sync: 1 external schedule(s)" in result.stdout


def test_the_drift_check_catches_a_hand_edited_copy(tmp_path: Path) -> None:
    cronjob = one("CronJob")
    cronjob["spec"]["schedule"] = "0 7 * * 1"
    (tmp_path / "weekly-report.yaml").write_text(yaml.safe_dump(cronjob))
    result = voltro("schedule-manifest", "--app", "example_app.main:app", "--check", str(tmp_path))
    assert result.returncode == 1
    assert 'schedule "weeklyReport": cadence differs' in result.stdout


def test_the_deployment_probes_migrates_and_serves() -> None:
    pod = one("Deployment")["spec"]["template"]["spec"]
    (migrate,) = pod["initContainers"]
    assert migrate["command"] == ["voltro", "migrate"]
    (container,) = pod["containers"]
    port = container["ports"][0]
    for probe, path in (
        ("readinessProbe", "/_voltro/health/ready"),
        ("livenessProbe", "/_voltro/health/live"),
    ):
        get = container[probe]["httpGet"]
        assert get == {"path": path, "port": port["name"]}
        # The readiness route gives the ledger 2 s; the probe must wait longer than that.
        assert container[probe]["timeoutSeconds"] > 2
    app = FastAPI()
    app.include_router(schedules_router)
    assert {"/_voltro/health/ready", "/_voltro/health/live"} <= set(app.openapi()["paths"])
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    # Graceful shutdown (VOLTRO_SHUTDOWN_GRACE_MS, 10 s) fits before the kubelet's SIGKILL.
    assert pod["terminationGracePeriodSeconds"] > 10


def test_the_deployments_command_is_a_valid_voltro_serve(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The container's argv parses as ``voltro serve`` and binds every address on its port."""
    (container,) = one("Deployment")["spec"]["template"]["spec"]["containers"]
    argv = container["command"]
    assert argv[:2] == ["voltro", "serve"]
    calls: list[tuple[str, int]] = []
    monkeypatch.setattr(
        cli_serve, "_run_uvicorn", lambda spec, host, port, *a, **k: calls.append((host, port))
    )
    result = CliRunner().invoke(cli_app, argv[1:], env={"VOLTRO_APP": None})
    assert result.exit_code == 0, result.output
    assert calls == [("0.0.0.0", container["ports"][0]["containerPort"])]


def test_secrets_are_placeholders_and_every_reference_resolves() -> None:
    secrets = {o["metadata"]["name"]: o for o in all_objects() if o["kind"] == "Secret"}
    for secret in secrets.values():
        assert "data" not in secret  # nothing base64-encoded hiding a real value
        for value in secret["stringData"].values():
            assert "REPLACE-ME" in value or "USER:PASSWORD@HOST" in value
    text = (DEPLOY / "secret.yaml.example").read_text()
    assert "kubectl create secret generic voltro-schedule-trigger" in text
    refs = []
    for obj in all_objects():
        if obj["kind"] in ("Deployment", "CronJob"):
            spec = obj["spec"]["template"] if obj["kind"] == "Deployment" else (
                obj["spec"]["jobTemplate"]["spec"]["template"]
            )
            pod = spec["spec"]
            for c in pod.get("initContainers", []) + pod["containers"]:
                for env in c.get("env", []):
                    ref = env.get("valueFrom", {}).get("secretKeyRef")
                    if ref:
                        refs.append((ref["name"], ref["key"]))
                    assert "TOKEN" not in env["name"] or "value" not in env
    assert refs, "the Deployment and CronJobs read their tokens from Secrets"
    for name, key in refs:
        assert key in secrets[name]["stringData"], (name, key)


def test_the_cronjobs_reach_the_service() -> None:
    service = one("Service")
    (port,) = service["spec"]["ports"]
    url = urlsplit(BASE_URL)
    assert (url.hostname, url.port) == (service["metadata"]["name"], port["port"])
    deployment = one("Deployment")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert port["targetPort"] == container["ports"][0]["name"]
    env = {
        e["name"]: e.get("value")
        for e in one("CronJob")["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][
            0
        ]["env"]
    }
    assert env["VOLTRO_TRIGGER_URL"] == f"{BASE_URL}/_voltro/schedules/weeklyReport/trigger"
