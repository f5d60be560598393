"""One firer per SQLite file (``leadership.py``): several processes on one ledger fire each
slot once, the others serve the routes, and a dead firer is replaced.

The real test runs ``uvicorn --workers 3`` on one file and counts executions from the
handler's own side effects (one marker file per execution, ``apps/cluster_app.py``), not from
the ledger. The in-process tests pin the follower's behaviour deterministically: two
``Scheduling`` objects on one file hold two descriptors, and ``flock`` refuses the second one
just as it refuses a second process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx
import pytest
from support.servers import REPO, Server, free_port
from support.waiting import HANG, wait_for, wait_until

from fastapi_voltro_schedules import Scheduling, SchedulingConfig, define_schedule
from fastapi_voltro_schedules.enums import RunStatus
from fastapi_voltro_schedules.leadership import FIRER_LOCK_SUFFIX, FirerLock
from fastapi_voltro_schedules.store import RunRecord

INSPECT = "inspect-" + "w" * 24


WORKERS_APP = """
import os
from pathlib import Path
from fastapi import FastAPI
from fastapi_voltro_schedules import Scheduling, define_schedule, schedules_router

async def tick(ctx):
    # One file per execution, named by what ran where: counted without the ledger.
    trigger = "manual" if ctx.trigger.value == "manual" else "clock"
    slot = ctx.scheduled_at.strftime("%Y%m%dT%H%M%S")
    Path(os.environ["MARKERS"], f"{trigger}__{slot}__{os.getpid()}__{ctx.run_id}").touch()

