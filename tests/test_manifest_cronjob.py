"""The generated CronJob, run for real: its container command taken from the manifest (env
from the manifest, the Secret's value substituted, the Job name as the downward API gives it,
``$(VAR)`` expanded as Kubernetes does), executed with the real ``curl`` against a uvicorn
server of ``apps.manifest_app`` whose clock the test moves."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from support.kube import container_argv, container_env
from support.servers import REPO, Server, uvicorn_server

from fastapi_voltro_schedules.manifests.kubernetes import JOB_NAME_FIELD

pytestmark = pytest.mark.slow

APP = "apps.manifest_app:app"
TOKEN = "trigger-5d1c0a7b-not-a-real-secret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SECRET = ("voltro-schedule-trigger", "token")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("manifest-e2e")


@pytest.fixture(scope="module")
def server(workdir: Path) -> Iterator[Server]:
    env = {
        "VOLTRO_DATABASE_URL": f"sqlite+aiosqlite:///{workdir / 'voltro.db'}",
        "VOLTRO_SCHEDULE_TRIGGER_TOKEN": TOKEN,
        "VOLTRO_INSPECT_TOKEN": "inspect-0f9e8d7c-not-a-real-secret",
        "VOLTRO_EXTERNAL_MISSED_POLICY": "off",
        "VOLTRO_DEV": "",
    }
    with uvicorn_server(APP, workdir, env, name="manifest") as s:
        yield s


@pytest.fixture(scope="module")
def cronjobs(server: Server, workdir: Path) -> dict[str, dict[str, Any]]:
    """The CronJobs `voltro schedule-manifest` prints for the app, by schedule name."""
    out = subprocess.run(
        [
            str(Path(REPO) / ".venv" / "bin" / "voltro")
            if (Path(REPO) / ".venv" / "bin" / "voltro").exists()
            else shutil.which("voltro") or "voltro",
            "schedule-manifest",
            "--app",
            APP,
            "--provider",
            "kubernetes",
            "--base-url",
            server.url,
        ],
        cwd=REPO / "tests",
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{REPO}:{REPO / 'tests'}"},
    )
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    return {d["metadata"]["annotations"]["voltro.dev/schedule-name"]: d for d in docs}


def set_clock(server: Server, instant: str) -> None:
    r = httpx.post(f"{server.url}/_test/clock", params={"to": instant}, timeout=10)
    assert r.status_code == 200, r.text


def job_name(cronjob: dict[str, Any], scheduled: str) -> str:
    """The name the CronJob controller gives the Job of ``scheduled``."""
    minutes = int(datetime.fromisoformat(scheduled).timestamp()) // 60
    return f"{cronjob['metadata']['name']}-{minutes}"


def run_pod(cronjob: dict[str, Any], job: str) -> subprocess.CompletedProcess[str]:
    pod = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    env = container_env(container, {SECRET: TOKEN}, {JOB_NAME_FIELD: job})
    env["VOLTRO_POLL_SECONDS"] = "0.1"  # the manifest's 5 s, shortened for the test
    argv = container_argv(container, env)
    assert argv[:2] == ["/bin/sh", "-c"]
    return subprocess.run(
        argv,
        env={"PATH": "/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def runs(server: Server, name: str) -> list[dict[str, Any]]:
    r = httpx.get(
        f"{server.url}/_voltro/inspect/schedules/runs",
        params={"name": name},
        headers={"Authorization": "Bearer inspect-0f9e8d7c-not-a-real-secret"},
        timeout=10,
    )
    assert r.status_code == 200, r.text
    body = r.json()
    return list(body["runs"] if isinstance(body, dict) else body)


def test_curl_is_installed() -> None:
    assert shutil.which("curl"), "the CronJob test needs curl (apt-get install curl)"


def test_a_succeeded_run_exits_0_and_its_retry_follows_it(
    server: Server, cronjobs: dict[str, dict[str, Any]]
) -> None:
    cj = cronjobs["hourly"]
    set_clock(server, "2026-03-10T09:00:20+00:00")
    job = job_name(cj, "2026-03-10T09:00:00+00:00")
    first = run_pod(cj, job)
    assert first.returncode == 0, (first.stdout, first.stderr)
    assert "states its slot 2026-03-10T09:00:00Z" in first.stdout
    assert '"status":"succeeded"' in first.stdout
    # backoffLimit retry / a second pod of the same Job: a duplicate, following the same run
    again = run_pod(cj, job)
    assert again.returncode == 0, (again.stdout, again.stderr)
    assert '"status":"duplicate"' in again.stdout
    run_ids = {
        line.split('"runId":"')[1].split('"')[0]
        for line in (first.stdout + again.stdout).splitlines()
        if '"runId":"' in line
    }
    assert len(run_ids) == 1
    assert TOKEN not in first.stdout + first.stderr + again.stdout + again.stderr


def test_a_failed_run_exits_non_zero(server: Server, cronjobs: dict[str, dict[str, Any]]) -> None:
    cj = cronjobs["failing"]
    set_clock(server, "2026-03-10T09:30:05+00:00")
    done = run_pod(cj, job_name(cj, "2026-03-10T09:30:00+00:00"))
    assert done.returncode != 0, (done.stdout, done.stderr)
    assert '"status":"failed"' in done.stdout


def test_a_late_pod_records_the_stated_slot(
    server: Server, cronjobs: dict[str, dict[str, Any]]
) -> None:
    """The pod starts late — inside the skew budget, as startingDeadlineSeconds keeps it: the
    Job's name says 11:00, so the run is 11:00's. Past the budget the app refuses the stated
    slot (409 too_late: a replay must never run an old slot) and the Job fails, loudly."""
    cj = cronjobs["hourly"]
    set_clock(server, "2026-03-10T11:04:50+00:00")
    done = run_pod(cj, job_name(cj, "2026-03-10T11:00:00+00:00"))
    assert done.returncode == 0, (done.stdout, done.stderr)
    slots = [r["scheduledAt"] for r in runs(server, "hourly")]
    assert "2026-03-10T11:00:00.000Z" in slots
    assert not any(s.startswith("2026-03-10T11:04") for s in slots)
    set_clock(server, "2026-03-10T12:40:00+00:00")
    stale = run_pod(cj, job_name(cj, "2026-03-10T12:00:00+00:00"))
    assert stale.returncode != 0
    assert "too_late" in stale.stdout + stale.stderr
    assert "2026-03-10T12:00:00.000Z" not in [r["scheduledAt"] for r in runs(server, "hourly")]


def test_a_hand_made_job_is_snapped_or_told_to_use_schedule_fire(
    server: Server, cronjobs: dict[str, dict[str, Any]]
) -> None:
    cj = cronjobs["hourly"]
    # inside the budget of 13:00: it is that occurrence
    set_clock(server, "2026-03-10T13:02:00+00:00")
    near = run_pod(cj, "hourly-manual-x7k2p")
    assert near.returncode == 0, (near.stdout, near.stderr)
    assert "states no slot" in near.stdout
    assert '"scheduledAt":"2026-03-10T13:00:00.000Z"' in near.stdout
    # half past: no occurrence — refused, with the way to run it now
    set_clock(server, "2026-03-10T13:31:00+00:00")
    far = run_pod(cj, "hourly-manual-q9w3e")
    assert far.returncode == 1
    assert "off_cadence" in far.stderr
    assert "voltro schedule fire hourly" in far.stderr


def test_the_fall_back_second_firing_is_a_duplicate(
    server: Server, cronjobs: dict[str, dict[str, Any]]
) -> None:
    """robfig/cron fires 01:30 twice on the New York fall-back night (05:30Z and 06:30Z);
    the second Job is answered duplicate and exits as the first did."""
    cj = cronjobs["nightlyNewYork"]
    set_clock(server, "2026-11-01T05:30:10+00:00")
    first = run_pod(cj, job_name(cj, "2026-11-01T05:30:00+00:00"))
    assert first.returncode == 0, (first.stdout, first.stderr)
    assert '"status":"accepted"' in first.stdout
    set_clock(server, "2026-11-01T06:30:10+00:00")
    second = run_pod(cj, job_name(cj, "2026-11-01T06:30:00+00:00"))
    assert second.returncode == 0, (second.stdout, second.stderr)
    assert '"status":"duplicate"' in second.stdout
    assert '"scheduledAt":"2026-11-01T05:30:00.000Z"' in second.stdout
    slots = [r["scheduledAt"] for r in runs(server, "nightlyNewYork")]
    assert slots.count("2026-11-01T05:30:00.000Z") == 1
    assert not any(s.startswith("2026-11-01T06:30") for s in slots)


def test_the_slot_arithmetic_matches_the_controller_for_many_instants(
    server: Server, cronjobs: dict[str, dict[str, Any]]
) -> None:
    """The sh date arithmetic against Python's, across leap days and centuries, without the
    trigger: the script prints the slot before it calls curl (the URL is unreachable)."""
    cj = dict(cronjobs["hourly"])
    for instant in (
        "1970-01-01T00:00",
        "2000-02-29T23:59",
        "2024-12-31T23:59",
        "2100-03-01T00:00",
        "2026-03-29T01:00",
    ):
        dt = datetime.fromisoformat(instant).replace(tzinfo=UTC)
        pod = cj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        container = pod["containers"][0]
        env = container_env(
            container, {SECRET: TOKEN}, {JOB_NAME_FIELD: job_name(cj, dt.isoformat())}
        )
        env["VOLTRO_TRIGGER_URL"] = "http://127.0.0.1:9/unreachable"
        env["VOLTRO_RETRIES"] = "0"  # a refused connection is otherwise retried for a minute
        done = subprocess.run(
            container_argv(container, env),
            env={"PATH": "/usr/bin:/bin", **env},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert f"states its slot {dt.strftime('%Y-%m-%dT%H:%M:00Z')}" in done.stdout, done.stdout
        assert done.returncode == 1


def test_the_health_probe_needs_no_token_and_holds_no_secret(server: Server) -> None:
    r = httpx.get(f"{server.url}/_voltro/health", timeout=10)
    assert r.status_code == 200, r.text
    assert r.json() == {"status": "ok", "scheduler": "armed", "ledger": "reachable"}
    assert "not-a-real-secret" not in r.text
