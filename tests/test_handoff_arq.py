"""Hand-off to arq across real processes (issue 34): a real ``arq`` worker on Redis, two
uvicorn replicas on one Postgres ledger, 20 slots each hit by a duplicate trigger storm, and
the replica following slot 7's job SIGKILLed right after its enqueue (the job held running on
the worker meanwhile).

Done when: every slot's job executed exactly once (the job's own marker files), each row names
its job (``report@<slot>``) and ends with the job's outcome — ``failed`` with the job's error
for the slots whose job raises, ``succeeded`` otherwise — the killed replica's row taken over
by the survivor, and ``voltro schedule audit`` exits 0.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from support.cluster import run_async
from support.handoff import assert_one_job_per_slot, twenty_slots_across_a_kill, worker_process

from fastapi_voltro_schedules.migrations import upgrade_to_head

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


def test_arq_two_replicas_one_job_per_slot_through_storms_and_a_sigkill(
    postgres_url: str, redis_url: str, tmp_path: Path
) -> None:
    run_async(upgrade_to_head(postgres_url))
    markers = tmp_path / "markers"
    markers.mkdir()
    engine = {
        "HANDOFF_ENGINE": "arq",
        "HANDOFF_REDIS_URL": redis_url,
        "HANDOFF_QUEUE": "voltro-test:handoff",
        "HANDOFF_MARKERS": str(markers),
    }
    command = [sys.executable, "-m", "arq", "apps.handoff_worker.WorkerSettings"]
    with worker_process(command, engine, tmp_path / "worker.log") as worker:
        outcome = twenty_slots_across_a_kill(postgres_url, tmp_path, markers, engine)
        assert worker.poll() is None, (tmp_path / "worker.log").read_text()
    assert_one_job_per_slot(outcome)
