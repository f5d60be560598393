"""A schedule's whole life on a fleet (issue 29): three real replicas on Postgres and on
MariaDB run nine schedules — ``backfill`` ``all``/``latest``/``skip`` × ``on_overlap``
``skip``/``queue``/``parallel``, every two seconds — while a driver

* SIGKILLs replicas at random moments and restarts them (a pod restart, same id);
* pauses a ``queue`` schedule while a firing waits in its line, checks the waiter is held
  (still ``queued``, its handler not started), and resumes it;
* stops the whole fleet, then redeploys it with one schedule's cron edited (``*/2`` → ``*/3``
  seconds) — every replica catches the downtime up — and SIGKILLs a replica while it holds a
  slot of that catch-up (a ``running`` or ``queued`` row of a slot from the downtime);
* goes on killing at random.

Then, once every owed slot has a row and nothing is left ``running`` or ``queued``:
``voltro schedule audit`` over the window exits 0, and the test's own reading of the tables
finds no slot run twice (handler markers, and ledger rows) and no owed slot without a row —
"owed" computed here from ``_voltro_schedule_definitions`` (each version's cron from its
``effective_from``) and every pause span, independently of the package's planning; and every
downtime slot of the ``backfill="all"`` schedules was run after the redeploy (none written off
``missed``/``skipped``; one the catch-up kill landed on ends ``failed/abandoned``).

Bounded: the chaos lasts about 30 s, the whole test well under 90 s per store on an idle
machine; waits on real work are conditions with :data:`~support.waiting.HANG` deadlines.
``pytest -s`` prints the figures.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections import Counter
from contextlib import ExitStack
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import pytest
from apps.cluster_app import LIFE_BACKFILLS, LIFE_CRON, LIFE_EDITED_CRON, LIFE_OVERLAPS
from support.cluster import (
    Replica,
    audit_cli,
    fetch_runs,
    pause_schedule,
    read_markers,
    run_async,
    utcnow,
    uvicorn_cluster,
)
from support.waiting import HANG, wait_for

from fastapi_voltro_schedules import RunStatus
from fastapi_voltro_schedules.clock import iso_z
from fastapi_voltro_schedules.migrations import upgrade_to_head
from fastapi_voltro_schedules.planning import BOOT_GRACE
from fastapi_voltro_schedules.records import DefinitionRecord, PauseRecord
from fastapi_voltro_schedules.store import RunRecord, create_store

pytestmark = [pytest.mark.slow]

SERVERS = [
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("mariadb", marks=pytest.mark.mariadb),
]
HEARTBEAT_MS = 1000
TOKEN = "life-cycle-inspect-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
NAMES = [f"life-{b}-{o}" for b in LIFE_BACKFILLS for o in LIFE_OVERLAPS]
EDITED = "life-latest-skip"
PAUSED = "life-all-queue"
KILL_PHASE_SECONDS = 8.0
DOWN_SECONDS = 6.0
PAUSE_SECONDS = 3.0
PAUSE_TRIES = 4


class Fleet:
    """Three replicas of ``apps.cluster_app`` with the life-cycle schedules; a restarted
    replica is a new process under the same id."""

    def __init__(self, tmp: Path, url: str, stack: ExitStack) -> None:
        self.tmp, self.url, self.stack = tmp, url, stack
        self.markers = tmp / "markers"
        self.markers.mkdir()
        self.edited = False
        self.generation = 0
        self.replicas: list[Replica] = []

    def env(self, i: int) -> dict[str, str]:
        return {
            "VOLTRO_DATABASE_URL": self.url,
            "VOLTRO_REPLICA_ID": f"r{i}",
            "VOLTRO_COORDINATION": "advisoryLock",
            "VOLTRO_SCHEDULE_HEARTBEAT_MS": str(HEARTBEAT_MS),
            "VOLTRO_SHUTDOWN_GRACE_MS": "500",
            "VOLTRO_INSPECT_TOKEN": TOKEN,
            "CLUSTER_SCHEDULES": "",
            "CLUSTER_LIFE": "1",
            "CLUSTER_MARKER_DIR": str(self.markers),
            **({"CLUSTER_LIFE_EDIT": EDITED} if self.edited else {}),
        }

    def start(self, indices: list[int]) -> list[Replica]:
        """Start these replicas together (in parallel) and wait until each answers."""
        self.generation += 1
        where = self.tmp / f"gen{self.generation}"
        where.mkdir()
        started = self.stack.enter_context(uvicorn_cluster(where, [self.env(i) for i in indices]))
        for i, replica in zip(indices, started, strict=True):
            if i < len(self.replicas):
                self.replicas[i] = replica
            else:
                self.replicas.append(replica)
        return started

    def kill(self, i: int) -> None:
        replica = self.replicas[i]
        replica.signal(signal.SIGKILL)
        replica.process.wait(HANG)

    def stop_all(self) -> None:
        """A deploy's stop: SIGTERM to every live replica, waited for."""
        live = [r for r in self.replicas if r.process.poll() is None]
        for replica in live:
            replica.signal(signal.SIGTERM)
        for replica in live:
            replica.process.wait(HANG)

    def live(self) -> list[Replica]:
        return [r for r in self.replicas if r.process.poll() is None]


