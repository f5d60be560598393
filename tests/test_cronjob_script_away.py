"""The generated CronJob script when the app is away, run for real (``sh`` + ``curl``) against
a uvicorn server of ``apps.restart_app``: down (it says why), coming up late (it retries a
refused connection), restarted while the script follows a run (it follows it through)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from support.servers import REPO, Server, free_port

from fastapi_voltro_schedules.manifests.script import TRIGGER_SCRIPT

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl"),
]

TOKEN = "trigger-7a1e0c3b-not-a-real-secret"
APP = "apps.restart_app:app"


@contextmanager
def app_on(port: int, workdir: Path, name: str, **extra: str) -> Iterator[Server]:
    env = {
        **os.environ,
        **extra,
        "PYTHONPATH": f"{REPO}:{REPO / 'tests'}",
        "VOLTRO_DATABASE_URL": f"sqlite+aiosqlite:///{workdir / 'voltro.db'}",
        "VOLTRO_SCHEDULE_TRIGGER_TOKEN": TOKEN,
        "VOLTRO_EXTERNAL_MISSED_POLICY": "off",
        "VOLTRO_DEV": "",
    }
    log = workdir / f"{name}.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", APP, "--host", "127.0.0.1", "--port", str(port)],
            cwd=workdir,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )
    server = Server(process, port, log)
    try:
        server.wait_ready(name, "/_voltro/health", 60, require_ok=True)
        yield server
    finally:
        server.kill(signal.SIGTERM)


def start_script(port: int, **extra: str) -> subprocess.Popen[str]:
    base = f"http://127.0.0.1:{port}"
    env = {
        "PATH": "/usr/bin:/bin",
        "VOLTRO_TRIGGER_URL": f"{base}/_voltro/schedules/slow/trigger",
        "VOLTRO_RUNS_URL": f"{base}/_voltro/schedules/runs",
        "VOLTRO_SCHEDULE": "slow",
        "VOLTRO_SCHEDULE_TRIGGER_TOKEN": TOKEN,
        "VOLTRO_POLL_SECONDS": "0.2",
        **extra,
    }
    return subprocess.Popen(
        ["/bin/sh", "-c", TRIGGER_SCRIPT],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(script: subprocess.Popen[str], timeout: float = 120) -> tuple[int, str, str]:
    out, err = script.communicate(timeout=timeout)
    return script.returncode, out, err


def test_the_app_down_says_why_and_names_the_url() -> None:
    port = free_port()  # nothing listens there
    code, out, err = finish(start_script(port, VOLTRO_RETRIES="1"))
    assert code == 1, (out, err)
    refused = [line for line in err.splitlines() if "trigger refused:" in line]
    assert refused, err
    reason = refused[0].split("trigger refused:", 1)[1].strip()
    assert reason.startswith(f"cannot connect to http://127.0.0.1:{port}/_voltro/schedules/")
    assert "connection refused" in reason
    assert TOKEN not in out + err


def test_a_refused_connection_is_retried_until_the_app_is_up(tmp_path: Path) -> None:
    port = free_port()
    script = start_script(port, SLOW_SECONDS="0")  # curl's backoff: 1, 2, 4, 8, … s
    time.sleep(1.5)  # the first attempts are refused
    assert script.poll() is None
    with app_on(port, tmp_path, "late"):
        code, out, err = finish(script)
    assert code == 0, (out, err)
    assert '"status":"succeeded"' in out


def test_the_app_restarting_mid_poll_is_followed_through(tmp_path: Path) -> None:
    port = free_port()
    with app_on(port, tmp_path, "first") as first:
        script = start_script(port)
        time.sleep(1.0)  # triggered, and polling the 3 s run
        assert script.poll() is None
        # a rolling restart: SIGTERM (the in-flight run finishes within the shutdown grace),
        # the port closed for a moment, a new process on it
        first.kill(signal.SIGTERM)
    time.sleep(1.0)
    with app_on(port, tmp_path, "second"):
        code, out, err = finish(script)
    assert code == 0, (out, err, (tmp_path / "first.log").read_text())
    assert '"status":"succeeded"' in out


def test_a_skipped_run_exits_1_as_both_docs_say(tmp_path: Path) -> None:
    port = free_port()
    minute = int(time.time()) // 60
    with app_on(port, tmp_path, "skip"):
        live = start_script(port, VOLTRO_CRONJOB="slow", VOLTRO_JOB_NAME=f"slow-{minute}")
        time.sleep(1.0)  # its 3 s run is live
        # the previous minute's Job, late (inside the skew budget): on_overlap="skip"
        code, out, err = finish(
            start_script(port, VOLTRO_CRONJOB="slow", VOLTRO_JOB_NAME=f"slow-{minute - 1}")
        )
        assert '"status":"skipped"' in out, (out, err)
        assert code == 1, (out, err)
        assert finish(live)[0] == 0
    for page in ("external-trigger.md", "kubernetes.md"):
        text = " ".join((REPO / "docs" / page).read_text().split())
        assert re.search(r"`skipped`[^.]{0,80}exit 1|`1` when the run[^.]{0,40}`skipped`", text), (
            f"docs/{page} does not say a skipped run exits 1"
        )


def test_an_excluded_days_skipped_slot_exits_0(tmp_path: Path) -> None:
    """Issue 36: the platform's cron has no calendar, so the CronJob fires on a day the
    schedule excludes; the app records the slot skipped (errorTag excluded) and the Job exits
    0 — the day was meant off, like a pause, not a failure to alert on."""
    today = datetime.now(UTC).date()
    days = ",".join(str(today + timedelta(days=n)) for n in (-1, 0, 1))  # whatever the minute
    port = free_port()
    with app_on(port, tmp_path, "dayoff", DAYS_OFF=days):
        base = f"http://127.0.0.1:{port}"
        code, out, err = finish(
            start_script(
                port,
                VOLTRO_TRIGGER_URL=f"{base}/_voltro/schedules/dayOff/trigger",
                VOLTRO_SCHEDULE="dayOff",
            )
        )
    assert code == 0, (out, err)
    assert '"status":"skipped"' in out and '"errorTag":"excluded"' in out, out
    assert "a day the schedule excludes, nothing ran" in out
