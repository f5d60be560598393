"""The example app's Celery variant (issue 34): ``uvicorn example_app.handoff.main:app`` beside
a real ``celery -A example_app.handoff.tasks worker`` on Redis — the recipe of
docs/handoff.md, run as an operator would. A Run now of ``ledgerExport`` becomes one Celery task
whose id names the run; the worker runs it once and the run's row ends ``succeeded`` with the
task (``job_tracking="followed"``)."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
import pytest
from support.handoff import worker_process
from support.servers import uvicorn_server
from support.waiting import HANG, wait_for

pytestmark = [pytest.mark.slow]

OPERATOR = "operator-token-for-the-celery-example"
TRIGGER = "trigger-token-for-the-celery-example"


def test_the_celery_variant_hands_ledger_export_to_a_celery_worker(
    redis_url: str, tmp_path: Path
) -> None:
    env = {
        "EXAMPLE_CELERY_REDIS_URL": redis_url,
        "VOLTRO_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'voltro.db'}",
        "VOLTRO_INSPECT_TOKEN": OPERATOR,
        "VOLTRO_SCHEDULE_TRIGGER_TOKEN": TRIGGER,
        "VOLTRO_DEV": "",
    }
    command = [
        sys.executable, "-m", "celery", "-A", "example_app.handoff.tasks", "worker",
        "--pool=solo", "--loglevel=INFO", "--without-gossip", "--without-mingle",
        "--without-heartbeat",
    ]  # fmt: skip
    auth = {"Authorization": f"Bearer {OPERATOR}"}
    with (
        worker_process(command, env, tmp_path / "worker.log") as worker,
        uvicorn_server("example_app.handoff.main:app", tmp_path, env, name="app") as app,
    ):
        fired = httpx.post(
            f"{app.url}/_voltro/inspect/schedules/ledgerExport/fire", headers=auth, timeout=HANG
        )
        assert fired.status_code == 202, fired.text
        run_id = fired.json()["runId"]

        def finished() -> dict[str, object] | None:
            r = httpx.get(
                f"{app.url}/_voltro/schedules/runs/{run_id}",
                headers={"Authorization": f"Bearer {TRIGGER}"},
                timeout=HANG,
            )
            assert r.status_code == 200, r.text
            run = r.json()
            return run if run["status"] in ("succeeded", "failed") else None

        run = wait_for(finished, what="ledgerExport's run final")
        worker_log = (tmp_path / "worker.log").read_text()
        assert worker.poll() is None, worker_log
        app_log = app.log()
    assert run["status"] == "succeeded", (run, app_log, worker_log)
    job_id = f"ledgerExport@{fired.json()['scheduledAt'][:19]}Z/{run_id}"  # a manual firing
    assert f"handed off  name=ledgerExport runId={run_id} engine=celery jobId={job_id}" in app_log
    assert worker_log.count("exporting the ledger of") == 1, worker_log
    assert f"Task example.export_ledger[{job_id}] succeeded" in worker_log, worker_log
