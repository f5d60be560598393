"""Run-time schedules across three real processes, one of them SIGKILLed (SPEC §7, issue 31).

Per store — one SQLite file under ``uvicorn --workers 3``; Postgres and MariaDB with three
uvicorn processes each, under ``advisoryLock`` and under ``cluster`` — on the real clock with a
500 ms heartbeat, through HTTP only (``PUT``/``DELETE /_voltro/inspect/schedules/{name}``):

1. three schedules are put on replica 1 (``rt.a`` and ``rt.c`` every second with handler
   ``markArgs``, ``rt.b`` every 2 s with ``markArgsToo``, each with its own args), and every
   replica lists them armed (it followed the write);
2. ``rt.b`` is edited through replica 2 (every 3 s, another handler, other args);
3. the replica firing is SIGKILLed in the middle of a run (``rt.a``'s runs last 0.4 s): the
   one whose ``running`` row the ledger shows — on SQLite, necessarily the holder of the firer
   lock; under ``cluster``, that schedule's lease owner;
4. ``rt.c`` is deleted through a survivor; the others keep firing a while; then everything
   stops.

What must hold, read from the handlers' own marker files (``apps/cluster_app.py``: one per
execution, its contents the handler and ``ctx.args``) and from the database:

(a) no slot's handler ran twice across the processes;
(b) every slot each schedule owed — from its creation to its deletion or the end, each version's
    cadence in its own span — has exactly one row (a run, or what the ledger says happened to
    it: ``missed``, ``skipped``, ``failed``/``abandoned``);
(c) nothing of ``rt.c`` fires for a slot later than one heartbeat after its tombstone took
    effect;
(d) ``rt.b`` fires on the new cadence, with the new handler and args, from one heartbeat after
    the edit took effect;
(e) ``voltro schedule audit``, run as an operator would (a process of its own), exits 0.

A write reaches the other replicas within one heartbeat (``catalog.Catalog.follow``): until
then a replica runs what it knew, so (c) and (d) are judged from one beat after the version's
``effective_from`` (the instant the database stamped on it).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.cluster import (
    audit_cli,
    fetch_runs,
    run_async,
    seconds_between,
    sleep_until_fraction,
    utcnow,
    uvicorn_cluster,
)
from support.servers import REPO, Server, free_port
from support.waiting import HANG, wait_for

from fastapi_voltro_schedules.enums import RunStatus
from fastapi_voltro_schedules.leadership import FIRER_LOCK_SUFFIX
from fastapi_voltro_schedules.migrations import upgrade_to_head
from fastapi_voltro_schedules.records import DefinitionRecord
from fastapi_voltro_schedules.store import RunRecord, create_store

pytestmark = pytest.mark.slow

HEARTBEAT_MS = 500
BEAT = timedelta(milliseconds=HEARTBEAT_MS)
OPERATOR = "operator-token-for-the-kill-test"
AS_OPERATOR = {"Authorization": f"Bearer {OPERATOR}"}
EXECUTED = frozenset({RunStatus.RUNNING, RunStatus.SUCCEEDED, RunStatus.FAILED})
SETTLED = frozenset({RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.SKIPPED, RunStatus.MISSED})

A, B, C = "rt.a", "rt.b", "rt.c"
PUTS = {
    A: {
        "cron": "* * * * * *",
        "timezone": "UTC",
        "handler": "markArgs",
        "args": {"t": "a", "sleep": 0.4},  # long enough to be killed in the middle
    },
    B: {"cron": "*/2 * * * * *", "timezone": "UTC", "handler": "markArgsToo", "args": {"t": "b"}},
    C: {"cron": "* * * * * *", "timezone": "UTC", "handler": "markArgs", "args": {"t": "c"}},
}
EDIT = {
    "cron": "*/3 * * * * *",
    "timezone": "UTC",
    "handler": "markArgs",
    "args": {"t": "b", "v": 2},
}

STORES = [
    pytest.param("sqlite", None, id="sqlite-workers"),
    pytest.param("postgres", "advisoryLock", marks=pytest.mark.postgres, id="postgres-lock"),
    pytest.param("mariadb", "advisoryLock", marks=pytest.mark.mariadb, id="mariadb-lock"),
    pytest.param("postgres", "cluster", marks=pytest.mark.postgres, id="postgres-cluster"),
    pytest.param("mariadb", "cluster", marks=pytest.mark.mariadb, id="mariadb-cluster"),
]


# ------------------------------------------------------------------------------- the fleet


@dataclass
class Handle:
    """One replica as the test talks to it: a keep-alive connection to that process."""

    replica_id: str
    http: httpx.Client


@dataclass
class Fleet:
    url: str
    """The ledger."""
    env: dict[str, str]
    """A replica's environment, for the audit CLI (its database, its heartbeat)."""
    handles: list[Handle]
    kill: Callable[[str], None]
    """``kill(replica_id)``: SIGKILL that process."""
    firer: Callable[[], str | None]
    """``firer()``: the replica id of the one process that fires (SQLite), else ``None``."""
    logs: Callable[[], str]
    """``logs()``: every process's output (readable after they stopped too)."""
    dead: set[str] = field(default_factory=set)

    def alive(self) -> list[Handle]:
        return [h for h in self.handles if h.replica_id not in self.dead]


