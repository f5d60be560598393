"""A replica killed at any moment of a firing leaves no claim without its row (issue 29 item 9).

Three replicas under ``advisoryLock``, 40 every-second schedules each (a herd a second). Again
and again a random replica is frozen (SIGSTOP) in the first 40 ms of a second — where its herd
is being claimed and recorded — the ledger is read while it cannot move, and then it is killed
(SIGKILL) and restarted. Before claims and rows shared a transaction, a replica frozen there
held claims of slots with no row: killed, it lost every such slot for good (no row, no
``missed``, nobody ran it; 280 slots in 7 of 68 kills). Now the ledger never shows a claim of
a slot without its row, frozen or killed, and ``voltro schedule audit`` over the whole window
is clean once the killed replicas' rows are reaped.
"""

from __future__ import annotations

import random
import signal
import time
from contextlib import ExitStack
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import select
from support.cluster import Replica, fetch_runs, run_async, utcnow, uvicorn_cluster
from support.waiting import wait_for

from fastapi_voltro_schedules import ScheduleContext, define_schedule
from fastapi_voltro_schedules.audit import AuditReport, audit_ledger
from fastapi_voltro_schedules.migrations import upgrade_to_head
from fastapi_voltro_schedules.models import claim_key, claims_table
from fastapi_voltro_schedules.store import create_store

pytestmark = [pytest.mark.slow]

SCHEDULES = 40
FREEZES = 12
HEARTBEAT_MS = 1000
NAMES = [f"tick{i}" for i in range(SCHEDULES)]


def _env(url: str, i: int) -> dict[str, str]:
    return {
        "VOLTRO_DATABASE_URL": url,
        "VOLTRO_REPLICA_ID": f"r{i}",
        "VOLTRO_COORDINATION": "advisoryLock",
        "VOLTRO_SCHEDULE_HEARTBEAT_MS": str(HEARTBEAT_MS),
        "VOLTRO_SHUTDOWN_GRACE_MS": "0",
        "CLUSTER_SCHEDULES": "",
        "CLUSTER_TICKS": str(SCHEDULES),
    }


def unrecorded_claims(url: str) -> list[str]:
    """Claims of the schedules' slots with no row. Claims are read first: a firing that
    commits between the two reads shows its row too."""

    async def read() -> list[str]:
        store = create_store(url)
        try:
            async with store.engine.connect() as conn:  # type: ignore[attr-defined]
                result = await conn.execute(select(claims_table.c.key))
                return [str(key) for (key,) in result]
        finally:
            await store.dispose()

    keys = [k for k in run_async(read()) if k.partition("@")[0] in NAMES]
    recorded = {claim_key(r.name, r.scheduled_at) for r in fetch_runs(url)}
    return [k for k in keys if k not in recorded]


def early_in_a_second() -> None:
    """Sleep until 5–35 ms past a whole second: where a herd is claimed and recorded."""
    now = time.time()
    target = int(now) + 1 + random.uniform(0.005, 0.035)
    time.sleep(target - now)


def audit(url: str, start: datetime, end: datetime) -> AuditReport:
    async def noop(ctx: ScheduleContext) -> None:
        return None

    schedules = [
        define_schedule(name=n, cron="* * * * * *", timezone="UTC", backfill="all", handler=noop)
        for n in NAMES
    ]

    async def read() -> AuditReport:
        store = create_store(url)
        try:
            return await audit_ledger(store, schedules, start, end, heartbeat_ms=HEARTBEAT_MS)
        finally:
            await store.dispose()

    return run_async(read())


@pytest.mark.parametrize("store", [
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("mariadb", marks=pytest.mark.mariadb),
])  # fmt: skip
def test_a_replica_frozen_or_killed_mid_herd_holds_no_claim_without_its_row(
    store: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    url: str = request.getfixturevalue(f"{store}_url")
    run_async(upgrade_to_head(url))
    found: list[tuple[int, list[str]]] = []
    generation = 0
    with ExitStack() as stack:

        def start(i: int) -> Replica:
            nonlocal generation
            generation += 1
            where = tmp_path / f"gen{generation}-r{i}"
            where.mkdir()
            (replica,) = stack.enter_context(uvicorn_cluster(where, [_env(url, i)]))
            return replica

        replicas = [start(i) for i in range(3)]
        begin = max(r.ready_at for r in replicas if r.ready_at is not None)
        rng = random.Random(29_9)
        for attempt in range(FREEZES):
            i = rng.randrange(3)
            early_in_a_second()
            replicas[i].process.send_signal(signal.SIGSTOP)
            frozen = unrecorded_claims(url)
            if frozen:
                found.append((attempt, frozen))
            replicas[i].signal(signal.SIGKILL)
            replicas[i] = start(i)
        end = utcnow() - timedelta(seconds=2)
        # Once the killed replicas' running rows are reaped (three beats), every slot of the
        # window has exactly one row saying what became of it.
        report = wait_for(
            lambda: (r := audit(url, begin, end)).clean and r,
            interval=1.0,
            what="the audit clean over the window",
        )
        left = unrecorded_claims(url)
    assert found == [], f"frozen replicas held claims without rows: {found}"
    assert left == []
    assert report.gap_checked == tuple(NAMES)
    print(f"\n{store}: {FREEZES} freezes+kills, {report.rows} rows audited clean")
