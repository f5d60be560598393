"""The leases and the fence of ``coordination="cluster"``, against the real servers.

Two :class:`LeaseStore`s on one database play two replicas. Expiry is the database's clock, so
the few waits here are real: a sleep longer than a short lease (200–300 ms) lets it expire,
however much longer the sleep takes. A lease that must still be live when it is next looked at
is a long one (60 s): on a busy machine the next statement can come later than 300 ms.
"""

from __future__ import annotations

import string
import time
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta

import anyio
import pytest
from prometheus_client import CollectorRegistry
from sqlalchemy import make_url, text
from sqlalchemy.ext.asyncio import AsyncConnection
from support.tcp_proxy import TcpProxy

from fastapi_voltro_schedules.coordination.claim import ClaimGate
from fastapi_voltro_schedules.coordination.cluster import (
    ClusterGate,
    Held,
    Membership,
    assigned,
    owner_of,
)
from fastapi_voltro_schedules.definition import Schedule
from fastapi_voltro_schedules.enums import CoordinationOutcome, RunStatus, Trigger
from fastapi_voltro_schedules.errors import StoreUnavailableError
from fastapi_voltro_schedules.ledger import Ledger, new_row
from fastapi_voltro_schedules.metrics import SchedulerMetrics
from fastapi_voltro_schedules.migrations import upgrade_to_head
from fastapi_voltro_schedules.store import RunRecord, Store, create_store
from fastapi_voltro_schedules.store.instrumented import InstrumentedStore, sql_store_behind
from fastapi_voltro_schedules.store.leases import LeaseStore
from fastapi_voltro_schedules.testing import ManualClock

SERVERS = [
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("mariadb", marks=pytest.mark.mariadb),
]
SLOT = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


# ------------------------------------------------------------------ rendezvous (pure)


def test_a_leave_moves_only_the_leavers_schedules_and_a_join_takes_only_its_share() -> None:
    names = [f"job-{a}{b}" for a in string.ascii_lowercase for b in string.ascii_lowercase[:8]]
    three = ["r-a", "r-b", "r-c"]
    before = {n: owner_of(n, three) for n in names}
    spread = {m: sum(1 for o in before.values() if o == m) for m in three}
    assert all(count > len(names) / 6 for count in spread.values()), spread

    after_leave = {n: owner_of(n, ["r-a", "r-b"]) for n in names}
    moved = {n for n in names if after_leave[n] != before[n]}
    assert moved == {n for n in names if before[n] == "r-c"}

    four = [*three, "r-d"]
    after_join = {n: owner_of(n, four) for n in names}
    changed = {n for n in names if after_join[n] != before[n]}
    assert changed and all(after_join[n] == "r-d" for n in changed)
    # every replica computes the same answer, whatever order it lists the members in
    assert assigned(names, list(reversed(four)), "r-d") == [
        n for n in names if after_join[n] == "r-d"
    ]


# ------------------------------------------------------------------ leases (servers)


@pytest.fixture(params=SERVERS)
async def store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    url = request.getfixturevalue(f"{request.param}_url")
    await upgrade_to_head(url)
    s = create_store(url)
    try:
        yield s
    finally:
        await s.dispose()


def _row(name: str, replica: str, slot: datetime = SLOT) -> RunRecord:
    return new_row(
        name,
        slot,
        RunStatus.RUNNING,
        Trigger.SELF,
        CoordinationOutcome.CLUSTER,
        datetime.now(UTC),
        replica,
    )


async def test_a_lease_is_held_by_one_member_and_moves_only_once_it_expires(
    store: Store,
) -> None:
    leases = LeaseStore(store)
    assert await leases.sync("a", ["x", "y"], 60_000, ensure=["x", "y"]) == {"x": 1, "y": 1}
    # b wants x too: a holds it unexpired, so b gets nothing (no stealing a live lease)
    assert await leases.sync("b", ["x"], 60_000, ensure=["x"]) == {}
    # renewing keeps the token (this last beat of a's renews for 300 ms only)
    assert await leases.sync("a", ["x", "y"], 300) == {"x": 1, "y": 1}
    await anyio.sleep(0.5)  # a stops beating: its leases expire on the database's clock
    assert await leases.sync("b", ["x"], 60_000) == {"x": 2}
    # a comes back: x is b's now (token 2), y was never wanted by anyone else (a re-takes it
    # expired, with a new token, so writes carrying its old token stay refused)
    assert await leases.sync("a", ["x", "y"], 300) == {"y": 2}
    rows = {lease.name: lease for lease in await leases.leases()}
    assert (rows["x"].owner, rows["x"].token) == ("b", 2)


