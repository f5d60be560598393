"""The ledger audit: duplicates, stuck rows and gaps, from tables of rows (pure), then read
from real stores (keyset paging that never splits a slot), then the ``voltro schedule audit``
verb."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from conftest import run_async
from support.stores import open_store
from typer.testing import CliRunner

from fastapi_voltro_schedules import ScheduleContext, define_schedule
from fastapi_voltro_schedules.audit import FindingKind, audit, audit_ledger
from fastapi_voltro_schedules.cli import app as cli_app
from fastapi_voltro_schedules.enums import CoordinationOutcome, RunStatus, Trigger
from fastapi_voltro_schedules.store import RunRecord, SQLStore, new_run_id

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
BEAT_MS = 1_000
S, R, F, K, M, Q = (
    RunStatus.SUCCEEDED,
    RunStatus.RUNNING,
    RunStatus.FAILED,
    RunStatus.SKIPPED,
    RunStatus.MISSED,
    RunStatus.QUEUED,
)
SELF, EXT, MAN = Trigger.SELF, Trigger.EXTERNAL, Trigger.MANUAL


async def noop(ctx: ScheduleContext) -> None:
    return None


EVERY_MINUTE = define_schedule(name="tick", cron="* * * * *", timezone="UTC", handler=noop)


def row(
    minute: int,
    status: RunStatus = S,
    trigger: Trigger = SELF,
    name: str = "tick",
    seen: datetime | None = None,
    **kw: Any,
) -> RunRecord:
    at = T0 + timedelta(minutes=minute)
    return RunRecord(
        id=new_run_id(),
        name=name,
        scheduled_at=at,
        status=status,
        trigger=trigger,
        coordination_outcome=CoordinationOutcome.SINGLE,
        fired_at=seen if seen is not None else at,
        replica_id=kw.pop("replica_id", "pod-1"),
        **kw,
    )


def kinds(rows: list[RunRecord], **kw: Any) -> list[tuple[str, int]]:
    kw.setdefault("now", T0 + timedelta(minutes=10))
    report = audit(
        rows, start=T0 - timedelta(seconds=1), end=T0 + timedelta(minutes=5), heartbeat_ms=BEAT_MS,
        **kw,
    )  # fmt: skip
    return [
        (f.kind.value, int((f.scheduled_at - T0).total_seconds() // 60)) for f in report.findings
    ]


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        # one run per slot: clean
        ([row(0), row(1), row(2)], []),
        # two runs of one slot, on two replicas: a duplicate, whatever their outcome
        ([row(0), row(1), row(1, F, replica_id="pod-2")], [("duplicate", 1)]),
        (
            [row(0, S, EXT), row(0, R, EXT, replica_id="pod-2", seen=T0 + timedelta(minutes=10))],
            [("duplicate", 0)],
        ),
        # external record-and-run: the missed row and the run it caused — one ran
        ([row(0, M, EXT), row(0, S, EXT)], []),
        # skipped beside a run, and a manual rerun of the slot (Run now, a range backfill)
        ([row(0), row(0, K)], []),
        ([row(0), row(0, S, MAN), row(0, F, MAN)], []),
        # one row per schedule: two schedules on one instant are not a duplicate
        ([row(0), row(0, name="other")], []),
    ],
)
def test_duplicates(rows: list[RunRecord], expected: list[tuple[str, int]]) -> None:
    assert kinds(rows) == expected


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        # running, beat 2 s ago (3 beats = 3 s): alive
        ([row(4, R, seen=T0 + timedelta(minutes=10, seconds=-2))], []),
        # running, silent for a minute: stuck
        ([row(4, R, seen=T0 + timedelta(minutes=9))], [("stuck", 4)]),
        # the heartbeat counts, not only fired_at
        ([row(4, R, heartbeat_at=T0 + timedelta(minutes=10, seconds=-1))], []),
        # queued and never seen: stuck; terminal rows never are
        ([row(3, Q, seen=T0 + timedelta(minutes=3))], [("stuck", 3)]),
        ([row(3, F), row(2, S)], []),
    ],
)
def test_stuck_rows(rows: list[RunRecord], expected: list[tuple[str, int]]) -> None:
    assert kinds(rows) == expected


@pytest.mark.parametrize(
    ("rows", "first", "expected"),
    [
        # every minute 0..5 has a row of some kind: no gap
        ([row(0), row(1, K), row(2, M), row(3, S, MAN), row(4, F), row(5)], 0, []),
        # minutes 2 and 4 have nothing at all
        ([row(0), row(1), row(3), row(5)], 0, [("gap", 2), ("gap", 4)]),
        # before the schedule's first row in the ledger nothing is judged
        ([row(3), row(4), row(5)], 3, []),
        # a row of another schedule does not fill the slot
        ([row(0), row(1), row(2, name="other"), row(3), row(4), row(5)], 0, [("gap", 2)]),
    ],
)
def test_gaps_of_self_schedules(
    rows: list[RunRecord], first: int, expected: list[tuple[str, int]]
) -> None:
    first_seen = {"tick": T0 + timedelta(minutes=first)}
    assert kinds(rows, self_schedules=[EVERY_MINUTE], first_seen=first_seen) == expected


def test_gaps_wait_three_beats_and_need_a_first_row() -> None:
    rows = [row(0), row(1), row(2)]
    # now is 3:01 and three beats are 3 s: minute 3 is not judged yet — no row is due
    soon = T0 + timedelta(minutes=3, seconds=1)
    assert kinds(rows, now=soon, self_schedules=[EVERY_MINUTE], first_seen={"tick": T0}) == []
    later = T0 + timedelta(minutes=3, seconds=4)
    assert kinds(rows, now=later, self_schedules=[EVERY_MINUTE], first_seen={"tick": T0}) == [
        ("gap", 3)
    ]
    # never seen in the ledger: not checked (not deployed yet), and the report says so
    report = audit(
        rows, start=T0, end=T0 + timedelta(minutes=5), now=later, heartbeat_ms=BEAT_MS,
        self_schedules=[EVERY_MINUTE], first_seen={},
    )  # fmt: skip
    assert report.gap_checked == () and report.clean


def test_report_forms_and_bad_range() -> None:
    rows = [row(0), row(0, F, replica_id="pod-2")]
    report = audit(
        rows, start=T0 - timedelta(seconds=1), end=T0 + timedelta(minutes=1),
        now=T0 + timedelta(minutes=2), heartbeat_ms=BEAT_MS,
    )  # fmt: skip
    assert not report.clean and len(report.duplicates) == 1 and report.rows == 2
    body = report.to_json()
    assert body["counts"] == {"duplicate": 1, "stuck": 0, "gap": 0} and body["clean"] is False
    assert body["findings"][0]["runIds"] == sorted(r.id for r in rows)
    assert "1 duplicate" in report.text() and rows[0].id in report.text()
    with pytest.raises(ValueError, match="must be before"):
        audit([], start=T0, end=T0, now=T0, heartbeat_ms=BEAT_MS)


# --------------------------------------------------------------------------- on real stores


async def test_runs_between_pages_without_splitting_a_slot(store: SQLStore) -> None:
    # a herd: 7 rows on one instant, across a page boundary of 3
    herd = [row(1, name=f"h{i}") for i in range(7)]
    rows = [row(0), *herd, row(2), row(9)]
    await store.insert_runs(rows)
    seen: list[RunRecord] = []
    cursor = None
    while True:
        page = await store.runs_between(
            T0 - timedelta(seconds=1), T0 + timedelta(minutes=5), 3, cursor
        )
        seen += page
        if len(page) < 3:
            break
        cursor = (page[-1].scheduled_at, page[-1].id)
    expected = sorted(rows[:-1], key=lambda r: (r.scheduled_at, r.id))
    assert [r.id for r in seen] == [r.id for r in expected]
    # (after, until]: exclusive start, inclusive end
    edge = await store.runs_between(T0, T0 + timedelta(minutes=1))
    assert {r.id for r in edge} == {r.id for r in herd}


async def test_audit_ledger_reads_the_store(store: SQLStore) -> None:
    now = await store.database_now()
    base = now.replace(second=0, microsecond=0) - timedelta(minutes=30)

    def at(minute: int, status: RunStatus = S, **kw: Any) -> RunRecord:
        when = base + timedelta(minutes=minute)
        kw.setdefault("fired_at", when)
        return RunRecord(
            id=new_run_id(), name=kw.pop("name", "tick"), scheduled_at=when, status=status,
            trigger=kw.pop("trigger", SELF), replica_id=kw.pop("replica_id", "pod-1"), **kw,
        )  # fmt: skip

    rows = [at(m) for m in range(0, 10) if m != 6]  # minute 6: nothing
    rows += [at(3, F, replica_id="pod-2")]  # minute 3 ran twice
    rows += [at(8, S, trigger=MAN)]  # a manual rerun: fine
    rows += [at(10, R, fired_at=base)]  # running, silent for 30 minutes
    await store.insert_runs(rows)
    report = await audit_ledger(
        store, [EVERY_MINUTE], base - timedelta(seconds=1), base + timedelta(minutes=10),
        heartbeat_ms=BEAT_MS,
    )  # fmt: skip
    got = [(f.kind, int((f.scheduled_at - base).total_seconds() // 60)) for f in report.findings]
    assert got == [(FindingKind.DUPLICATE, 3), (FindingKind.GAP, 6), (FindingKind.STUCK, 10)]
    assert report.rows == len(rows) and report.gap_checked == ("tick",)
    # a range that starts after the schedule's first row is judged from its start
    late = await audit_ledger(
        store, [EVERY_MINUTE], base + timedelta(minutes=4), base + timedelta(minutes=7),
        heartbeat_ms=BEAT_MS,
    )  # fmt: skip
    assert [(f.kind, f.scheduled_at) for f in late.findings] == [
        (FindingKind.GAP, base + timedelta(minutes=6))
    ]


# --------------------------------------------------------------------------- the CLI verb

APP_MODULE = """
from fastapi import FastAPI
from fastapi_voltro_schedules import Scheduling, SchedulingConfig, define_schedule

