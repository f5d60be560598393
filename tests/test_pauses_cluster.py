"""Pause / resume across three real replicas on Postgres: a pause made on one replica stops
every replica within about two seconds; a resume made on another starts them again from the
next occurrence, with no row for the paused span."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from support.cluster import (
    duplicate_slots,
    fetch_runs,
    run_async,
    seconds_between,
    sleep_until_fraction,
    utcnow,
    uvicorn_cluster,
)

from fastapi_voltro_schedules.migrations import upgrade_to_head

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

TOKEN = "operator-token-for-the-cluster-pause-test"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
PROPAGATION = timedelta(seconds=2)
"""A pause reaches every replica within this (the cache refreshes every second)."""


def test_pause_on_one_replica_holds_on_all_and_resume_does_not_catch_up(
    postgres_url: str, tmp_path: Path
) -> None:
    run_async(upgrade_to_head(postgres_url))
    envs = [
        {
            "VOLTRO_DATABASE_URL": postgres_url,
            "VOLTRO_REPLICA_ID": f"pg-r{i}",
            "VOLTRO_SHUTDOWN_GRACE_MS": "200",
            "VOLTRO_INSPECT_TOKEN": TOKEN,
            "CLUSTER_SCHEDULES": "tick",
        }
        for i in range(3)
    ]
    with uvicorn_cluster(tmp_path, envs) as replicas:
        time.sleep(3)
        sleep_until_fraction(0.5)
        r = httpx.post(
            f"{replicas[0].url}/_voltro/inspect/schedules/tick/pause",
            headers=AUTH,
            json={"reason": "cluster test"},
            timeout=10,
        )
        assert r.status_code == 200, r.text
        paused_at = utcnow()
        time.sleep(PROPAGATION.total_seconds())
        for replica in replicas:  # every replica's listing knows, from the shared table
            listing = httpx.get(f"{replica.url}/_voltro/inspect/schedules", headers=AUTH).json()
            (tick,) = listing["schedules"]
            assert tick["paused"] is True, (replica.replica_id, tick)
            assert tick["pause"]["reason"] == "cluster test"
        time.sleep(3)
        sleep_until_fraction(0.5)
        r = httpx.post(
            f"{replicas[2].url}/_voltro/inspect/schedules/tick/resume", headers=AUTH, timeout=10
        )
        assert r.status_code == 200 and r.json()["changed"] is True, r.text
        resumed_at = utcnow()
        time.sleep(6)
        sleep_until_fraction(0.5)
        stopped = utcnow()
    rows = fetch_runs(postgres_url, "tick")
    logs = "\n".join(f"===== {r.replica_id}\n{r.log()}" for r in replicas)

    assert not duplicate_slots(rows), (duplicate_slots(rows), logs)
    before = [r for r in rows if r.scheduled_at < paused_at]
    assert len(before) >= 2, logs  # it was firing before the pause
    span = [r for r in rows if paused_at + PROPAGATION < r.scheduled_at < resumed_at]
    assert span == [], (span, logs)  # nothing fired, and no missed/skipped row either
    late = [r for r in rows if r.scheduled_at > paused_at + PROPAGATION]
    assert all(r.scheduled_at > resumed_at for r in late), logs
    after = seconds_between(resumed_at + PROPAGATION, stopped - timedelta(seconds=1))
    assert len(after) >= 3
    fired = {r.scheduled_at for r in rows if r.status.value == "succeeded"}
    assert all(s in fired for s in after), ([s for s in after if s not in fired], logs)
