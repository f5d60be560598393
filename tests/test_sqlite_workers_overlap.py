"""Overlap rules of external schedules across the processes of one SQLite file (issue 29
item 6).

Every worker on a SQLite file serves the trigger route, so arrivals of one ``trigger="external"``
schedule land on several processes. Their ``skip`` and ``queue`` rules read the file as on a
fleet (``coordination/sharing.py``): a run live in one worker makes the next arrival at another
skip, or wait its turn in the durable line. In process: two ``Scheduling`` objects on one file,
each its own store, engine and replica id, stand in for two workers; arrivals go through the
trigger route's own entry (:func:`arrive`). The real ``uvicorn --workers 3`` test is below.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import httpx
import pytest
from support.servers import REPO, Server, free_port
from support.waiting import HANG, wait_for, wait_until

from fastapi_voltro_schedules import (
    RunStatus,
    ScheduleContext,
    Scheduling,
    SchedulingConfig,
    Trigger,
    define_schedule,
)
from fastapi_voltro_schedules.api.trigger import arrive
from fastapi_voltro_schedules.store import RunRecord, new_run_id
from fastapi_voltro_schedules.testing import ManualClock

T0 = datetime(2026, 6, 1, 12, 3, 2, tzinfo=UTC)


def minute(n: int) -> datetime:
    return datetime(2026, 6, 1, 12, n, tzinfo=UTC)


class Held:
    """A handler whose runs wait on a per-slot event; records starts and ends in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, datetime]] = []
        self.gates: dict[datetime, anyio.Event] = {}

    async def __call__(self, ctx: ScheduleContext) -> None:
        self.events.append(("start", ctx.scheduled_at))
        await self.gates.setdefault(ctx.scheduled_at, anyio.Event()).wait()
        self.events.append(("end", ctx.scheduled_at))

    def release(self, slot: datetime) -> None:
        self.gates.setdefault(slot, anyio.Event()).set()


@asynccontextmanager
async def worker(url: str, replica: str, overlap: str, handler: Held) -> AsyncIterator[Scheduling]:
    job = define_schedule(
        name="report",
        cron="* * * * *",
        timezone="UTC",
        trigger="external",
        on_overlap=overlap,
        handler=handler,
    )
    config = SchedulingConfig(database_url=url, replica_id=replica)
    scheduling = Scheduling([job], config=config, clock=ManualClock(T0))
    async with scheduling.run():
        yield scheduling


async def row(s: Scheduling, slot: datetime) -> RunRecord | None:
    assert s.store is not None
    return await s.store.run_for_slot("report", slot, Trigger.EXTERNAL)


async def ended(s: Scheduling, slot: datetime) -> RunRecord | None:
    found = await row(s, slot)
    return found if found is not None and found.status.terminal else None


@asynccontextmanager
async def two_workers(
    url: str, overlap: str, handler: Held
) -> AsyncIterator[tuple[Scheduling, Scheduling]]:
    async with worker(url, "worker-a", overlap, handler) as a:
        async with worker(url, "worker-b", overlap, handler) as b:
            try:
                yield a, b
            finally:
                for gate in list(handler.gates.values()):
                    gate.set()  # nothing held open past the test: the workers can stop


async def test_skip_holds_across_the_workers_of_one_sqlite_file(sqlite_url: str) -> None:
    handler = Held()
    async with two_workers(sqlite_url, "skip", handler) as (a, b):
        first = await arrive(a, "report", minute(1))
        assert first.status == "accepted"
        await wait_until(lambda: ("start", minute(1)) in handler.events, what="12:01 running")

        second = await arrive(b, "report", minute(2))  # another worker, the next occurrence
        assert second.status == "skipped", second
        recorded = await row(b, minute(2))
        assert recorded is not None and recorded.status is RunStatus.SKIPPED
        assert recorded.replica_id == "worker-b"

        handler.release(minute(1))
        await wait_until(lambda: ended(a, minute(1)), what="12:01 to end")
    assert handler.events == [("start", minute(1)), ("end", minute(1))]


async def test_queue_holds_across_the_workers_of_one_sqlite_file(sqlite_url: str) -> None:
    handler = Held()
    async with two_workers(sqlite_url, "queue", handler) as (a, b):
        first = await arrive(a, "report", minute(1))
        assert first.status == "accepted"
        await wait_until(lambda: ("start", minute(1)) in handler.events, what="12:01 running")

        second = await arrive(b, "report", minute(2))
        assert second.status == "accepted"
        waiting = await row(b, minute(2))
        assert waiting is not None and waiting.status is RunStatus.QUEUED, waiting
        assert waiting.replica_id == "worker-b"  # a written row: the line is the file's

        handler.release(minute(2))  # released early: it must still wait for 12:01
        handler.release(minute(1))
        await wait_until(lambda: ended(b, minute(2)), what="12:02 to run after 12:01")
        assert (await ended(b, minute(1))) is not None
    assert handler.events == [
        ("start", minute(1)),
        ("end", minute(1)),
        ("start", minute(2)),
        ("end", minute(2)),
    ]