async def noop(ctx):
    return None

scheduling = Scheduling(
    [
        define_schedule(name="tick", cron="* * * * *", timezone="UTC", handler=noop),
        define_schedule(
            name="hook", cron="* * * * *", timezone="UTC", handler=noop, trigger="external"
        ),
    ],
    config=SchedulingConfig(database_url="sqlite+aiosqlite:///{db}", schedule_heartbeat_ms=1000),
)
app = FastAPI()
"""


async def _ledger(path: Any, rows: list[RunRecord]) -> None:
    async with open_store(f"sqlite+aiosqlite:///{path}") as s:
        await s.insert_runs(rows)


def _audit(*args: str) -> Any:
    return CliRunner().invoke(cli_app, ["schedule", "audit", *args])


FROM, TO = "2026-06-01T11:59:59Z", "2026-06-01T12:05:00Z"


def test_cli_clean_and_findings(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "ledger.db"
    run_async(_ledger(db, [row(m) for m in range(6)]))
    url = f"sqlite+aiosqlite:///{db}"
    clean = _audit("--database-url", url, "--from", FROM, "--to", TO)
    assert clean.exit_code == 0, clean.output
    assert "6 rows" in clean.stdout and "clean" in clean.stdout

    run_async(_ledger(db, [row(2, F, replica_id="pod-2")]))
    found = _audit("--database-url", url, "--from", FROM, "--to", TO, "--json")
    assert found.exit_code == 1, found.output
    body = json.loads(found.stdout)
    assert body["counts"] == {"duplicate": 1, "stuck": 0, "gap": 0}
    assert body["findings"][0]["scheduledAt"] == "2026-06-01T12:02:00.000Z"

    # --app: the app's self schedules are gap-checked (the external one is not)
    (tmp_path / "audited_app.py").write_text(APP_MODULE.replace("{db}", str(db)))
    monkeypatch.chdir(tmp_path)
    run_async(_ledger(db, [row(9)]))  # minutes 6..8 are gaps; hook has no rows: not judged
    gaps = _audit("--app", "audited_app:app", "--from", FROM, "--to", "2026-06-01T12:09:00Z")
    assert gaps.exit_code == 1, gaps.output
    lines = [line for line in gaps.stdout.splitlines() if line.startswith("gap")]
    assert [line.split()[2] for line in lines] == [
        "2026-06-01T12:06:00.000Z",
        "2026-06-01T12:07:00.000Z",
        "2026-06-01T12:08:00.000Z",
    ]
    assert "1 self schedule(s)" in gaps.stdout


def test_cli_bad_input(tmp_path: Any) -> None:
    missing = _audit("--database-url", f"sqlite+aiosqlite:///{tmp_path / 'nope.db'}")
    assert missing.exit_code == 2 and "no ledger at" in missing.stderr
    assert not (tmp_path / "nope.db").exists()
    db = tmp_path / "ledger.db"
    run_async(_ledger(db, []))
    url = f"sqlite+aiosqlite:///{db}"
    zoneless = _audit("--database-url", url, "--from", "2026-06-01T12:00:00", "--to", TO)
    assert zoneless.exit_code == 2 and "no zone" in zoneless.stderr
    backwards = _audit("--database-url", url, "--from", TO, "--to", FROM)
    assert backwards.exit_code == 2 and "must be before" in backwards.stderr
    bad_app = _audit("--app", "no_such_module_xyz:app")
    assert bad_app.exit_code == 2 and "no_such_module_xyz" in bad_app.stderr


def test_cli_unreadable_ledger() -> None:
    url = "postgresql+asyncpg://someone:s3cret-pw@127.0.0.1:1/nowhere"
    result = _audit("--database-url", url, "--from", FROM, "--to", TO)
    assert result.exit_code == 3
    assert "cannot read postgresql+asyncpg://someone:***@127.0.0.1:1/nowhere" in result.stderr
    assert "s3cret-pw" not in result.output