async def test_a_release_hands_the_lease_over_at_once(store: Store) -> None:
    leases = LeaseStore(store)
    assert await leases.sync("a", ["x", "y"], 60_000, ensure=["x", "y"]) == {"x": 1, "y": 1}
    # a no longer wants x (a member joined): the same beat releases it
    assert await leases.sync("a", ["y"], 60_000) == {"y": 1}
    assert await leases.sync("b", ["x"], 60_000) == {"x": 2}
    await leases.leave("b")  # graceful shutdown: everything b holds is free now
    assert await leases.sync("a", ["x", "y"], 60_000) == {"x": 3, "y": 1}


async def test_a_stale_token_writes_nothing_and_the_current_one_writes(store: Store) -> None:
    leases = LeaseStore(store)
    assert await leases.sync("a", ["x"], 200, ensure=["x"]) == {"x": 1}
    await anyio.sleep(0.4)
    assert await leases.sync("b", ["x"], 60_000) == {"x": 2}
    # a was paused; it resumes believing it holds x with token 1
    assert await leases.insert_fenced([_row("x", "a")], "a", {"x": 1}) == []
    assert await store.list_runs("x") == []
    assert not await leases.claim_fenced("x@2026-12-01T09:00:00", "x", "a", 1, SLOT)
    assert await store.claim_holder("x@2026-12-01T09:00:00") is None
    written = await leases.insert_fenced([_row("x", "b")], "b", {"x": 2})
    assert [r.replica_id for r in written] == ["b"]
    assert [r.replica_id for r in await store.list_runs("x")] == ["b"]
    assert await leases.claim_fenced("x@2026-12-01T09:00:00", "x", "b", 2, SLOT)
    assert not await leases.claim_fenced("x@2026-12-01T09:00:00", "x", "b", 2, SLOT)


async def test_a_fenced_insert_is_counted_by_the_metrics_seam(store: Store) -> None:
    """The fenced insert writes on the SQL store's engine, past the seam: the seam is told
    of the rows it wrote (the running gauge), and only of those."""
    metrics = SchedulerMetrics(CollectorRegistry())
    leases = LeaseStore(InstrumentedStore(store, metrics))
    assert await leases.sync("a", ["x"], 60_000, ensure=["x", "y"]) == {"x": 1}
    written = await leases.insert_fenced([_row("x", "a"), _row("y", "a")], "a", {"x": 1, "y": 1})
    assert [r.name for r in written] == ["x"]
    for _ in range(3):
        await anyio.lowlevel.checkpoint()  # the gauge is touched two turns of the loop later
    assert metrics.registry is not None
    running = {
        name: metrics.registry.get_sample_value("voltro_schedule_running", {"name": name})
        for name in ("x", "y")
    }
    assert running == {"x": 1.0, "y": None}


async def test_an_expired_lease_writes_nothing_even_before_anyone_takes_it(
    store: Store,
) -> None:
    leases = LeaseStore(store)
    assert await leases.sync("a", ["x"], 200, ensure=["x"]) == {"x": 1}
    await anyio.sleep(0.4)  # nobody took it; the token still matches — the expiry refuses
    assert await leases.insert_fenced([_row("x", "a")], "a", {"x": 1}) == []
    assert await store.list_runs("x") == []


async def test_the_gate_trusting_a_stale_view_is_stopped_by_the_fence(store: Store) -> None:
    leases = LeaseStore(store)
    clock = ManualClock(SLOT)
    gate = ClusterGate(leases, ClaimGate(Ledger(store, clock, "a"), store, clock, "a"), clock, "a")
    assert await leases.sync("a", ["x"], 200, ensure=["x"]) == {"x": 1}
    # the local guard fooled (a clock that froze with the process): only the database decides
    gate.hold("x", Held(1, SLOT - timedelta(seconds=1), float("inf")))
    await anyio.sleep(0.4)
    assert await leases.sync("b", ["x"], 60_000) == {"x": 2}
    assert await gate.insert([_row("x", "a")]) == []
    assert "x" not in gate.held  # and it stops believing it owns x
    assert await store.list_runs("x") == []


