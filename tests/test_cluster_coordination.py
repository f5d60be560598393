"""``coordination="cluster"`` across real replicas: one owner per schedule, fenced.

Three uvicorn processes of ``apps.cluster_app`` share one Postgres or MariaDB ledger, with six
every-second schedules (``tick0``…``tick5``, ``backfill="all"``) and a 500 ms heartbeat (a lease
lasts two beats). What the ledger must show, read from the database itself:

* steady state: every second of every schedule exactly once, ``coordination_outcome="cluster"``,
  the schedules spread over at least two owners, every handler execution once (marker files);
* SIGKILL an owner: its schedules fire again from a survivor within three beats and a period,
  no slot twice — and with ``backfill="all"`` the takeover's catch-up leaves no hole either;
* SIGSTOP an owner past its lease, then SIGCONT: it writes nothing for the slots it lost (no
  duplicate, no row of it for any slot of its frozen stretch), and the cluster goes on;
* halt an owner inside its lease transaction (its rows locked): the others fire their own
  schedules on time meanwhile, and catch its schedules up once the transaction ends.
"""

from __future__ import annotations

import re
import signal
import time
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from support.cluster import (
    Replica,
    duplicate_slots,
    fetch_runs,
    read_markers,
    run_async,
    seconds_between,
    sleep_until_fraction,
    utcnow,
    uvicorn_cluster,
)
from support.waiting import wait_for

from fastapi_voltro_schedules.enums import CoordinationOutcome, RunStatus
from fastapi_voltro_schedules.migrations import upgrade_to_head
from fastapi_voltro_schedules.store import RunRecord

pytestmark = pytest.mark.slow

STORES = [
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("mariadb", marks=pytest.mark.mariadb),
]
HEARTBEAT_MS = 500
BEAT = timedelta(milliseconds=HEARTBEAT_MS)
PERIOD = timedelta(seconds=1)
NAMES = [f"tick{i}" for i in range(6)]
TOOK = re.compile(r"schedule: took ownership  name=(?P<name>\S+) token=(?P<token>\d+)")


def _env(url: str, replica_id: str, markers: Path) -> dict[str, str]:
    return {
        "VOLTRO_DATABASE_URL": url,
        "VOLTRO_REPLICA_ID": replica_id,
        "VOLTRO_COORDINATION": "cluster",
        "VOLTRO_SCHEDULE_HEARTBEAT_MS": str(HEARTBEAT_MS),
        "VOLTRO_SHUTDOWN_GRACE_MS": "200",
        "CLUSTER_SCHEDULES": "",
        "CLUSTER_TICKS": str(len(NAMES)),
        "CLUSTER_MARKER_DIR": str(markers),
    }


def _start(url: str, tmp_path: Path, prefix: str) -> tuple[Path, list[dict[str, str]]]:
    run_async(upgrade_to_head(url))
    markers = tmp_path / "markers"
    markers.mkdir()
    return markers, [_env(url, f"{prefix}-r{i}", markers) for i in range(3)]


def _owners(rows: list[RunRecord], since: datetime) -> dict[str, str]:
    """The replica that wrote each schedule's newest row after ``since``."""
    out: dict[str, str] = {}
    for row in rows:
        if row.scheduled_at > since:
            out[row.name] = row.replica_id
    return out


def _settled(url: str, since: datetime) -> dict[str, str] | None:
    """Once every schedule has fired a slot after ``since``: who owns what."""
    owners = _owners(fetch_runs(url), since)
    return owners if set(owners) == set(NAMES) else None


def _assert_each_second_once(rows: list[RunRecord], start: datetime, end: datetime) -> None:
    by_slot = Counter((r.name, r.scheduled_at) for r in rows)
    holes = [(n, s) for n in NAMES for s in seconds_between(start, end) if by_slot[(n, s)] == 0]
    assert not holes, f"slots never recorded: {holes[:10]} (of {len(holes)})"
    assert not duplicate_slots(rows), duplicate_slots(rows)