def _env(url: str, markers: Path, **extra: str) -> dict[str, str]:
    return {
        "VOLTRO_DATABASE_URL": url,
        "VOLTRO_SCHEDULE_HEARTBEAT_MS": str(HEARTBEAT_MS),
        "VOLTRO_SHUTDOWN_GRACE_MS": "200",
        "VOLTRO_INSPECT_TOKEN": OPERATOR,
        "CLUSTER_SCHEDULES": "",  # no declared schedule: the run-time ones only
        "CLUSTER_MARKER_DIR": str(markers),
        **extra,
    }


@contextmanager
def server_fleet(url: str, coordination: str, tmp_path: Path, markers: Path) -> Iterator[Fleet]:
    """Three ``uvicorn`` processes on one Postgres/MariaDB ledger."""
    run_async(upgrade_to_head(url))
    envs = [
        _env(url, markers, VOLTRO_REPLICA_ID=f"kill-r{i}", VOLTRO_COORDINATION=coordination)
        for i in range(3)
    ]
    with uvicorn_cluster(tmp_path, envs) as replicas, ExitStack() as stack:
        by_id = {r.replica_id: r for r in replicas}

        handles = [
            Handle(r.replica_id, stack.enter_context(httpx.Client(base_url=r.url, timeout=HANG)))
            for r in replicas
        ]

        def logs() -> str:
            return "\n".join(f"===== {r.replica_id}\n{r.log()}" for r in replicas)

        def kill(replica_id: str) -> None:
            by_id[replica_id].signal(signal.SIGKILL)

        yield Fleet(url, envs[0], handles, kill, lambda: None, logs)