async def test_a_replica_frozen_inside_its_beat_stalls_no_other_beat(store: Store) -> None:
    """A replica stopped (SIGSTOP, a VM pause) between its take and its commit keeps the lease
    row locked. The others' beats must not wait for it — a beat renews its own leases in the
    same transaction, so waiting would let every lease in the cluster lapse — and take that
    row only once the frozen transaction ended."""
    leases = LeaseStore(store)
    assert await leases.sync("a", ["x", "y"], 200, ensure=["x", "y", "z"]) == {"x": 1, "y": 1}
    assert await leases.sync("b", ["z"], 60_000) == {"z": 1}
    await anyio.sleep(0.4)  # a's leases expire
    sql = sql_store_behind(store)
    assert sql is not None
    async with sql.engine.connect() as frozen:
        await frozen.begin()
        await frozen.execute(
            text("UPDATE _voltro_schedule_leases SET token = token WHERE name = 'x'")
        )
        # b owns a's schedules now: it renews z and takes y, and leaves x for a later beat.
        # Both beats answer while x stays locked: one that waited for the lock would fail
        # (StoreUnavailableError) at the statement timeout instead.
        assert await leases.sync("b", ["x", "y", "z"], 60_000) == {"y": 2, "z": 1}
        assert await leases.sync("b", ["x", "y", "z"], 60_000) == {"y": 2, "z": 1}
        await frozen.rollback()
    assert await leases.sync("b", ["x", "y", "z"], 60_000) == {"x": 2, "y": 2, "z": 1}


async def test_a_replica_frozen_inside_a_fenced_insert_stalls_no_other_beat(
    store: Store,
) -> None:
    """The same inside the fence: a's insert share-locked its lease row x, then a froze before
    the rows went in — with a stale view of z too (b's). b renews z without waiting and takes
    x once the insert committed, so the takeover's catch-up reads a's row.

    a's clock stops as the fenced transaction begins (Postgres: ``now()`` is the transaction's
    start; MariaDB: the session's timestamp), and a's last beat renews x for 300 ms only after
    that: the fence finds x unexpired however long the machine takes to reach its lock, and x
    expires while a is frozen."""
    leases = LeaseStore(store)
    assert await leases.sync("a", ["x"], 60_000, ensure=["x", "z"]) == {"x": 1}
    assert await leases.sync("b", ["z"], 60_000) == {"z": 1}
    postgres = store.dialect_name == "postgresql"
    frozen_a = LeaseStore(store)
    inside, thaw = anyio.Event(), anyio.Event()
    read_committed, write = frozen_a._read_committed, frozen_a._insert_rows

    async def stop_the_clock(conn: AsyncConnection) -> None:
        await read_committed(conn)
        if postgres:
            await conn.execute(text("SELECT now()"))  # the transaction begins: now() stops
        else:
            await conn.execute(text("SET timestamp = UNIX_TIMESTAMP(SYSDATE(6))"))
        assert await leases.sync("a", ["x"], 300) == {"x": 1}  # a's last beat

    async def freeze_then_write(conn: AsyncConnection, runs: Sequence[RunRecord]) -> None:
        try:
            inside.set()
            await thaw.wait()
        finally:
            if not postgres:
                await conn.execute(text("SET timestamp = DEFAULT"))  # the pool's connection
        await write(conn, runs)

    frozen_a._read_committed = stop_the_clock  # type: ignore[method-assign]
    frozen_a._insert_rows = freeze_then_write  # type: ignore[method-assign]
    written: list[RunRecord] = []

    async def fenced() -> None:
        rows = [_row("x", "a"), _row("z", "a")]
        written.extend(await frozen_a.insert_fenced(rows, "a", {"x": 1, "z": 1}))

    async with anyio.create_task_group() as tg:
        tg.start_soon(fenced)
        try:
            await inside.wait()
            await anyio.sleep(0.4)  # a's lease on x expires while it is frozen
            # Answered while x stays locked: a beat that waited for the lock would fail
            # (StoreUnavailableError) at the statement timeout instead.
            assert await leases.sync("b", ["x", "z"], 60_000) == {"z": 1}
        finally:
            thaw.set()  # the fenced insert is shielded: a failure above must not hang on it
    assert [(r.name, r.replica_id) for r in written] == [("x", "a")]
    assert await leases.sync("b", ["x", "z"], 60_000) == {"x": 2, "z": 1}


def _schedule_x(cron: str) -> Schedule:
    from fastapi_voltro_schedules import define_schedule

    async def noop(ctx: object) -> None:
        return None

    return define_schedule(name="x", cron=cron, timezone="UTC", handler=noop)


def _one_member(store: Store, schedule: Schedule) -> tuple[ManualClock, ClusterGate, Membership]:
    """Replica ``a`` of a cluster with one schedule and a 60 s beat, its clock at 08:59:50."""
    clock = ManualClock(SLOT - timedelta(seconds=10))
    gate = ClusterGate(
        LeaseStore(store), ClaimGate(Ledger(store, clock, "a"), store, clock, "a"), clock, "a"
    )
    membership = Membership(
        gate=gate, store=store, clock=clock, schedules=[schedule], heartbeat_ms=60_000
    )
    return clock, gate, membership