def kill_phase(fleet: Fleet, seconds: float, rng: random.Random, faults: Counter[str]) -> None:
    """SIGKILL a random replica every 1.5–3 s and restart it at once (at least one kill)."""
    until = time.monotonic() + seconds
    while True:
        time.sleep(rng.uniform(1.5, 3.0))  # when the next kill lands: the fault's timing
        i = rng.randrange(3)
        fleet.kill(i)
        faults["kill"] += 1
        fleet.start([i])
        if time.monotonic() >= until:
            return


def pause_with_a_waiter(fleet: Fleet, url: str, faults: Counter[str]) -> PauseCheck:
    """Pause ``PAUSED`` while one of its firings waits in line; the waiter is held. A waiter
    whose turn came before every replica knew of the pause leaves nothing to hold: then the
    schedule is resumed and paused again at its next waiter (at most :data:`PAUSE_TRIES`)."""

    def waiter() -> RunRecord | None:
        rows = fetch_runs(url, PAUSED)
        return next((r for r in rows if r.status is RunStatus.QUEUED), None)

    for _ in range(PAUSE_TRIES):
        wait_for(waiter, interval=0.05, what=f"a firing of {PAUSED} waiting in line")
        pause_schedule(fleet.live()[0], PAUSED, TOKEN, "life-cycle test")
        # Whatever waits in line once every replica knows of the pause is held there. A lower
        # bound: each replica re-reads its pause copy every second (pauses.REFRESH_SECONDS),
        # and waiting longer only makes "every replica knows" truer.
        time.sleep(2.5)
        held = [r for r in fetch_runs(url, PAUSED) if r.status is RunStatus.QUEUED]
        if held:
            time.sleep(PAUSE_SECONDS)  # the pause's length: the fault, not a wait for a result
        still = {r.id: r for r in fetch_runs(url, PAUSED)}
        r = httpx.post(
            f"{fleet.live()[-1].url}/_voltro/inspect/schedules/{PAUSED}/resume",
            headers=AUTH,
            timeout=HANG,
        )
        assert r.status_code == 200, r.text
        faults["pause"] += 1
        if held:
            return PauseCheck(held, still)
    return PauseCheck([], {})


class PauseCheck:
    """The waiters seen in line once the pause was known, and the same rows a pause later."""

    def __init__(self, held: list[RunRecord], later: dict[str, RunRecord]) -> None:
        self.held, self.later = held, later

    def started_while_paused(self) -> list[RunRecord]:
        return [
            self.later[r.id]
            for r in self.held
            if r.id in self.later and self.later[r.id].status is not RunStatus.QUEUED
        ]


