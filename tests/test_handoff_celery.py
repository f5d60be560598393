"""Hand-off to Celery across real processes (issue 34): a real ``celery worker`` on a Redis
broker and result backend, two uvicorn replicas on one Postgres ledger, 20 slots each hit by a
duplicate trigger storm, and the replica following slot 7's job SIGKILLed right after it sent
the task (the job held running on the worker meanwhile) — the shape of
``tests/test_handoff_arq.py``.

Celery has no dedupe: the ledger sends one task per slot, a replica taking a row over sends
again only when the result backend does not know the task yet, and a duplicate message is
dropped on the worker by ``OncePerJob`` — shown on its own by sending one id twice.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from support.cluster import run_async
from support.handoff import (
    assert_one_job_per_slot,
    executions,
    marker_name,
    twenty_slots_across_a_kill,
    worker_process,
)
from support.waiting import wait_until

from fastapi_voltro_schedules.handoff import JobState
from fastapi_voltro_schedules.handoff.celery import CeleryEngine
from fastapi_voltro_schedules.migrations import upgrade_to_head

pytestmark = [pytest.mark.slow]

QUEUE = "voltro-test:celery"


@contextmanager
def _celery_worker(redis_url: str, markers: Path, tmp_path: Path) -> Iterator[dict[str, str]]:
    env = {
        "HANDOFF_ENGINE": "celery",
        "HANDOFF_REDIS_URL": redis_url,
        "HANDOFF_QUEUE": QUEUE,
        "HANDOFF_MARKERS": str(markers),
    }
    command = [
        sys.executable, "-m", "celery", "-A", "apps.handoff_celery", "worker", "--pool=solo",
        "--loglevel=INFO", "--without-gossip", "--without-mingle", "--without-heartbeat",
    ]  # fmt: skip
    with worker_process(command, env, tmp_path / "worker.log") as worker:
        yield env
        assert worker.poll() is None, (tmp_path / "worker.log").read_text()


@pytest.mark.postgres
def test_celery_two_replicas_one_job_per_slot_through_storms_and_a_sigkill(
    postgres_url: str, redis_url: str, tmp_path: Path
) -> None:
    run_async(upgrade_to_head(postgres_url))
    markers = tmp_path / "markers"
    markers.mkdir()
    with _celery_worker(redis_url, markers, tmp_path) as env:
        outcome = twenty_slots_across_a_kill(postgres_url, tmp_path, markers, env)
    assert_one_job_per_slot(outcome)


async def test_celery_a_duplicate_message_of_a_task_id_runs_once(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    monkeypatch.setenv("HANDOFF_REDIS_URL", redis_url)
    monkeypatch.setenv("HANDOFF_QUEUE", QUEUE)
    sys.modules.pop("apps.handoff_celery", None)  # built from the env above
    from apps.handoff_celery import app

    engine = CeleryEngine(app)
    job_id = "report@2026-03-04T08:31:00Z"
    (markers / "hold").touch()  # nothing runs before both messages are queued
    with _celery_worker(redis_url, markers, tmp_path):
        # what a take-over does when the result backend does not know the task yet: send
        # again — two messages with one task id
        assert await engine.enqueue(job_id, "handoff_job", {"slot": "s", "fail": False})
        assert await engine.enqueue(job_id, "handoff_job", {"slot": "s", "fail": False})
        await wait_until(lambda: executions(markers), what="the first message ran")
        (markers / "hold").unlink()
        report = await wait_until(
            lambda: _terminal(engine, job_id), what="the task's result", interval=0.05
        )
        # the second message reached the worker and was dropped: its log says so
        await wait_until(
            lambda: (
                "Ignored" in (tmp_path / "worker.log").read_text()
                or "ignored" in (tmp_path / "worker.log").read_text()
            ),
            what="the duplicate message ignored on the worker",
        )
        # once the task ran, a third send is refused at the source
        assert not await engine.enqueue(job_id, "handoff_job", {"slot": "s", "fail": False})
    assert report.state is JobState.SUCCEEDED
    assert executions(markers) == {marker_name(job_id): 1}


async def _terminal(engine: CeleryEngine, job_id: str) -> object:
    report = await engine.report(job_id)
    return report if report.state.terminal else None