async def test_the_assignment_is_worked_out_again_when_schedules_or_members_change(
    store: Store,
) -> None:
    """A beat keeps what rendezvous gave it while nothing changed (100,000 schedules are
    300,000 hashes a beat); a run-time schedule written or deleted, or a member joining, is
    shared out again at the next beat."""
    from fastapi_voltro_schedules import define_schedule

    async def noop(ctx: object) -> None:
        return None

    def schedule(name: str) -> Schedule:
        return define_schedule(name=name, cron="* * * * *", timezone="UTC", handler=noop)

    _, _, membership = _one_member(store, _schedule_x("* * * * *"))
    assert membership.want(["a"]) == ["x"]
    membership.put(schedule("w"))
    assert membership.want(["a"]) == ["w", "x"]
    membership.pop("x")
    assert membership.want(["a"]) == ["w"]
    names = [f"s{i}" for i in range(40)]
    for name in names:
        membership.put(schedule(name))
    two = ["a", "b"]
    assert membership.want(two) == assigned(sorted(["w", *names]), two, "a")
    assert 0 < len(membership.want(two)) < 41  # b's share is not a's
    assert membership.want(["a"]) == sorted(["w", *names])  # b left


async def test_a_lease_that_lapsed_here_but_was_held_on_is_caught_up(store: Store) -> None:
    """A late beat: the replica stopped trusting its lease (the local bound) and its gate
    refused a slot, while the database kept the lease its own with the same token. The next beat
    renews it — and must catch the refused slot up, since nobody else will fire it."""
    hourly = _schedule_x("0 * * * *")
    clock, gate, membership = _one_member(store, hourly)
    # the membership only answers what it took over (the engine starts those catch-ups)
    took = await membership.beat()  # takes x at 08:59:50: nothing to catch up
    assert gate.tokens() == {"x": 1} and took == {}

    clock.set(SLOT + timedelta(seconds=5))
    gate.held["x"].valid_until = time.monotonic() - 1  # the beat is late: trusted no longer
    assert await gate.elect(hourly, SLOT, Trigger.SELF) is None  # the 09:00 firing refused

    took = await membership.beat()  # the database kept x ours: same token
    assert gate.tokens() == {"x": 1}
    assert {n: p.fire + p.missed for n, p in took.items()} == {"x": [SLOT]}  # 09:00 caught up
    assert await gate.elect(hourly, SLOT, Trigger.SELF) is CoordinationOutcome.CLUSTER
    assert await gate.elect(hourly, SLOT, Trigger.SELF) is None  # once


async def test_a_late_beat_does_not_plan_again_a_slot_admitted_before_it(store: Store) -> None:
    """The same late beat, but 09:00 was admitted before the lease lapsed here and its row is
    still on its way (a herd's insert waiting for the pool): the ledger has no row of it yet.
    Taken over again with the same token, the catch-up must not plan 09:00 — its row is
    written through the same token, and the handler would run twice (test_cluster_coordination
    saw a slot twice under load)."""
    every_minute = _schedule_x("* * * * *")
    clock, gate, membership = _one_member(store, every_minute)
    await membership.beat()  # takes x at 08:59:50
    assert gate.tokens() == {"x": 1}
    before = SLOT - timedelta(minutes=1)
    assert await gate.elect(every_minute, before, Trigger.SELF) is CoordinationOutcome.CLUSTER
    assert len(await gate.insert([_row("x", "a", before)])) == 1  # 08:59 ran: in the ledger

    clock.set(SLOT + timedelta(seconds=5))
    assert await gate.elect(every_minute, SLOT, Trigger.SELF) is CoordinationOutcome.CLUSTER
    clock.set(SLOT + timedelta(seconds=65))
    gate.held["x"].valid_until = time.monotonic() - 1  # the beat is late: trusted no longer
    later = SLOT + timedelta(minutes=1)
    assert await gate.elect(every_minute, later, Trigger.SELF) is None  # 09:01 refused

    took = await membership.beat()  # same token; 09:00's row not in the ledger yet
    assert gate.tokens() == {"x": 1}
    assert {n: p.fire + p.missed for n, p in took.items()} == {"x": [later]}  # 09:01 only
    row = _row("x", "a")
    assert [r.id for r in await gate.insert([row])] == [row.id]  # 09:00's row lands
    assert await gate.elect(every_minute, SLOT, Trigger.SELF) is None  # and 09:00 is not again
    assert await gate.elect(every_minute, later, Trigger.SELF) is CoordinationOutcome.CLUSTER


