"""Pause / resume across three real replicas on Postgres: a pause made on one replica stops
every replica; a resume made on another starts them again from the next occurrence, with no
row for the paused span.

Each replica answers from its own copy of the pauses table (refreshed every second), and its
timer drops a slot that falls due while that copy says paused. So the test reads, per replica,
when its listing first said paused and how far its timer has gone
(``voltro_schedule_next_fire_timestamp_seconds``): the span every timer passed while its copy
said paused must have no row, however slowly a busy machine got there. How *soon* a pause
reaches the others (about a second) is a latency, not asserted here.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from support.cluster import (
    Replica,
    duplicate_slots,
    fetch_runs,
    pause_schedule,
    run_async,
    seconds_between,
    sleep_until_fraction,
    utcnow,
    uvicorn_cluster,
)
from support.waiting import HANG, wait_for

from fastapi_voltro_schedules.enums import RunStatus
from fastapi_voltro_schedules.migrations import upgrade_to_head

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

TOKEN = "operator-token-for-the-cluster-pause-test"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
PAUSED_SLOTS = 3
"""Slots every replica's timer passes while its copy says paused, before the resume."""
RESUMED_SLOTS = 3
"""Slots that must all fire once every replica's copy says resumed."""
NAME = "tick0"
NEXT_FIRE = re.compile(
    rf'^voltro_schedule_next_fire_timestamp_seconds\{{name="{NAME}"\}} (\S+)$', re.MULTILINE
)


def _paused(replica: Replica) -> dict[str, object]:
    listing = httpx.get(f"{replica.url}/_voltro/inspect/schedules", headers=AUTH, timeout=HANG)
    (tick,) = listing.json()["schedules"]
    return dict(tick)


def _learned(replicas: list[Replica], paused: bool) -> dict[str, datetime]:
    """When each replica's listing (its copy of the pauses table) first said ``paused``: an
    upper bound on when its copy changed."""
    seen: dict[str, datetime] = {}

    def all_know() -> bool:
        for replica in replicas:
            if replica.replica_id not in seen and _paused(replica)["paused"] is paused:
                seen[replica.replica_id] = utcnow()
        return len(seen) == len(replicas)

    wait_for(all_know, what=f"every replica's copy saying paused={paused}")
    return seen


def _next_fire(replica: Replica) -> datetime:
    """What the replica's timer is armed for: every slot before it was dispatched (or dropped)."""
    match = NEXT_FIRE.search(httpx.get(f"{replica.url}/metrics", timeout=HANG).text)
    assert match, replica.replica_id
    return datetime.fromtimestamp(float(match.group(1)), UTC)


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
            # tick0: every second, backfill="all", so a timer that falls behind on a busy
            # machine still fires each slot after the resume (it would record them missed).
            "CLUSTER_SCHEDULES": "",
            "CLUSTER_TICKS": "1",
        }
        for i in range(3)
    ]
    with uvicorn_cluster(tmp_path, envs) as replicas:
        wait_for(lambda: len(fetch_runs(postgres_url, NAME)) >= 2, what="firing")
        sleep_until_fraction(0.5)
        pause_schedule(replicas[0], NAME, TOKEN, "cluster test")
        paused_at = utcnow()
        knew = max(_learned(replicas, True).values())
        for replica in replicas:  # every replica's listing knows, from the shared table
            tick = _paused(replica)
            assert tick["paused"] is True, (replica.replica_id, tick)
            assert tick["pause"]["reason"] == "cluster test"  # type: ignore[index]
        wait_for(
            lambda: all(_next_fire(r) > knew + timedelta(seconds=PAUSED_SLOTS) for r in replicas),
            what=f"every timer passing {PAUSED_SLOTS} slots while its copy says paused",
        )
        sleep_until_fraction(0.5)
        passed = min(_next_fire(r) for r in replicas)
        r = httpx.post(
            f"{replicas[2].url}/_voltro/inspect/schedules/{NAME}/resume", headers=AUTH, timeout=HANG
        )
        assert r.status_code == 200 and r.json()["changed"] is True, r.text
        back = max(_learned(replicas, False).values())
        after = seconds_between(back, back + timedelta(seconds=RESUMED_SLOTS))

        def fired_after() -> bool:
            fired = {
                r.scheduled_at
                for r in fetch_runs(postgres_url, NAME)
                if r.status is RunStatus.SUCCEEDED
            }
            return all(s in fired for s in after)

        wait_for(fired_after, what="every slot after the resume firing")
        sleep_until_fraction(0.5)
    rows = fetch_runs(postgres_url, NAME)
    logs = "\n".join(f"===== {r.replica_id}\n{r.log()}" for r in replicas)

    assert not duplicate_slots(rows), (duplicate_slots(rows), logs)
    before = [r for r in rows if r.scheduled_at < paused_at]
    assert len(before) >= 2, logs  # it was firing before the pause
    # Every replica dispatched the slots before `passed` after its copy said paused: nothing
    # fired, and no missed/skipped row either. (A slot its timer reached after the resume
    # fires: resume continues at the next occurrence.)
    span = seconds_between(knew + timedelta(microseconds=1), passed - timedelta(seconds=1))
    assert len(span) >= PAUSED_SLOTS, (knew, passed)
    in_span = [r for r in rows if knew < r.scheduled_at < passed]
    assert in_span == [], (in_span, logs)
    fired = {r.scheduled_at for r in rows if r.status is RunStatus.SUCCEEDED}
    assert len(after) >= RESUMED_SLOTS
    assert all(s in fired for s in after), ([s for s in after if s not in fired], logs)
