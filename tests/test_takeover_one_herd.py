"""A ``cluster`` takeover's catch-ups go through the door together: one herd, one fenced insert.

Found by the herd bench (Postgres ×3 ``cluster``, 10,000 schedules): a replica that took over
3,000 schedules at the herd's instant started one catch-up per schedule, each with its own
fenced insert. 3,000 firings raced for the pool, the store stopped answering within its 8 s
bound, and 2,619 slots failed closed.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest
from support.running import running, runs_of
from support.waiting import wait_until

from fastapi_voltro_schedules import RunStatus, ScheduleContext, define_schedule
from fastapi_voltro_schedules.coordination.cluster import ClusterGate
from fastapi_voltro_schedules.migrations import upgrade_to_head
from fastapi_voltro_schedules.planning import CatchUpPlan
from fastapi_voltro_schedules.store import RunRecord
from fastapi_voltro_schedules.testing import ManualClock

T0 = datetime(2030, 6, 1, 12, 0, 0, tzinfo=UTC)
N = 40


async def noop(ctx: ScheduleContext) -> None:
    return None


@pytest.mark.postgres
async def test_a_takeover_of_many_schedules_is_one_herd_with_one_fenced_insert(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    inserts: list[int] = []
    fenced = ClusterGate.insert

    async def counted(self: ClusterGate, rows: Sequence[RunRecord]) -> list[RunRecord]:
        inserts.append(len(rows))
        return await fenced(self, rows)

    monkeypatch.setattr(ClusterGate, "insert", counted)
    schedules = [
        define_schedule(name=f"t{i:02d}", cron="0 0 1 1 *", timezone="UTC", handler=noop)
        for i in range(N)
    ]
    await upgrade_to_head(postgres_url)
    clock = ManualClock(T0)
    async with running(schedules, postgres_url, clock, coordination="cluster") as s:
        engine = s.engine
        assert engine is not None and engine.membership is not None
        await wait_until(
            lambda: len(engine.membership.gate.held) == N,  # type: ignore[union-attr]
            what="the only replica holding every lease",
        )
        inserts.clear()
        # What a beat answers when it took these schedules over: each owes one slot (a slot
        # after the lease's boundary, so the lease admits it).
        slot = T0 + timedelta(seconds=30)
        engine._take_over({sch.name: CatchUpPlan(fire=[slot]) for sch in schedules})

        async def all_ran() -> bool:
            rows = [r for sch in schedules for r in await runs_of(s, sch.name)]
            return len(rows) == N and all(r.status is RunStatus.SUCCEEDED for r in rows)

        await wait_until(all_ran, what="every schedule taken over ran its slot")
    assert inserts == [N], inserts