def redeploy_and_kill_a_catch_up(
    fleet: Fleet, url: str, faults: Counter[str]
) -> tuple[datetime, datetime]:
    """Stop the whole fleet, redeploy it with ``EDITED``'s cron changed after
    :data:`DOWN_SECONDS`, and SIGKILL a replica while it holds a slot of the catch-up.
    Returns when the fleet went down and when its processes were spawned again: a slot in
    between is the catch-up's (a replica's live timer starts after its process does; a slot
    after the spawn may be a live slot, which follows ``on_overlap``)."""
    fleet.stop_all()
    down = utcnow()
    time.sleep(DOWN_SECONDS)  # the downtime: the slots a catch-up owes
    fleet.edited = True
    spawned = utcnow()
    fleet.start([0, 1, 2])

    def catching_up() -> tuple[int, RunRecord] | None:
        for row in fetch_runs(url):
            if (
                row.status in (RunStatus.RUNNING, RunStatus.QUEUED)
                and row.name.startswith("life-all-")
                and down < row.scheduled_at < spawned
                and row.replica_id
            ):
                return int(row.replica_id[1:]), row
        return None

    victim, row = wait_for(catching_up, interval=0.02, what="a replica holding a catch-up slot")
    fleet.kill(victim)
    faults["kill during catch-up"] += 1
    held = f"{row.name}@{iso_z(row.scheduled_at)} ({row.status})"
    print(f"\n  {iso_z(utcnow())} killed r{victim} holding {held}")
    fleet.start([victim])
    return down, spawned


def every_n(cron: str) -> int:
    assert cron in (LIFE_CRON, LIFE_EDITED_CRON), cron
    return int(cron.split()[0].removeprefix("*/"))


def owed_slots(
    versions: list[DefinitionRecord], pauses: list[PauseRecord], start: datetime, end: datetime
) -> list[datetime]:
    """The slots of one schedule in ``(start, end]``: each definition version's cron within
    ``(effective_from, next effective_from]``, minus every paused span (a pause retried at a
    later waiter leaves one span per try)."""
    ordered = sorted(versions, key=lambda v: v.effective_from)
    slots: list[datetime] = []
    for i, version in enumerate(ordered):
        lo = max(start, version.effective_from)
        hi = end if i + 1 == len(ordered) else min(end, ordered[i + 1].effective_from)
        n = every_n(version.cron)
        at = lo.replace(microsecond=0) + timedelta(seconds=1)
        while at <= hi:
            if at.second % n == 0:
                slots.append(at)
            at += timedelta(seconds=1)
    for pause in pauses:
        assert pause.resumed_at is not None, f"{pause.name} left paused"
        slots = [s for s in slots if not pause.paused_at < s <= pause.resumed_at]
    return slots


def read_tables(url: str) -> tuple[list[DefinitionRecord], list[PauseRecord]]:
    async def read() -> tuple[list[DefinitionRecord], list[PauseRecord]]:
        store = create_store(url)
        try:
            found = await store.definitions(NAMES)
            return [v for vs in found.values() for v in vs], list(await store.pause_spans())
        finally:
            await store.dispose()

    return run_async(read())