scheduling = Scheduling(
    [define_schedule(name="tick", cron="* * * * * *", timezone="UTC", handler=tick,
                     on_overlap="parallel")]
)
app = FastAPI()
app.include_router(schedules_router)
"""


def _markers(directory: Path) -> list[tuple[str, str, int, str]]:
    """(trigger, slot, pid, run id) of every execution so far."""
    out = []
    for path in directory.iterdir():
        trigger, slot, pid, run_id = path.name.split("__")
        out.append((trigger, slot, int(pid), run_id))
    return out


def _clock_slots(directory: Path) -> list[tuple[str, int]]:
    """(slot, pid) of every clock-driven execution."""
    return [(slot, pid) for trig, slot, pid, _ in _markers(directory) if trig == "clock"]


@pytest.mark.slow
def test_three_uvicorn_workers_on_one_sqlite_file_fire_each_slot_once(tmp_path: Path) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    database = tmp_path / "ledger.db"
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "VOLTRO_DATABASE_URL": f"sqlite+aiosqlite:///{database}",
        "VOLTRO_INSPECT_TOKEN": INSPECT,
        "MARKERS": str(markers),
    }
    env.pop("VOLTRO_REPLICA_ID", None)  # hostname-pid: one id per worker
    (tmp_path / "workers_app.py").write_text(WORKERS_APP)
    log_path = tmp_path / "uvicorn.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "workers_app:app", "--workers", "3",
             "--host", "127.0.0.1", "--port", str(port)],
            cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
    server = Server(process, port, log_path)
    lock_file = database.with_name(database.name + FIRER_LOCK_SUFFIX)
    try:
        server.wait_ready("uvicorn --workers 3", "/openapi.json", HANG, require_ok=False)
        wait_for(
            lambda: server.log().count("Application startup complete") >= 3,
            what="three workers started",
        )
        first = wait_for(
            lambda: (slots := _clock_slots(markers)) and len({s for s, _ in slots}) >= 10 and slots,
            what="ten every-second slots",
        )
        per_slot = Counter(slot for slot, _ in first)
        assert max(per_slot.values()) == 1, [s for s, n in per_slot.items() if n > 1]
        firers = {pid for _, pid in first}
        firer_pid = int(lock_file.read_text().strip())
        assert firers == {firer_pid}  # one process fired them all: the lock's holder
        assert server.log().count("scheduler: not firing here") == 2, server.log()

        # The others serve the routes: Run now until one lands on a follower and runs there.
        followers_ran: set[int] = set()
        manual_ids: list[str] = []
        for _ in range(60):
            with httpx.Client() as client:  # a fresh connection: the kernel picks a worker
                r = client.post(
                    f"{server.url}/_voltro/inspect/schedules/tick/fire",
                    headers={"Authorization": f"Bearer {INSPECT}"},
                )
            assert r.status_code == 202, r.text
            manual_ids.append(r.json()["runId"])
            time.sleep(0.05)
            ran = {pid for _, _, pid, run in _markers(markers) if run in manual_ids}
            followers_ran |= ran - firers
            if followers_ran:
                break
        else:  # the last tries' runs may still be starting: wait for them, not a while
            followers_ran = wait_for(
                lambda: {pid for _, _, pid, run in _markers(markers) if run in manual_ids}
                - firers,
                what="a Run now served by a non-firing worker (of 60 tries)",
            )

        # SIGKILL the firer: another worker takes the lock and slots keep firing once.
        killed_at = time.time()
        os.kill(firer_pid, signal.SIGKILL)

        def new_holder() -> str | None:
            holder = lock_file.read_text().strip()
            return holder if holder and int(holder) != firer_pid else None

        holder = wait_for(new_holder, interval=0.05, what="another worker taking the lock")
        # How soon is counted in polls by the in-process test below (a wall-clock bound here
        # would measure the machine's load); printed for the record.
        took_over_s = time.time() - killed_at

        def four_by_the_new_firer() -> list[tuple[str, int]] | None:
            after = _clock_slots(markers)
            by_new = [slot for slot, pid in after if pid == int(holder)]
            return after if len(by_new) >= 4 else None

        after = wait_for(four_by_the_new_firer, what="four slots fired by the new holder")
        per_slot = Counter(slot for slot, _ in after)
        assert max(per_slot.values()) == 1, [s for s, n in per_slot.items() if n > 1]
        print(f"takeover after SIGKILL: {took_over_s:.2f} s; slots: {len(per_slot)}")
    finally:
        server.kill(signal.SIGTERM)


async def _noop(ctx: object) -> None:
    return None


def _scheduling(url: str, ran: list[str], replica: str) -> Scheduling:
    async def tick(ctx: object) -> None:
        ran.append(replica)

    return Scheduling(
        [define_schedule(name="tick", cron="0 0 1 1 *", timezone="UTC", handler=tick)],
        config=SchedulingConfig(database_url=url, replica_id=replica),
    )


@dataclass
class _Polls:
    tries: int = 0
    """Failed and successful ``try_acquire`` calls that were not already holding the lock."""
    released_at: int | None = None
    """``tries`` when a holder let the lock go."""


def _count_polls(monkeypatch: pytest.MonkeyPatch) -> _Polls:
    polls = _Polls()
    real_try, real_release = FirerLock.try_acquire, FirerLock.release

    def try_acquire(self: FirerLock) -> bool:
        if not self.held:
            polls.tries += 1
        return real_try(self)

    def release(self: FirerLock) -> None:
        if self.held:
            polls.released_at = polls.tries
        real_release(self)

    monkeypatch.setattr(FirerLock, "try_acquire", try_acquire)
    monkeypatch.setattr(FirerLock, "release", release)
    return polls


async def test_a_follower_serves_run_now_and_takes_over_when_the_firer_stops(
    sqlite_url: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: list[str] = []
    leader, follower = _scheduling(sqlite_url, ran, "a"), _scheduling(sqlite_url, ran, "b")
    leader_up, stop_leader = anyio.Event(), anyio.Event()
    polls = _count_polls(monkeypatch)

    async def lead() -> None:
        async with leader.run(None):
            assert leader.running_engine().next_firing("tick") is not None
            leader_up.set()
            await stop_leader.wait()

    with caplog.at_level("INFO", logger="fastapi_voltro_schedules"):
        async with anyio.create_task_group() as tg:
            tg.start_soon(lead)
            await leader_up.wait()
            async with follower.run(None):
                engine = follower.running_engine()
                assert engine.next_firing("tick") is None  # armed nothing
                assert leader.fires_here and not follower.fires_here
                run = await follower.fire_now("tick")

                async def settled() -> RunRecord | None:
                    row = await engine.store.get_run(run.id)
                    return row if row is not None and row.status is not RunStatus.RUNNING else None

                row = await wait_until(settled, what="the follower's Run now")
                assert row.status is RunStatus.SUCCEEDED and row.replica_id == "b"
                assert ran == ["b"]
                stop_leader.set()  # the leader's block ends: its descriptor closes
                await wait_until(lambda: engine.next_firing("tick") is not None, what="takeover")
                # Counted in polls, not seconds (a busy machine stretches every sleep): the
                # follower took the lock at the first or second try after it was let go.
                assert polls.released_at is not None
                assert 1 <= polls.tries - polls.released_at <= 2, polls
                assert follower.fires_here
    lines = [r.getMessage() for r in caplog.records]
    assert sum("not firing here" in line for line in lines) == 1
    assert sum("taking over firing" in line for line in lines) == 1


async def test_memory_ledgers_take_no_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    ran: list[str] = []
    memory = "sqlite+aiosqlite://"
    a, b = _scheduling(memory, ran, "a"), _scheduling(memory, ran, "b")
    async with a.run(None), b.run(None):
        assert a.running_engine().next_firing("tick") is not None
        assert b.running_engine().next_firing("tick") is not None  # both arm: two ledgers
    assert os.listdir(tmp_path) == []  # no database file, no lock file


def test_two_processes_booting_at_once_on_a_fresh_file_both_migrate(tmp_path: Path) -> None:
    script = tmp_path / "boot_once.py"
    script.write_text(
        "import asyncio, sys, time\n"
        "from fastapi_voltro_schedules import Scheduling, SchedulingConfig\n"
        "async def main():\n"
        "    s = Scheduling([], config=SchedulingConfig(database_url=sys.argv[1]))\n"
        "    while time.time() < float(sys.argv[2]):\n"
        "        await asyncio.sleep(0.001)\n"
        "    async with s.run(None, arm=False):\n"
        "        pass\n"
        "    print('booted')\n"
        "asyncio.run(main())\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    # Without the lock a round of four fails about one time in three (measured here: 5 of 12
    # rounds had a "database is locked" boot), so a regression shows in most runs of these
    # three rounds, not in every one; with the lock no round has ever failed.
    for attempt in range(3):
        url = f"sqlite+aiosqlite:///{tmp_path}/fresh{attempt}.db"
        start_at = str(time.time() + 1.5)  # after every interpreter has imported
        procs = [
            subprocess.Popen(
                [sys.executable, str(script), url, start_at],
                env=env,
                text=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
            for _ in range(4)
        ]
        outputs = [p.communicate(timeout=60)[0] for p in procs]
        for p, out in zip(procs, outputs, strict=True):
            assert p.returncode == 0 and "booted" in out, out
