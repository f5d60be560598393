"""Hand-off to procrastinate across real processes (issue 34): a real ``procrastinate worker``
on the ledger's own Postgres, two uvicorn replicas, 20 slots each hit by a duplicate trigger
storm, and the replica following slot 7's job SIGKILLed right after its defer (the job held
running on the worker meanwhile) — the same shape as ``tests/test_handoff_arq.py``.

Here the run row's job columns and the job are written in one transaction, so the row names
procrastinate's own job id (its bigserial) and the survivor follows it without deferring again.

Done when: every slot's job executed exactly once (the job's own marker files), each row ends
with its job's outcome, the killed replica's row taken over, ``voltro schedule audit`` exits 0.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.engine import make_url
from support.cluster import run_async
from support.handoff import assert_one_job_per_slot, twenty_slots_across_a_kill, worker_process

from fastapi_voltro_schedules.migrations import upgrade_to_head

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

JOBS_SCHEMA = "voltro_test_jobs"
"""procrastinate's tables, types and functions go to a schema of their own (first on the
connections' search path; the ledger's table is found in ``public``), dropped after the test."""


@pytest.fixture
def procrastinate_dsn(postgres_url: str) -> Iterator[str]:
    """A libpq URL of the ledger's database whose search path puts procrastinate's objects in
    :data:`JOBS_SCHEMA`, with procrastinate's schema applied there."""
    from procrastinate.schema import SchemaManager

    url = make_url(postgres_url).set(drivername="postgresql")
    plain = url.render_as_string(hide_password=False)
    dsn = f"{plain}?options=-csearch_path%3D{JOBS_SCHEMA},public"
    with psycopg.connect(plain, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {JOBS_SCHEMA} CASCADE")
        conn.execute(f"CREATE SCHEMA {JOBS_SCHEMA}")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SchemaManager.get_schema())  # type: ignore[arg-type]
    try:
        yield dsn
    finally:
        with psycopg.connect(plain, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {JOBS_SCHEMA} CASCADE")


def test_procrastinate_two_replicas_one_job_per_slot_through_storms_and_a_sigkill(
    postgres_url: str, procrastinate_dsn: str, tmp_path: Path
) -> None:
    run_async(upgrade_to_head(postgres_url))
    markers = tmp_path / "markers"
    markers.mkdir()
    engine = {
        "HANDOFF_ENGINE": "procrastinate",
        "HANDOFF_PROCRASTINATE_DSN": procrastinate_dsn,
        "HANDOFF_MARKERS": str(markers),
    }
    command = [
        sys.executable, "-m", "procrastinate", "--app", "apps.handoff_procrastinate.app",
        "worker", "--concurrency", "4", "--fetch-job-polling-interval", "0.2",
    ]  # fmt: skip
    with worker_process(command, engine, tmp_path / "worker.log") as worker:
        outcome = twenty_slots_across_a_kill(postgres_url, tmp_path, markers, engine)
        assert worker.poll() is None, (tmp_path / "worker.log").read_text()
    assert_one_job_per_slot(outcome, keyed=False)
    failed = [r for r in outcome.rows if r.status.value == "failed"]
    assert failed and all(
        "the worker's log has the traceback" in (r.error_message or "") for r in failed
    )
