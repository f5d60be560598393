"""The hand-off tests' shared shape (``tests/test_handoff_*.py``): a real job-engine worker
process, two uvicorn replicas of ``apps.handoff_app`` on one Postgres ledger, 20 slots of an
external schedule each hit by a duplicate trigger storm, a SIGKILL of the replica following a
job right after it enqueued it — then every slot's job executed once (the worker's marker
files), the ledger's final statuses the jobs' outcomes, and ``voltro schedule audit`` clean.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx

from fastapi_voltro_schedules.clock import iso_z
from fastapi_voltro_schedules.enums import RunStatus
from fastapi_voltro_schedules.handoff import job_id_for
from fastapi_voltro_schedules.store import RunRecord
from support.cluster import Replica, fetch_runs, uvicorn_cluster
from support.external import INSPECT_TOKEN, TRIGGER_AUTH, TRIGGER_TOKEN
from support.servers import REPO
from support.waiting import HANG, wait_for

APP = "apps.handoff_app:app"
FIRST_SLOT = datetime(2026, 3, 4, 8, 30, tzinfo=UTC)
SLOTS = 20
KILL_AT = 7
"""The slot whose job's follower is SIGKILLed right after the enqueue (its job fails: 7 % 4)."""
STORM = 8
"""Concurrent arrivals per live replica for each slot."""


def fails(slot: datetime) -> bool:
    """Whether ``apps.handoff_worker``'s job fails for ``slot`` (``apps.handoff_app``)."""
    return slot.minute % 4 == 3


@contextmanager
def worker_process(
    command: Sequence[str], env: Mapping[str, str], log_path: Path
) -> Iterator[subprocess.Popen[str]]:
    """A job-engine worker (``command``, run from ``tests/``), stopped with SIGTERM (then
    SIGKILL) on exit."""
    full_env = {**os.environ, "PYTHONPATH": f"{REPO}:{REPO / 'tests'}", **env}
    with log_path.open("w") as log:
        process = subprocess.Popen(
            list(command),
            cwd=REPO / "tests",
            env=full_env,
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)


def executions(markers: Path) -> Counter[str]:
    """How many times each job id ran (its marker files; ``/`` and ``:`` spelled ``_``, ``-``)."""
    return Counter(p.name.split("__")[0] for p in markers.iterdir() if p.name != "hold")


def marker_name(job_id: str) -> str:
    return job_id.replace("/", "_").replace(":", "-")


def _post_clock(replica: Replica, path: str, **params: str) -> None:
    r = httpx.post(f"{replica.url}/_test/clock{path}", params=params, timeout=HANG)
    assert r.status_code == 200, r.text


def _trigger(replica: Replica) -> httpx.Response:
    return httpx.post(
        f"{replica.url}/_voltro/schedules/report/trigger", headers=TRIGGER_AUTH, timeout=HANG
    )


def storm(replicas: Sequence[Replica]) -> list[httpx.Response]:
    """:data:`STORM` concurrent arrivals on each of ``replicas`` at once."""
    targets = [r for r in replicas for _ in range(STORM)]
    with ThreadPoolExecutor(max_workers=len(targets)) as pool:
        return list(pool.map(_trigger, targets))


def _row(url: str, slot: datetime) -> RunRecord | None:
    rows = [r for r in fetch_runs(url, "report") if r.scheduled_at == slot]
    assert len(rows) <= 1, rows  # one row per slot, whatever the storms
    return rows[0] if rows else None


def _final(url: str, slot: datetime) -> RunRecord | None:
    row = _row(url, slot)
    return row if row is not None and row.status.terminal else None


@dataclass
class Outcome:
    rows: list[RunRecord]
    executed: Counter[str]
    answers: Counter[int]
    killed: Replica
    survivor: Replica
    logs: str
    audit: subprocess.CompletedProcess[str]


def replica_envs(url: str, extra: Mapping[str, str]) -> list[dict[str, str]]:
    return [
        {
            "VOLTRO_DATABASE_URL": url,
            "VOLTRO_REPLICA_ID": f"r{i}",
            "VOLTRO_SCHEDULE_HEARTBEAT_MS": "500",
            "VOLTRO_SHUTDOWN_GRACE_MS": "200",
            "VOLTRO_SCHEDULE_TRIGGER_TOKEN": TRIGGER_TOKEN,
            "VOLTRO_INSPECT_TOKEN": INSPECT_TOKEN,
            "VOLTRO_EXTERNAL_MISSED_POLICY": "off",
            "VOLTRO_DEV": "",
            **extra,
        }
        for i in range(2)
    ]


def _storm_slot(url: str, slot: datetime, live: Sequence[Replica], answers: Counter[int]) -> None:
    """A duplicate storm on every live replica: one arrival starts the run, every other one is
    a duplicate of it; returns once the slot's row is final."""
    responses = storm(live)
    codes = Counter(r.status_code for r in responses)
    assert codes[202] == 1 and codes[200] == len(responses) - 1, [r.text for r in responses]
    run_ids = {r.json()["runId"] for r in responses} - {None}
    assert len(run_ids) == 1, run_ids
    answers.update(codes)
    wait_for(lambda: _final(url, slot), what=f"slot {iso_z(slot)} final")


