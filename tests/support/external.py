"""The external trigger over real HTTP: ``apps.external_app`` served by uvicorn, driven from a
sync test — its ManualClock moved over HTTP, arrivals posted, runs polled until terminal, the
ledger and the handlers' marker files read from outside.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from support.servers import Server
from support.waiting import HANG, wait_for

APP = "apps.external_app:app"
TRIGGER_TOKEN = "trigger-7f3a9c1e-not-a-real-secret"
INSPECT_TOKEN = "inspect-2b8d4e6f-not-a-real-secret"
TRIGGER_AUTH = {"Authorization": f"Bearer {TRIGGER_TOKEN}"}
INSPECT_AUTH = {"Authorization": f"Bearer {INSPECT_TOKEN}"}


_started: dict[str, list[str]] = {}
"""Per server URL, the runs started there since its clock last moved (their handlers sleep
real time)."""


def set_clock(server: Server, instant: str) -> None:
    # Let the runs started at the old instant end first: a run's max_runtime is elapsed time,
    # so jumping the wall clock past it no longer cancels the run (it used to, freeing the
    # schedule for the next test's arrival as a side effect).
    pending = _started.pop(server.url, [])
    while pending:
        poll_terminal(server, pending.pop())
    r = httpx.post(f"{server.url}/_test/clock", params={"to": instant}, timeout=HANG)
    assert r.status_code == 200, r.text


def trigger(
    server: Server, name: str, headers: dict[str, str] | None = None, **kw: Any
) -> httpx.Response:
    r = httpx.post(
        f"{server.url}/_voltro/schedules/{name}/trigger",
        headers={**TRIGGER_AUTH, **(headers or {})},
        timeout=HANG,
        **kw,
    )
    if r.status_code == 202:
        _started.setdefault(server.url, []).append(r.json()["runId"])
    return r


def get_run(server: Server, run_id: str) -> httpx.Response:
    return httpx.get(
        f"{server.url}/_voltro/schedules/runs/{run_id}", headers=TRIGGER_AUTH, timeout=HANG
    )


def poll_terminal(server: Server, run_id: str) -> list[dict[str, Any]]:
    """Every answer of ``GET /runs/{run_id}`` until the run is terminal (the last one)."""
    seen: list[dict[str, Any]] = []

    def terminal() -> bool:
        r = get_run(server, run_id)
        assert r.status_code == 200, r.text
        seen.append(r.json())
        return bool(seen[-1]["terminal"])

    wait_for(terminal, interval=0.05, what=f"run {run_id} to end")
    return seen


@contextmanager
def held(marker_dir: Path) -> Iterator[None]:
    """Handlers started meanwhile do not finish until the block is left (the app's ``hold``
    file): a test that needs a run still ``running`` holds it there, whatever the load."""
    hold = marker_dir / "hold"
    hold.touch()
    try:
        yield
    finally:
        hold.unlink()


def watcher(server: Server) -> dict[str, Any]:
    """What the server's external missed watcher accounted for (``GET /_test/watcher``):
    ``watching`` (whether one runs there) and, per schedule, the newest occurrence its passes
    settled — recorded, run, or found claimed."""
    r = httpx.get(f"{server.url}/_test/watcher", timeout=HANG)
    assert r.status_code == 200, r.text
    answer: dict[str, Any] = r.json()
    return answer


def accounted(server: Server, name: str, slot: datetime) -> bool:
    """Whether the server's watcher has settled ``name``'s occurrences up to ``slot``: nothing
    it could still record for them is left in flight."""
    cursor = watcher(server)["cursors"].get(name)
    return cursor is not None and datetime.fromisoformat(cursor) >= slot


def markers(directory: Path, name: str, slot: str) -> list[Path]:
    return sorted(directory.glob(f"{name}__{slot}__*"))


def base_env(db_url: str, markers_dir: Path, **extra: str) -> dict[str, str]:
    env = {
        "VOLTRO_DATABASE_URL": db_url,
        "VOLTRO_SCHEDULE_TRIGGER_TOKEN": TRIGGER_TOKEN,
        "VOLTRO_INSPECT_TOKEN": INSPECT_TOKEN,
        "VOLTRO_EXTERNAL_MISSED_POLICY": "off",
        "EXT_MARKER_DIR": str(markers_dir),
        **extra,
    }
    for key in ("VOLTRO_DEV",):
        env.setdefault(key, "")
    return env