@pytest.mark.parametrize("server", SERVERS)
def test_life_cycle_redeploy_edit_pause_kills_mid_catch_up_audit_clean(
    server: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    url = request.getfixturevalue(f"{server}_url")
    run_async(upgrade_to_head(url))
    rng = random.Random(int(os.environ.get("VOLTRO_CHAOS_SEED", str(int(time.time())))))
    faults: Counter[str] = Counter()
    began = time.monotonic()
    with ExitStack() as stack:
        fleet = Fleet(tmp_path, url, stack)
        fleet.start([0, 1, 2])
        start = max(r.ready_at for r in fleet.replicas if r.ready_at) + timedelta(seconds=1)
        kill_phase(fleet, KILL_PHASE_SECONDS, rng, faults)
        paused = pause_with_a_waiter(fleet, url, faults)
        down, spawned = redeploy_and_kill_a_catch_up(fleet, url, faults)
        # Slots within the boot grace of a replica's boot are its live timer's (catchup.py),
        # which follows on_overlap; the processes boot after their spawn, so every slot up to
        # this one is owed by the catch-up of every replica.
        owed_until = spawned - BOOT_GRACE
        kill_phase(fleet, KILL_PHASE_SECONDS, rng, faults)
        end = utcnow() - timedelta(seconds=1)
        versions, pauses = read_tables(url)
        owed = {
            name: owed_slots([v for v in versions if v.name == name],
                             [p for p in pauses if p.name == name], start, end)
            for name in NAMES
        }  # fmt: skip

        def without_row(rows: list[RunRecord]) -> list[tuple[str, datetime]]:
            recorded = {(r.name, r.scheduled_at) for r in rows}
            return [(n, s) for n, slots in owed.items() for s in slots if (n, s) not in recorded]

        def settled() -> list[RunRecord] | None:
            rows = fetch_runs(url)
            stuck = [r for r in rows if r.status in (RunStatus.RUNNING, RunStatus.QUEUED)
                     and r.scheduled_at <= end]  # fmt: skip
            return None if stuck or without_row(rows) else rows

        try:
            # Corpses are marked, owed queued rows resumed — by the replicas, in their own time.
            wait_for(settled, interval=0.5, what="every owed slot recorded, nothing in flight")
        except AssertionError as exc:
            print(f"\nnot settled: {exc}")  # the checks below say what is left
        fleet.stop_all()
        rows = [r for r in fetch_runs(url) if r.scheduled_at <= end]
        markers = [m for m in read_markers(fleet.markers) if m.slot <= end]
        app_env = fleet.env(0)
    took = time.monotonic() - began

    executed = Counter((m.name, m.slot) for m in markers)
    ran_twice = {k: n for k, n in executed.items() if n > 1}
    fired = Counter(
        (r.name, r.scheduled_at)
        for r in rows
        if r.status not in (RunStatus.SKIPPED, RunStatus.MISSED)
    )
    fired_twice = {k: n for k, n in fired.items() if n > 1}
    missing = without_row(rows)
    stuck = [r for r in rows if r.status in (RunStatus.RUNNING, RunStatus.QUEUED)]
    edited = sorted((v.version, v.cron) for v in versions if v.name == EDITED)
    outcomes = Counter(r.status.value + (f"/{r.error_tag}" if r.error_tag else "") for r in rows)
    downtime = [
        r for r in rows if down < r.scheduled_at <= owed_until and r.name.startswith("life-all-")
    ]
    caught_up = Counter(r.name for r in downtime if r.status is RunStatus.SUCCEEDED)
    # Under `all` a downtime slot is run, never written off; one the kill landed on ends
    # failed/abandoned (its handler may have had side effects — never run again).
    written_off = [r for r in downtime if r.status in (RunStatus.MISSED, RunStatus.SKIPPED)]
    audited = audit_cli(app_env, start, end)
    print(
        f"\nlife-cycle figures ({server}):"
        f"\n  took {took:.1f} s; window {iso_z(start)} – {iso_z(end)}; faults {dict(faults)}"
        f"\n  owed slots {sum(len(s) for s in owed.values())}; rows {len(rows)}; "
        f"handler executions {len(markers)}"
        f"\n  outcomes {dict(sorted(outcomes.items()))}"
        f"\n  `all` downtime slots run after the redeploy: {dict(sorted(caught_up.items()))}; "
        f"their outcomes {dict(Counter(r.status.value for r in downtime))}"
        f"\n  {EDITED} versions {edited}"
        f"\n  run twice: {len(ran_twice)} (markers), {len(fired_twice)} (ledger); owed without a "
        f"row: {len(missing)}; left running/queued: {len(stuck)}"
        f"\n  voltro schedule audit: exit {audited.returncode}: {audited.stdout.strip()[:400]}"
    )
    assert audited.returncode == 0, audited.stdout + audited.stderr
    assert not ran_twice, ran_twice
    assert not fired_twice, fired_twice
    assert not missing, missing[:20]
    assert not stuck, stuck[:5]
    assert paused.held, "no firing waited in line once the pause was known"
    assert not paused.started_while_paused(), paused.started_while_paused()
    assert [c for _, c in edited] == [LIFE_CRON, LIFE_EDITED_CRON], edited
    # every `all` schedule ran its downtime slots (the edited one is `latest`); with `missing`
    # empty, each of them has a row
    assert not written_off, [
        (r.name, iso_z(r.scheduled_at), r.status, r.error_tag, r.replica_id) for r in written_off
    ]
    # each was run after the redeploy — succeeded, or failed when a kill (the one during the
    # catch-up, or a later random one) landed on its run; how many succeed is up to the kills
    started = {RunStatus.SUCCEEDED, RunStatus.FAILED}
    assert downtime and all(r.status in started and r.fired_at for r in downtime), downtime
    assert {r.name for r in downtime} == {f"life-all-{o}" for o in LIFE_OVERLAPS}, downtime
    assert faults["kill"] >= 2 and faults["kill during catch-up"] == 1, faults