async def test_a_silent_run_of_a_gone_worker_does_not_hold_skip_shut(sqlite_url: str) -> None:
    """A worker killed mid-run leaves its row ``running``; past three beats it is a corpse:
    the next arrival at another worker runs, and marks it ``failed/abandoned``."""
    handler = Held()
    handler.release(minute(2))
    async with two_workers(sqlite_url, "skip", handler) as (_, b):
        assert b.store is not None
        beats = 3 * b.config.schedule_heartbeat_ms / 1000
        fired = T0 - timedelta(seconds=beats + 1)
        corpse = RunRecord(
            id=new_run_id(), name="report", scheduled_at=minute(1), status=RunStatus.RUNNING,
            trigger=Trigger.EXTERNAL, fired_at=fired, heartbeat_at=fired, replica_id="gone",
        )  # fmt: skip
        await b.store.insert_runs([corpse])

        second = await arrive(b, "report", minute(2))
        assert second.status == "accepted"
        await wait_until(lambda: ended(b, minute(2)), what="12:02 to run")
        dead = await b.store.get_run(corpse.id)
        assert dead is not None
        assert (dead.status, dead.error_tag) == (RunStatus.FAILED, "abandoned")


# -- real processes: uvicorn --workers 3 on one file -----------------------------------------

TOKEN = "sqlite-workers-overlap-trigger-token"

LINE_APP = """
import json, os, time
from pathlib import Path
from fastapi import FastAPI
from fastapi_voltro_schedules import Scheduling, define_schedule, schedules_router

async def line(ctx):
    import anyio
    start = time.time()
    await anyio.sleep(1.0)  # the run's work: long enough for arrivals at other workers to overlap
    span = {"slot": ctx.scheduled_at.isoformat(), "pid": os.getpid(), "start": start,
            "end": time.time()}
    with open(os.environ["SPANS"], "a") as log:  # one short O_APPEND write per run
        log.write(json.dumps(span) + "\\n")

scheduling = Scheduling(
    [define_schedule(name="line", cron="* * * * *", timezone="UTC", handler=line,
                     trigger="external", on_overlap="queue")]
)
app = FastAPI()
app.include_router(schedules_router)
"""

ROUND = 6
"""Arrivals posted at once, one thread (and one connection) each."""


def _spans(path: Path) -> list[dict[str, object]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


@pytest.mark.slow
def test_three_uvicorn_workers_queue_external_arrivals_on_one_file(tmp_path: Path) -> None:
    """Arrivals for consecutive slots posted at once land on several workers: the runs follow
    each other, never overlap, and each slot has one row."""
    database = tmp_path / "ledger.db"
    spans_log = tmp_path / "spans.jsonl"
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "VOLTRO_DATABASE_URL": f"sqlite+aiosqlite:///{database}",
        "VOLTRO_SCHEDULE_TRIGGER_TOKEN": TOKEN,
        "VOLTRO_EXTERNAL_TRIGGER_SKEW_MS": str(3_600_000),  # an hour of past slots to state
        "SPANS": str(spans_log),
    }
    env.pop("VOLTRO_REPLICA_ID", None)  # hostname-pid: one id per worker
    (tmp_path / "line_app.py").write_text(LINE_APP)
    log_path = tmp_path / "uvicorn.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "line_app:app", "--workers", "3",
             "--host", "127.0.0.1", "--port", str(port)],
            cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
    server = Server(process, port, log_path)
    top = datetime.now(UTC).replace(second=0, microsecond=0)
    posted: list[datetime] = []
    answers: list[tuple[int, str]] = []

    def post(slot: datetime) -> None:
        with httpx.Client(timeout=HANG) as client:  # a fresh connection: the kernel picks
            headers = {
                "Authorization": f"Bearer {TOKEN}",
                "X-Voltro-Scheduled-At": slot.isoformat(),
            }
            r = client.post(f"{server.url}/_voltro/schedules/line/trigger", headers=headers)
        answers.append((r.status_code, r.json().get("status", r.text)))

    try:
        server.wait_ready("uvicorn --workers 3", "/openapi.json", HANG, require_ok=False)
        wait_for(
            lambda: server.log().count("Application startup complete") >= 3,
            what="three workers started",
        )
        # Rounds of simultaneous arrivals until two workers admitted some (the kernel spreads
        # new connections, but no round is promised to): at most 8 rounds, 48 of the hour's slots.
        for _ in range(8):
            slots = [top - timedelta(minutes=len(posted) + i) for i in range(ROUND)]
            posted.extend(slots)
            threads = [threading.Thread(target=post, args=(slot,)) for slot in slots]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(HANG)
            spans = wait_for(
                lambda: len(s := _spans(spans_log)) >= len(posted) and s,
                what=f"{len(posted)} runs to end",
            )
            if len({span["pid"] for span in spans}) >= 2:
                break
    finally:
        server.kill(signal.SIGTERM)

    assert all(code == 202 and status == "accepted" for code, status in answers), answers
    pids = {span["pid"] for span in spans}
    assert len(pids) >= 2, f"every arrival landed on one worker: {pids}"
    ordered = sorted(spans, key=lambda s: float(s["start"]))  # type: ignore[arg-type]
    for before, after in zip(ordered, ordered[1:], strict=False):
        assert float(before["end"]) <= float(after["start"]), f"two runs at once: {before} {after}"  # type: ignore[arg-type]
    ran = Counter(str(span["slot"]) for span in spans)
    assert ran == Counter(slot.isoformat() for slot in posted), ran
    with sqlite3.connect(database) as db:
        rows = db.execute(
            "SELECT scheduled_at, status FROM _voltro_schedule_runs WHERE name = 'line'"
        ).fetchall()
    assert len(rows) == len(posted) and {status for _, status in rows} == {"succeeded"}, rows
    assert len({slot for slot, _ in rows}) == len(posted), rows