@contextmanager
def sqlite_workers(tmp_path: Path, markers: Path) -> Iterator[Fleet]:
    """``uvicorn --workers 3`` on one SQLite file; a handle is a keep-alive connection that
    landed on a given worker (the kernel picks one per connection: the test opens connections
    until it holds one to each worker)."""
    database = tmp_path / "ledger.db"
    url = f"sqlite+aiosqlite:///{database}"
    env = _env(url, markers)
    port = free_port()
    full = {**os.environ, "PYTHONPATH": f"{REPO}:{REPO / 'tests'}", **env}
    full.pop("VOLTRO_REPLICA_ID", None)  # <hostname>-<pid>: one id per worker
    log_path = tmp_path / "uvicorn.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "apps.cluster_app:app", "--workers", "3",
             "--timeout-keep-alive", "300", "--host", "127.0.0.1", "--port", str(port)],
            cwd=tmp_path, env=full, stdout=log, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
    server = Server(process, port, log_path)
    lock_file = database.with_name(database.name + FIRER_LOCK_SUFFIX)
    host = socket.gethostname()
    try:
        server.wait_ready("uvicorn --workers 3", "/openapi.json", HANG, require_ok=False)
        wait_for(
            lambda: server.log().count("Application startup complete") >= 3,
            what="three workers started",
        )
        with ExitStack() as stack:
            handles: dict[str, Handle] = {}

            def one_more() -> bool:
                client = httpx.Client(base_url=server.url, timeout=HANG)
                stack.callback(client.close)
                replica_id = client.get("/_cluster/replica").json()["replicaId"]
                handles.setdefault(replica_id, Handle(replica_id, client))
                return len(handles) == 3

            wait_for(one_more, interval=0.01, what="a connection to each of the three workers")

            def firer() -> str:
                return f"{host}-{int(lock_file.read_text().strip())}"

            def kill(replica_id: str) -> None:
                os.kill(int(replica_id.rsplit("-", 1)[1]), signal.SIGKILL)

            yield Fleet(url, env, list(handles.values()), kill, firer, server.log)
    finally:
        server.kill(signal.SIGTERM)


# ------------------------------------------------------------------------------- readers


def fetch_versions(url: str, name: str) -> list[DefinitionRecord]:
    """``name``'s definition versions as stored, newest first."""

    async def read() -> list[DefinitionRecord]:
        store = create_store(url)
        try:
            return (await store.definitions([name])).get(name, [])
        finally:
            await store.dispose()

    return run_async(read())


@dataclass(frozen=True)
class Execution:
    name: str
    slot: datetime
    replica_id: str
    run_id: str
    handler: str
    args: dict[str, Any]


def executions(markers: Path) -> list[Execution]:
    """Every handler execution so far, from the marker files (contents written right after
    the file is created: one read while it is being written shows it empty — read after the
    processes stopped, or tolerate that)."""
    out = []
    for path in markers.iterdir():
        name, slot, replica_id, run_id = path.name.split("__")
        text = path.read_text()
        body = json.loads(text) if text else {"handler": "", "args": {}}
        at = datetime.strptime(slot, "%Y%m%dT%H%M%S").replace(tzinfo=UTC)
        out.append(Execution(name, at, replica_id, run_id, body["handler"], body["args"]))
    return sorted(out, key=lambda e: (e.slot, e.name))


def every(seconds: int, start: datetime, end: datetime) -> list[datetime]:
    """The slots of a ``*/seconds`` cron in ``(start, end]``."""
    return [s for s in seconds_between(start, end) if s > start and s.second % seconds == 0]


def listed(handle: Handle) -> dict[str, dict[str, Any]]:
    r = handle.http.get("/_voltro/inspect/schedules", headers=AS_OPERATOR)
    assert r.status_code == 200, r.text
    return {s["name"]: s for s in r.json()["schedules"]}


def _runs_after(url: str, name: str, after: datetime, *, not_by: str = "") -> list[RunRecord]:
    return [
        r
        for r in fetch_runs(url, name)
        if r.scheduled_at > after and r.status in EXECUTED and r.replica_id != not_by
    ]


# ------------------------------------------------------------------------------- the test