def _kill_slot(
    url: str,
    slot: datetime,
    killed: Replica,
    survivor: Replica,
    markers: Path,
    answers: Counter[int],
) -> None:
    """``killed`` takes the slot and enqueues its job; the job starts on the worker and is held
    there; ``killed`` is SIGKILLed (right after its enqueue, before the job's outcome exists); a
    storm on ``survivor`` meets the slot's row; the job is let go; the survivor's clock moves
    until it reads the row silent, takes it over and records the job's outcome."""
    hold = markers / "hold"
    hold.touch()
    first = _trigger(killed)
    assert first.status_code == 202, first.text
    key = job_id_for("report", slot)
    wait_for(
        lambda: any(p.name.startswith(marker_name(key)) for p in markers.iterdir()),
        what=f"job {key} started on the worker",
    )
    row = _row(url, slot)
    assert row is not None and row.job_id is not None, row
    killed.signal(signal.SIGKILL)
    duplicates = storm([survivor])
    assert {r.status_code for r in duplicates} == {200}, [r.text for r in duplicates]
    answers.update(r.status_code for r in [first, *duplicates])
    hold.unlink()

    def taken_over() -> RunRecord | None:
        # the survivor's corpse loop sleeps on its clock: move it until it reads the killed
        # replica's row silent, takes it over and follows the job to its end
        _post_clock(survivor, "/advance", seconds="2")
        return _final(url, slot)

    wait_for(taken_over, interval=0.3, what=f"slot {iso_z(slot)} taken over and final")


def twenty_slots_across_a_kill(
    url: str, tmp_path: Path, markers: Path, extra: Mapping[str, str]
) -> Outcome:
    """Drive the 20 slots (the worker must already run); see the module docstring."""
    envs = replica_envs(url, extra)
    answers: Counter[int] = Counter()
    with uvicorn_cluster(tmp_path, envs, app=APP) as replicas:
        killed, survivor = replicas
        live = list(replicas)
        for k in range(SLOTS):
            slot = FIRST_SLOT + timedelta(minutes=k)
            for replica in live:
                _post_clock(replica, "", to=iso_z(slot + timedelta(seconds=10)))
            if k == KILL_AT:
                _kill_slot(url, slot, killed, survivor, markers, answers)
                live = [survivor]
            else:
                _storm_slot(url, slot, live, answers)
        logs = "\n".join(f"===== {r.replica_id}\n{r.log()}" for r in replicas)
    rows = fetch_runs(url, "report")
    env = {**os.environ, **envs[1], "PYTHONPATH": f"{REPO}:{REPO / 'tests'}"}
    audit = subprocess.run(
        [sys.executable, "-m", "fastapi_voltro_schedules", "schedule", "audit", "--app", APP,
         "--from", iso_z(FIRST_SLOT - timedelta(seconds=1)),
         "--to", iso_z(FIRST_SLOT + timedelta(minutes=SLOTS - 1))],
        cwd=REPO / "tests", env=env, capture_output=True, text=True, timeout=HANG, check=False,
    )  # fmt: skip
    return Outcome(rows, executions(markers), answers, killed, survivor, logs, audit)


def assert_one_job_per_slot(outcome: Outcome, *, keyed: bool = True) -> None:
    """The verdict every engine's test shares. ``keyed``: the engine's job id is the slot's
    key (arq, Celery); else it is the engine's own (procrastinate's bigserial) and the key is
    the job's queueing lock (the worker's markers are named by it)."""
    logs = outcome.logs
    rows = outcome.rows
    slots = [FIRST_SLOT + timedelta(minutes=k) for k in range(SLOTS)]
    assert [r.scheduled_at for r in rows] == slots, logs  # one row per slot, none missing
    assert outcome.answers[202] == SLOTS, outcome.answers  # one accepted arrival per slot
    expected = {marker_name(job_id_for("report", s)): 1 for s in slots}
    assert dict(outcome.executed) == expected, (outcome.executed, logs)  # each job ran once
    for row in rows:
        if keyed:
            assert row.job_id == job_id_for("report", row.scheduled_at), row
        else:
            assert row.job_id is not None and row.job_id.isdigit(), row
        assert row.job_tracking == "followed", row
        if fails(row.scheduled_at):
            assert row.status is RunStatus.FAILED, (row, logs)
            assert row.error_tag == "JobFailedError", row
            assert row.error_message is not None
            if keyed:  # the job's own exception (procrastinate keeps none: see its test)
                assert f"report for {iso_z(row.scheduled_at)} broke" in row.error_message, row
                assert "RuntimeError" in row.error_message, row
        else:
            assert (row.status, row.error_tag) == (RunStatus.SUCCEEDED, None), (row, logs)
    killed_slot = slots[KILL_AT]
    taken = next(r for r in rows if r.scheduled_at == killed_slot)
    assert taken.replica_id == outcome.survivor.replica_id, logs
    assert "took over a handed-off job" in outcome.survivor.log(), logs
    assert outcome.audit.returncode == 0, (outcome.audit.stdout, outcome.audit.stderr)
    assert "clean" in outcome.audit.stdout, outcome.audit.stdout