@pytest.mark.parametrize("store", STORES)
def test_three_replicas_own_six_schedules_and_a_killed_owners_move_within_three_beats(
    store: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    url = request.getfixturevalue(f"{store}_url")
    markers, envs = _start(url, tmp_path, f"{store}-kill")
    with uvicorn_cluster(tmp_path, envs) as replicas:
        booted = max(r.ready_at for r in replicas if r.ready_at is not None)
        # Ownership settles once every replica saw the others (a beat or two after boot).
        owners = wait_for(lambda: _settled(url, booted + 4 * BEAT), 15, what="all six firing")
        steady_from = booted + 4 * BEAT + PERIOD
        time.sleep(15)
        steady_to = utcnow() - PERIOD

        rows = [r for r in fetch_runs(url) if steady_from <= r.scheduled_at <= steady_to]
        _assert_each_second_once(rows, steady_from, steady_to)
        assert {r.coordination_outcome for r in rows} == {CoordinationOutcome.CLUSTER}
        assert {r.status for r in rows} <= {RunStatus.SUCCEEDED, RunStatus.RUNNING}
        per_owner = Counter(_owners(rows, steady_from).values())
        assert len(per_owner) >= 2, f"schedules not spread: {per_owner}"
        # One owner per schedule through the steady stretch: no slot from anyone else.
        writers = defaultdict(set)
        for r in rows:
            writers[r.name].add(r.replica_id)
        assert all(len(w) == 1 for w in writers.values()), dict(writers)

        # -- SIGKILL the replica owning the most schedules --------------------------------
        victim_id = Counter(owners.values()).most_common(1)[0][0]
        victim = next(r for r in replicas if r.replica_id == victim_id)
        orphans = sorted(n for n, o in owners.items() if o == victim_id)
        sleep_until_fraction(0.3)
        victim.signal(signal.SIGKILL)
        assert victim.stopped_at is not None
        killed_at = victim.stopped_at
        bound = 3 * BEAT + PERIOD

        def moved() -> dict[str, RunRecord] | None:
            firsts: dict[str, RunRecord] = {}
            for r in fetch_runs(url):
                if r.name in orphans and r.replica_id != victim_id and r.name not in firsts:
                    if r.scheduled_at > killed_at - PERIOD:
                        firsts[r.name] = r
            return firsts if set(firsts) == set(orphans) else None

        firsts = wait_for(moved, 10, interval=0.1, what="the orphans firing elsewhere")
        for name, first in firsts.items():
            assert first.fired_at is not None
            # The first row another replica wrote for it (a catch-up or the live slot).
            assert first.fired_at - killed_at <= bound, (name, first.fired_at - killed_at)
        time.sleep(3)
        end = utcnow() - 2 * PERIOD

    rows = [r for r in fetch_runs(url) if steady_from <= r.scheduled_at <= end]
    # backfill="all": the takeover caught up what the dead owner left — no hole, no double.
    _assert_each_second_once(rows, steady_from, end)
    assert {r.coordination_outcome for r in rows} == {CoordinationOutcome.CLUSTER}
    late = [r for r in rows if r.replica_id == victim_id and r.scheduled_at > killed_at]
    assert not late, late
    runs = Counter((m.name, m.slot) for m in read_markers(markers))
    assert not {k: n for k, n in runs.items() if n > 1}, "a handler ran twice for one slot"


@pytest.mark.parametrize("store", STORES)
def test_an_owner_frozen_past_its_lease_writes_nothing_stale_when_resumed(
    store: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    url = request.getfixturevalue(f"{store}_url")
    markers, envs = _start(url, tmp_path, f"{store}-stop")
    with uvicorn_cluster(tmp_path, envs) as replicas:
        booted = max(r.ready_at for r in replicas if r.ready_at is not None)
        owners = wait_for(lambda: _settled(url, booted + 4 * BEAT), 15, what="all six firing")
        time.sleep(2)
        frozen_id = Counter(owners.values()).most_common(1)[0][0]
        frozen: Replica = next(r for r in replicas if r.replica_id == frozen_id)
        mine = sorted(n for n, o in owners.items() if o == frozen_id)
        sleep_until_fraction(0.3)
        stopped_at = utcnow()
        frozen.process.send_signal(signal.SIGSTOP)
        time.sleep(4.0)  # eight beats: its leases (two beats) are long gone
        resumed_at = utcnow()
        frozen.process.send_signal(signal.SIGCONT)
        # Its timer wakes with four seconds of slots due, its beat finds its tokens stale.
        time.sleep(4.0)
        end = utcnow() - 2 * PERIOD
        log = frozen.log()

    rows = [r for r in fetch_runs(url) if booted + 4 * BEAT + PERIOD <= r.scheduled_at <= end]
    assert not duplicate_slots(rows), duplicate_slots(rows)
    assert {r.coordination_outcome for r in rows} == {CoordinationOutcome.CLUSTER}
    stale = [
        r
        for r in rows
        if r.replica_id == frozen_id and stopped_at + PERIOD < r.scheduled_at <= resumed_at
    ]
    assert not stale, (
        f"the resumed replica wrote rows for slots it had lost (stopped {stopped_at}, resumed "
        f"{resumed_at}): {stale}\n{log[-4000:]}"
    )
    # Someone else fired the frozen stretch of its schedules (and caught it up: backfill=all).
    stretch = seconds_between(stopped_at + PERIOD, resumed_at)
    for name in mine:
        done = {r.scheduled_at for r in rows if r.name == name}
        assert set(stretch) <= done, (name, sorted(set(stretch) - done))
    runs = Counter((m.name, m.slot) for m in read_markers(markers))
    assert not {k: n for k, n in runs.items() if n > 1}, "a handler ran twice for one slot"
    # It had owned schedules before; ownership moving is in its own log too.
    assert TOOK.search(log), log[-2000:]


FREEZE_S = 4.0


@pytest.mark.parametrize("store", STORES)
def test_a_replica_halted_inside_its_beat_holds_no_other_replica_back(
    store: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """The busiest owner halts for four seconds *inside* its lease transaction (its rows
    locked, as a SIGSTOP or a VM pause at that moment leaves them). The other replicas keep
    renewing their own leases and fire their own schedules on time all along; the halted
    replica's schedules are taken once its transaction ends and caught up (backfill="all")."""
    url = request.getfixturevalue(f"{store}_url")
    markers, envs = _start(url, tmp_path, f"{store}-halt")
    flags = [tmp_path / f"freeze-{i}" for i in range(len(envs))]
    envs = [
        env | {"CLUSTER_FREEZE_FLAG": str(flag), "CLUSTER_FREEZE_S": str(FREEZE_S)}
        for env, flag in zip(envs, flags, strict=True)
    ]
    with uvicorn_cluster(tmp_path, envs) as replicas:
        booted = max(r.ready_at for r in replicas if r.ready_at is not None)
        owners = wait_for(lambda: _settled(url, booted + 4 * BEAT), 15, what="all six firing")
        time.sleep(2)
        halted_id = Counter(owners.values()).most_common(1)[0][0]
        flag = flags[[r.replica_id for r in replicas].index(halted_id)]
        frozen = Path(f"{flag}.frozen")
        flag.touch()
        wait_for(frozen.exists, 5, interval=0.02, what="the replica halting inside its beat")
        halted_at = datetime.fromtimestamp(float(frozen.read_text()), UTC)
        time.sleep(FREEZE_S + 4)  # the halt, then the takeover's catch-up
        end = utcnow() - 2 * PERIOD

    steady_from = booted + 4 * BEAT + PERIOD
    rows = [r for r in fetch_runs(url) if steady_from <= r.scheduled_at <= end]
    _assert_each_second_once(rows, steady_from, end)
    theirs = sorted(n for n, o in owners.items() if o != halted_id)
    assert theirs, owners
    during = set(seconds_between(halted_at + PERIOD, halted_at + timedelta(seconds=FREEZE_S)))
    late = sorted(
        (r.name, r.scheduled_at, r.fired_at)
        for r in rows
        if r.name in theirs
        and r.scheduled_at in during
        and (r.fired_at is None or r.fired_at - r.scheduled_at > 3 * BEAT)
    )
    assert not late, f"the others' own slots fired late while one replica was halted: {late}"
    runs = Counter((m.name, m.slot) for m in read_markers(markers))
    assert not {k: n for k, n in runs.items() if n > 1}, "a handler ran twice for one slot"


@pytest.mark.postgres
def test_a_joining_replica_fires_its_share_within_two_beats_and_a_period(
    postgres_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The warm-up: a replica joining a running cluster fires nothing until the owners saw it
    (their next beat) and it took the released leases (its next beat) — measured here."""
    url = postgres_url
    _markers, envs = _start(url, tmp_path, "join")
    with uvicorn_cluster(tmp_path, envs[:2]) as first:
        booted = max(r.ready_at for r in first if r.ready_at is not None)
        cold = wait_for(lambda: _settled(url, booted - PERIOD), 15, what="the first firings")
        assert cold
        cold_first = min(
            r.fired_at for r in fetch_runs(url) if r.fired_at is not None
        ) - min(r.ready_at for r in first if r.ready_at is not None)
        time.sleep(1)
        (tmp_path / "joiner").mkdir()
        with uvicorn_cluster(tmp_path / "joiner", [envs[2]]) as (joiner,):
            assert joiner.ready_at is not None
            joined = joiner.ready_at

            def share() -> list[RunRecord] | None:
                rows = [r for r in fetch_runs(url) if r.replica_id == joiner.replica_id]
                return rows or None

            mine = wait_for(share, 10, interval=0.05, what="the joiner's first firing")
            first_fire = min(r.fired_at for r in mine if r.fired_at is not None) - joined
            time.sleep(3)
            rows = fetch_runs(url)
    assert not duplicate_slots(rows), duplicate_slots(rows)
    assert first_fire <= 2 * BEAT + PERIOD, first_fire
    with capsys.disabled():
        print(
            f"\nwarm-up (heartbeat {HEARTBEAT_MS} ms): cold cluster first firing "
            f"{cold_first.total_seconds():.2f} s after ready; joiner's first firing "
            f"{first_fire.total_seconds():.2f} s after ready"
        )