@pytest.mark.parametrize(("store", "coordination"), STORES)
def test_runtime_schedules_written_over_http_survive_a_sigkilled_replica(
    store: str, coordination: str | None, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    if store == "sqlite":
        fleet_cm = sqlite_workers(tmp_path, markers)
    else:
        url = request.getfixturevalue(f"{store}_url")
        assert coordination is not None
        fleet_cm = server_fleet(url, coordination, tmp_path, markers)
    with fleet_cm as fleet:
        url = fleet.url
        first, second, _ = fleet.handles

        # -- 1. three schedules put on replica 1 ------------------------------------------
        for name, body in PUTS.items():
            r = first.http.put(f"/_voltro/inspect/schedules/{name}", json=body, headers=AS_OPERATOR)
            assert (r.status_code, r.json()["source"]) == (201, "runtime"), r.text
        created = {name: fetch_versions(url, name)[0].effective_from for name in PUTS}

        def armed_everywhere() -> bool:
            # each replica followed the writes: it lists all three with a next firing
            return all(
                all(listed(h).get(n, {}).get("nextFiring") for n in PUTS) for h in fleet.handles
            )

        wait_for(armed_everywhere, what="every replica listing the three schedules armed")
        for name in PUTS:
            wait_for(
                lambda name=name: len(_runs_after(url, name, created[name])) >= 2,
                what=f"{name} firing",
            )

        # -- 2. rt.b edited through replica 2 ---------------------------------------------
        r = second.http.put(f"/_voltro/inspect/schedules/{B}", json=EDIT, headers=AS_OPERATOR)
        assert (r.status_code, r.json()["cron"]) == (200, EDIT["cron"]), r.text
        versions = fetch_versions(url, B)
        assert [v.version for v in versions] == [2, 1]
        edited = versions[0].effective_from
        wait_for(
            lambda: len(_runs_after(url, B, edited + BEAT)) >= 2,
            what="rt.b firing on its new cadence",
        )

        # -- 3. SIGKILL the replica firing, in the middle of a run --------------------------
        def kill_mid_run() -> tuple[RunRecord, str, datetime] | None:
            sleep_until_fraction(0.1)  # rt.a's run of this second is under way (0.4 s long)
            row = next((r for r in fetch_runs(url) if r.status is RunStatus.RUNNING), None)
            if row is None:
                return None
            firer = fleet.firer()
            # one firer per SQLite file: the process running it is the one holding the lock
            assert firer is None or firer == row.replica_id, (firer, row)
            at = utcnow()
            fleet.kill(row.replica_id)
            return row, row.replica_id, at

        doomed, victim, killed_at = wait_for(kill_mid_run, what="a run killed mid-way")
        fleet.dead.add(victim)
        for name in (A, C):
            wait_for(
                lambda name=name: len(_runs_after(url, name, killed_at, not_by=victim)) >= 3,
                what=f"{name} fired by survivors after the kill",
            )
        wait_for(lambda: _runs_after(url, B, killed_at, not_by=victim), what="rt.b after the kill")

        # -- 4. rt.c deleted through a survivor, the rest keep going ----------------------
        survivor = fleet.alive()[-1]
        r = survivor.http.delete(f"/_voltro/inspect/schedules/{C}", headers=AS_OPERATOR)
        assert r.status_code == 204, r.text
        tombstone = fetch_versions(url, C)[0]
        assert tombstone.deleted
        deleted = tombstone.effective_from
        wait_for(
            lambda: all(C not in listed(h) for h in fleet.alive()),
            what="every survivor dropping the deleted schedule (it follows within a beat)",
        )
        quiet_until = deleted + BEAT + timedelta(seconds=3)
        wait_for(lambda: _runs_after(url, A, quiet_until), what="rt.a past the deleted one's quiet")

        # The end of the stretch judged: every slot owed up to it must have its one row
        # before the processes stop (a slot due just now may not have it yet).
        end = utcnow().replace(microsecond=0)
        owed = {
            A: every(1, created[A], end),
            B: every(2, created[B], edited) + every(3, edited, end),
            C: every(1, created[C], deleted),
        }

        def all_recorded() -> list[RunRecord] | None:
            rows = fetch_runs(url)
            have = {(r.name, r.scheduled_at) for r in rows}
            if any((n, s) not in have for n, slots in owed.items() for s in slots):
                return None
            # …and settled: a killed run's row is marked abandoned once it reads dead
            if any(r.status not in SETTLED for r in rows if r.scheduled_at <= end):
                return None
            return rows

        try:
            wait_for(all_recorded, what="a row for every owed slot, each settled")
        except AssertionError:
            rows = fetch_runs(url)
            have = {(r.name, r.scheduled_at) for r in rows}
            holes = [(n, s) for n, slots in owed.items() for s in slots if (n, s) not in have]
            unsettled = [r for r in rows if r.status not in SETTLED and r.scheduled_at <= end]
            raise AssertionError(
                f"holes: {holes}\nunsettled: {unsettled}\nvictim: {victim} at {killed_at}"
            ) from None
    logs: str = fleet.logs()

    rows = fetch_runs(url)
    ran = executions(markers)
    context = f"victim={victim} killedAt={killed_at} doomed={doomed}\n{logs[-20000:]}"

    # (a) no slot's handler ran twice, across every process
    twice = {k: n for k, n in Counter((e.name, e.slot) for e in ran).items() if n > 1}
    assert not twice, (twice, context)
    by_id = {r.id: r for r in rows}
    for e in ran:  # every execution is a row of the ledger whose handler started
        assert e.run_id in by_id and by_id[e.run_id].status in EXECUTED, (e, context)
    executed_ids = {e.run_id for e in ran}
    for r in rows:  # …and every run recorded succeeded did execute
        if r.status is RunStatus.SUCCEEDED:
            assert r.id in executed_ids, (r, context)

    # (b) every owed slot has exactly one row
    per_slot = Counter((r.name, r.scheduled_at) for r in rows)
    assert not {k: n for k, n in per_slot.items() if n > 1}, context
    for name, slots in owed.items():
        missing = [s for s in slots if per_slot[(name, s)] != 1]
        assert not missing, (name, missing, context)
    assert {r.name for r in rows} == set(PUTS)
    assert not [r for r in rows if r.scheduled_at <= created[r.name]], "a slot before creation"
    for r in rows:
        # only the killed replica's runs can have failed — and, past the end, a run the final
        # SIGTERM cut short (the shutdown grace is shorter than rt.a's run)
        if r.status is RunStatus.FAILED and not (
            r.scheduled_at > end and r.error_tag == "shutdown"
        ):
            assert (r.error_tag, r.replica_id) == ("abandoned", victim), (r, context)
    corpse = by_id[doomed.id]  # killed in the middle (or it had just ended): never left running
    assert corpse.status is RunStatus.FAILED or (
        corpse.status is RunStatus.SUCCEEDED
        and corpse.finished_at is not None
        and corpse.finished_at <= killed_at + timedelta(seconds=0.2)
    ), (corpse, context)
    lost = Counter(r.status.value for r in rows if r.status is not RunStatus.SUCCEEDED)
    print(f"\n{store}/{coordination}: {len(rows)} rows, not succeeded: {dict(lost)}")

    # (c) nothing of the deleted schedule after its tombstone took effect (+ one beat)
    late = [r for r in rows if r.name == C and r.scheduled_at > deleted + BEAT]
    assert not late, (deleted, late, context)
    assert not [e for e in ran if e.name == C and e.slot > deleted + BEAT], deleted

    # (d) the edited schedule: old handler and args before the edit, the new cadence, handler
    # and args from one beat after it took effect
    b_rows = [r for r in rows if r.name == B]
    assert all(r.scheduled_at.second % 3 == 0 for r in b_rows if r.scheduled_at > edited + BEAT)
    assert all(r.scheduled_at.second % 2 == 0 for r in b_rows if r.scheduled_at <= edited)
    for e in ran:
        if e.name == B and e.slot <= edited:
            assert (e.handler, e.args) == ("markArgsToo", PUTS[B]["args"]), e
        elif e.name == B and e.slot > edited + BEAT:
            assert (e.handler, e.args) == (EDIT["handler"], EDIT["args"]), e
        elif e.name != B:
            assert (e.handler, e.args) == (PUTS[e.name]["handler"], PUTS[e.name]["args"]), e
    assert len([e for e in ran if e.name == B and e.slot > edited + BEAT]) >= 2

    # (e) the operator's audit, a process of its own, over the whole life
    start = min(created.values()).replace(microsecond=0) - timedelta(seconds=1)
    audit = audit_cli(fleet.env, start, end)
    assert audit.returncode == 0, (audit.stdout, audit.stderr)
    assert "clean" in audit.stdout, audit.stdout
