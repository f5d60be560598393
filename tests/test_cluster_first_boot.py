"""``coordination="cluster"``'s first boot fires no past slot of a ``backfill="skip"`` schedule
(issue 29 item 8; docs/backfill.md says that never happens).

A replica taking a schedule over catches up the slots its previous owner left, and fires the
ones of the last heartbeat or so whatever the policy (a handover). On a first boot there was
no previous owner: before definition versions, the takeover still fired the handover's slots
— 6 past slots of an every-second ``skip`` schedule, from before the app even started. Now the
schedule's first version took effect at that boot, and no slot before it is owed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.cluster import fetch_runs, run_async, utcnow, uvicorn_cluster
from support.waiting import wait_for

from fastapi_voltro_schedules import RunStatus
from fastapi_voltro_schedules.migrations import upgrade_to_head

pytestmark = [pytest.mark.slow]

HEARTBEAT_MS = 4000
"""A long beat: the handover a takeover fires was ``heartbeat + 2 s`` = 6 slots."""


@pytest.mark.parametrize("store", [
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("mariadb", marks=pytest.mark.mariadb),
])  # fmt: skip
def test_the_first_boot_fires_no_slot_from_before_it(
    store: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    url: str = request.getfixturevalue(f"{store}_url")
    run_async(upgrade_to_head(url))
    env = {
        "VOLTRO_DATABASE_URL": url,
        "VOLTRO_REPLICA_ID": "first",
        "VOLTRO_COORDINATION": "cluster",
        "VOLTRO_SCHEDULE_HEARTBEAT_MS": str(HEARTBEAT_MS),
        "CLUSTER_SCHEDULES": "",
        "CLUSTER_TICKS": "1",
        "CLUSTER_TICKS_BACKFILL": "skip",
    }
    launched = utcnow()
    with uvicorn_cluster(tmp_path, [env]) as (replica,):
        assert replica.ready_at is not None
        ready = replica.ready_at
        # it owns the schedule and fires: three live slots after it answered
        rows = wait_for(
            lambda: (
                [r for r in fetch_runs(url, "tick0") if r.scheduled_at > ready][2:]
                and fetch_runs(url, "tick0")
            ),
            what="three slots fired after the replica answered",
        )
    early = [r for r in rows if r.scheduled_at <= launched]
    assert early == [], f"slots from before the process was launched were fired: {early}"
    assert all(r.trigger.value == "self" for r in rows)
    # nothing before the boot is owed, so nothing is recorded missed either
    assert [r for r in rows if r.status is RunStatus.MISSED] == []