async def test_a_fenced_insert_does_not_forget_a_slot_admitted_before_it(store: Store) -> None:
    """09:00 admitted, its row on its way; then 09:01's insert is fenced (the database let the
    lease lapse under load) and the lease is dropped here. The next beat takes it again — and
    must not plan 09:00, whose row then lands through the lease as held again: the handler
    ran twice for one slot at one replica (test_cluster_coordination, MariaDB, CI)."""
    every_minute = _schedule_x("* * * * *")
    clock, gate, membership = _one_member(store, every_minute)
    await membership.beat()  # takes x at 08:59:50
    before = SLOT - timedelta(minutes=1)
    assert await gate.elect(every_minute, before, Trigger.SELF) is CoordinationOutcome.CLUSTER
    assert len(await gate.insert([_row("x", "a", before)])) == 1  # 08:59 ran: in the ledger
    clock.set(SLOT + timedelta(seconds=5))
    assert await gate.elect(every_minute, SLOT, Trigger.SELF) is CoordinationOutcome.CLUSTER
    later = SLOT + timedelta(minutes=1)
    clock.set(later + timedelta(seconds=5))
    assert await gate.elect(every_minute, later, Trigger.SELF) is CoordinationOutcome.CLUSTER
    gate.held["x"].token += 1  # the token no longer the database's: the insert is fenced
    assert await gate.insert([_row("x", "a", later)]) == []
    assert gate.tokens() == {}  # dropped

    took = await membership.beat()  # x again (09:00's row not in the ledger yet)
    assert gate.tokens() == {"x": 1}
    assert {n: p.fire + p.missed for n, p in took.items()} == {"x": [later]}  # 09:01 only
    row = _row("x", "a")
    assert [r.id for r in await gate.insert([row])] == [row.id]  # 09:00's row lands
    assert await gate.elect(every_minute, SLOT, Trigger.SELF) is None  # and 09:00 is not again
    assert await gate.elect(every_minute, later, Trigger.SELF) is CoordinationOutcome.CLUSTER


@pytest.mark.parametrize("server", SERVERS)
async def test_a_lease_statement_cut_off_raises_the_store_error_counter(
    server: str, request: pytest.FixtureRequest
) -> None:
    """The lease statements run on the SQL store's engine, past the metrics seam: an outage of
    one is still counted under its operation — a cluster that cannot beat raises the same
    store-error alert as one that cannot record."""
    db = make_url(request.getfixturevalue(f"{server}_url"))
    await upgrade_to_head(db.render_as_string(hide_password=False))
    metrics = SchedulerMetrics(CollectorRegistry())
    with TcpProxy(db.host or "127.0.0.1", db.port or 0) as proxy:
        url = db.set(port=proxy.port).render_as_string(hide_password=False)
        store = InstrumentedStore(create_store(url), metrics)
        try:
            leases = LeaseStore(store)
            assert "a" in await leases.beat("a", 60_000)  # through the proxy
            proxy.cut()
            with pytest.raises(StoreUnavailableError):
                await leases.beat("a", 60_000)
            with pytest.raises(StoreUnavailableError):
                await leases.sync("a", ["x"], 60_000, ensure=["x"])
        finally:
            proxy.restore()
            await store.dispose()
    assert metrics.registry is not None
    errors = {
        op: metrics.registry.get_sample_value(
            "voltro_schedule_store_errors_total", {"operation": op}
        )
        for op in ("cluster_beat", "cluster_leases")
    }
    assert errors == {"cluster_beat": 1.0, "cluster_leases": 1.0}


def test_ownership_changes_are_a_line_each_up_to_twenty_then_one_counted_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A replica joining a fleet of 100,000 schedules takes tens of thousands of leases at one
    beat: a line each was hundreds of thousands of lines, and seconds of the beat that must
    renew them before they expire."""
    import logging

    from fastapi_voltro_schedules.coordination.cluster import LOG_EACH, _tell

    few = [f"name=s{i} to=r-b" for i in range(LOG_EACH)]
    many = [f"name=s{i} token=3 fire=0 missed=0" for i in range(30_000)]
    with caplog.at_level(logging.INFO, logger="fastapi_voltro_schedules"):
        _tell(logging.INFO, "ownership moved", few)
        _tell(logging.INFO, "took ownership", many)
        _tell(logging.WARNING, "lease lost — taken over", [])
    lines = [r.getMessage() for r in caplog.records]
    assert lines[:LOG_EACH] == [f"schedule: ownership moved  {item}" for item in few]
    assert lines[LOG_EACH:] == [
        "schedule: took ownership  count=30000 first: "
        + "; ".join(f"name=s{i} token=3 fire=0 missed=0" for i in range(5))
        + " …"
    ]
