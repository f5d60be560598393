"""Several uvicorn replicas of one app sharing one database, and readers of what they did.

``uvicorn_cluster`` starts N ``python -m uvicorn`` processes at once (boot in parallel, then
wait for each to answer), each on its own free port with its own log; on exit every live one
gets SIGTERM together. ``Replica`` is :class:`support.servers.Server` plus its replica id and the
wall-clock instant it became ready. The ledger is read with the package's own store, on a
private event loop in a worker thread, so sync tests can poll it.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Coroutine, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import httpx

from fastapi_voltro_schedules.clock import iso_z
from fastapi_voltro_schedules.store import RunRecord, create_store
from support.servers import REPO, Server, free_port
from support.waiting import HANG

_T = TypeVar("_T")

CLUSTER_APP = "apps.cluster_app:app"


@dataclass
class Replica(Server):
    replica_id: str = ""
    ready_at: datetime | None = None
    """Wall clock (UTC) when the replica first answered HTTP: its scheduler is armed by then."""
    stopped_at: datetime | None = None
    """Wall clock (UTC) when the test signalled it (SIGKILL/SIGTERM), if it did."""

    def signal(self, sig: int) -> None:
        if self.stopped_at is None:
            self.stopped_at = utcnow()
        self.kill(sig)

    def freeze(self) -> None:
        """SIGSTOP: the process stays, silent (no beat, no claim) until :meth:`thaw`."""
        self.process.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        self.process.send_signal(signal.SIGCONT)


def utcnow() -> datetime:
    return datetime.now(UTC)


@contextmanager
def uvicorn_cluster(
    tmp_path: Path,
    envs: Sequence[Mapping[str, str]],
    *,
    app: str = CLUSTER_APP,
    timeout: float = HANG,
) -> Iterator[list[Replica]]:
    """One uvicorn process per env mapping (each must set ``VOLTRO_REPLICA_ID``)."""
    replicas: list[Replica] = []
    try:
        for env in envs:
            replica_id = env["VOLTRO_REPLICA_ID"]
            port = free_port()
            log_path = tmp_path / f"{replica_id}.log"
            full_env = {**os.environ, "PYTHONPATH": f"{REPO}:{REPO / 'tests'}", **env}
            with log_path.open("w") as log:
                process = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "uvicorn",
                        app,
                        "--host",
                        "127.0.0.1",
                        "--port",
                        str(port),
                    ],
                    cwd=tmp_path,
                    env=full_env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
            replicas.append(Replica(process, port, log_path, replica_id=replica_id))
        deadline = time.monotonic() + timeout
        waiting = list(replicas)
        while waiting:
            for replica in list(waiting):
                if replica.process.poll() is not None:
                    raise RuntimeError(f"{replica.replica_id} exited early:\n{replica.log()}")
                try:
                    httpx.get(replica.url + "/openapi.json", timeout=5.0)
                except httpx.HTTPError:
                    continue
                replica.ready_at = utcnow()
                waiting.remove(replica)
            if waiting:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"{waiting[0].replica_id} did not start:\n{waiting[0].log()}"
                    )
                time.sleep(0.05)
        yield replicas
    finally:
        live = [r for r in replicas if r.process.poll() is None]
        for replica in live:
            if replica.stopped_at is None:
                replica.stopped_at = utcnow()
            replica.process.send_signal(signal.SIGTERM)
        for replica in live:
            try:
                replica.process.wait(15)
            except subprocess.TimeoutExpired:
                replica.process.kill()
                replica.process.wait(5)


# ------------------------------------------------------------------------------- the ledger


def run_async(coro: Coroutine[Any, Any, _T]) -> _T:
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


def fetch_runs(url: str, name: str | None = None) -> list[RunRecord]:
    """Every row of the runs table (of ``name``), oldest ``scheduled_at`` first."""

    async def read() -> list[RunRecord]:
        store = create_store(url)
        try:
            return await store.list_runs(name, limit=100_000)
        finally:
            await store.dispose()

    return sorted(run_async(read()), key=lambda r: (r.scheduled_at, r.id))


def sleep_until_fraction(fraction: float) -> None:
    """Sleep until the wall clock's sub-second part is ``fraction`` (e.g. 0.5: mid-second),
    away from the instants every-second schedules fire at."""
    now = time.time()
    delay = (fraction - (now % 1.0)) % 1.0
    time.sleep(delay)


def sleep_until_before(period: int, lead: float) -> None:
    """Sleep until ``lead`` seconds before the next multiple of ``period`` seconds (epoch
    time), e.g. ``(2, 0.4)``: 0.4 s before the next even second."""
    now = time.time()
    target = (now // period + 1) * period - lead
    if target <= now:
        target += period
    time.sleep(target - now)


def seconds_between(start: datetime, end: datetime) -> list[datetime]:
    """Every whole UTC second ``s`` with ``start <= s <= end``."""
    first = start.replace(microsecond=0)
    if first < start:
        first += timedelta(seconds=1)
    out = []
    while first <= end:
        out.append(first)
        first += timedelta(seconds=1)
    return out


def duplicate_slots(rows: Sequence[RunRecord]) -> dict[tuple[str, datetime], int]:
    counts = Counter((r.name, r.scheduled_at) for r in rows)
    return {k: n for k, n in counts.items() if n > 1}


# ------------------------------------------------------------------------------- operator


def audit_cli(
    env: Mapping[str, str], start: datetime, end: datetime
) -> subprocess.CompletedProcess[str]:
    """``voltro schedule audit`` over ``[start, end]`` for ``apps.cluster_app`` with a replica's
    environment (its database, its schedules), as an operator runs it: a process of its own."""
    return subprocess.run(
        [sys.executable, "-m", "fastapi_voltro_schedules", "schedule", "audit",
         "--app", CLUSTER_APP, "--from", iso_z(start), "--to", iso_z(end)],
        cwd=REPO / "tests", env={**os.environ, **env}, capture_output=True, text=True,
        timeout=HANG, check=False,
    )  # fmt: skip


def audit_database_cli(
    url: str, start: datetime, end: datetime
) -> subprocess.CompletedProcess[str]:
    """``voltro schedule audit --json`` of the ledger at ``url`` over ``[start, end]``, as an
    operator runs it: a process of its own."""
    return subprocess.run(
        [sys.executable, "-m", "fastapi_voltro_schedules", "schedule", "audit",
         "--database-url", url, "--from", start.isoformat(), "--to", end.isoformat(), "--json"],
        cwd=REPO / "tests", env={**os.environ, "VOLTRO_DEV": ""}, capture_output=True,
        text=True, timeout=120, check=False,
    )  # fmt: skip


def pause_schedule(replica: Server, name: str, token: str, reason: str) -> httpx.Response:
    """``POST /_voltro/inspect/schedules/{name}/pause`` on one replica, answered 200."""
    r = httpx.post(
        f"{replica.url}/_voltro/inspect/schedules/{name}/pause",
        headers={"Authorization": f"Bearer {token}"},
        json={"reason": reason},
        timeout=HANG,
    )
    assert r.status_code == 200, r.text
    return r


# ------------------------------------------------------------------------------- markers


@dataclass(frozen=True)
class Marker:
    name: str
    slot: datetime
    replica_id: str
    run_id: str


def read_markers(directory: Path, name: str | None = None) -> list[Marker]:
    """The handler executions recorded by ``apps.cluster_app`` in ``CLUSTER_MARKER_DIR``."""
    out = []
    for path in directory.iterdir():
        schedule, slot, replica_id, run_id = path.name.split("__")
        if name is None or schedule == name:
            at = datetime.strptime(slot, "%Y%m%dT%H%M%S").replace(tzinfo=UTC)
            out.append(Marker(schedule, at, replica_id, run_id))
    return sorted(out, key=lambda m: (m.slot, m.run_id))


def twice_run(directory: Path, url: str) -> list[dict[str, Any]]:
    """Each slot whose handler ran more than once (the markers in ``directory``), with what
    tells how: each execution's replica and run id, and the ledger's rows for the slot."""
    markers = read_markers(directory)
    counts = Counter((m.name, m.slot) for m in markers)
    twice = {key for key, n in counts.items() if n > 1}
    if not twice:
        return []
    rows = fetch_runs(url)
    return [
        {
            "slot": f"{name} {iso_z(slot)}",
            "ran": [(m.replica_id, m.run_id) for m in markers if (m.name, m.slot) == (name, slot)],
            "rows": [
                (r.replica_id, r.id, r.status, r.trigger, r.fired_at, r.finished_at)
                for r in rows
                if (r.name, r.scheduled_at) == (name, slot)
            ],
        }
        for name, slot in sorted(twice)
    ]


# ------------------------------------------------------------------------------- logs

SKIP_LINE = re.compile(
    r"schedule: overlap skip  name=(?P<name>\S+) scope=(?P<scope>\S+) "
    r"heldBy=(?P<held_by>\S+) lastSeenMs=(?P<ms>\d+)$",
    re.MULTILINE,
)
