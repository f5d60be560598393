"""The durable line survives a replica that dies (or only stalls) while it holds waiters.

Real uvicorn replicas of ``apps.cluster_app`` on one Postgres or MariaDB ledger. Replica B
runs ``line`` (every second) slowly and replica A fast, so the line grows and B's firings
wait in it as ``queued`` rows B beats. A's clock lags B's by 60 ms (``CLUSTER_CLOCK_LAG_MS``),
so B wins every slot's claim while it lives: the line is B's to hold, whatever the machine's
load does to a fair race (under a fair race, A winning every slot for 20 s happened on a busy
machine, and B never held a waiter). Then B is:

* SIGKILLed — A adopts B's waiters and runs them first, in ``scheduled_at`` order, stamped
  with A's ``replica_id`` and keeping their trigger and coordination outcome; with a tight
  ``VOLTRO_QUEUE_ADOPTION_WINDOW_MS`` they are past the bound instead: recorded ``missed``,
  counted ``abandoned``, and never run;
* SIGSTOPped for less than three beats, then SIGCONTed — nothing is adopted, and each of B's
  waiters runs exactly once, on B.

What B held when it died is read with A stopped too (SIGSTOP), so no adoption can race the read.

Executions are counted from the handlers' own side effects (a marker file created before the
work, a span line written after it), not only from the ledger.
"""

from __future__ import annotations

import re
import signal
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import pytest
from support.cluster import Replica, fetch_runs, read_markers, run_async, uvicorn_cluster
from support.leases import locked_now
from support.queue_lines import assert_one_at_a_time_in_order, line_env, read_spans
from support.waiting import HANG, wait_for

from fastapi_voltro_schedules.enums import RunStatus
from fastapi_voltro_schedules.migrations import upgrade_to_head
from fastapi_voltro_schedules.models import CLAIMS_TABLE
from fastapi_voltro_schedules.planning import last_seen
from fastapi_voltro_schedules.store import RunRecord
from fastapi_voltro_schedules.store.statements.claims import LINE_SUFFIX

pytestmark = pytest.mark.slow

STORES = [
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("mariadb", marks=pytest.mark.mariadb),
]
LOSES_RACES = {"CLUSTER_CLOCK_LAG_MS": "60"}
"""A's config: fire 60 ms late (under the 75 ms database-clock tolerance of a 300 ms beat)."""
TERMINAL = {RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.MISSED, RunStatus.SKIPPED}


def _recoveries(replica: Replica, outcome: str) -> float:
    text = httpx.get(replica.url + "/metrics", timeout=HANG).text
    match = re.search(
        r'^voltro_schedule_queue_recoveries_total\{name="line",outcome="' + outcome + r'"\} (\S+)$',
        text,
        re.MULTILINE,
    )
    return float(match.group(1)) if match else 0.0


def _queued_of(url: str, replica_id: str) -> list[RunRecord]:
    return [
        r
        for r in fetch_runs(url, "line")
        if r.status is RunStatus.QUEUED and r.replica_id == replica_id
    ]


def _settled(url: str, ids: set[str]) -> dict[str, RunRecord] | None:
    rows = {r.id: r for r in fetch_runs(url, "line") if r.id in ids}
    if len(rows) == len(ids) and all(r.status in TERMINAL for r in rows.values()):
        return rows
    return None


def _boot_b_then_a(
    url: str, store: str, tmp_path: Path, *, b: dict[str, str], a: dict[str, str]
) -> tuple[Path, Path, dict[str, str], dict[str, str]]:
    log = tmp_path / "spans.jsonl"
    markers = tmp_path / "markers"
    markers.mkdir()
    common = {"CLUSTER_MARKER_DIR": str(markers)}
    env_b = line_env(url, f"{store}-b", log, **common, **b)
    env_a = line_env(url, f"{store}-a", log, **common, **a)
    return log, markers, env_b, env_a


@pytest.mark.parametrize("store", STORES)
@pytest.mark.parametrize(
    ("window_ms", "recovered"),
    [pytest.param("60000", "adopted", id="adopted"), pytest.param("400", "abandoned", id="past")],
)
def test_sigkilled_replicas_waiters_are_adopted_in_order_or_missed_past_the_bound(
    store: str, window_ms: str, recovered: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    url = request.getfixturevalue(f"{store}_url")
    run_async(upgrade_to_head(url))
    beats = {"VOLTRO_SCHEDULE_HEARTBEAT_MS": "300", "VOLTRO_QUEUE_ADOPTION_WINDOW_MS": window_ms}
    log, markers, env_b, env_a = _boot_b_then_a(
        url,
        store,
        tmp_path,
        b={"CLUSTER_LINE_SECONDS": "3", **beats},
        a={"CLUSTER_LINE_SECONDS": "0.3", **LOSES_RACES, **beats},
    )
    with uvicorn_cluster(tmp_path, [env_b, env_a]) as (b, a):
        wait_for(lambda: len(_queued_of(url, b.replica_id)) >= 2, what="B's waiters")
        # A stopped first: B is dead and A cannot act, so this read is exactly what B held,
        # however long it takes.
        a.process.send_signal(signal.SIGSTOP)
        try:
            b.signal(signal.SIGKILL)
            held = {r.id: r for r in _queued_of(url, b.replica_id)}
        finally:
            a.process.send_signal(signal.SIGCONT)
        assert held, "B held no waiter when it was killed"
        final = wait_for(lambda: _settled(url, set(held)), what="B's waiters settled")
        # A keeps firing its own occurrences after B's.
        last_held = max(r.scheduled_at for r in held.values())
        wait_for(
            lambda: [s for s in read_spans(log) if str(s["slot"]) > last_held.isoformat()],
            what="A's own run after B's waiters",
        )
        count = _recoveries(a, recovered)
        a_log = a.log()
    spans = read_spans(log)
    assert_one_at_a_time_in_order(spans)
    ran = {m.run_id: m for m in read_markers(markers, "line")}
    for run_id, before in held.items():
        after = final[run_id]
        # Adopted or missed, the row keeps what it was fired as.
        assert after.trigger is before.trigger
        assert after.coordination_outcome is before.coordination_outcome
        assert after.scheduled_at == before.scheduled_at
        if recovered == "adopted":
            assert after.status is RunStatus.SUCCEEDED, after
            assert after.replica_id == a.replica_id, after
            assert ran[run_id].replica_id == a.replica_id
            assert (
                "schedule: adopted a queued firing from a replica that stopped reporting  "
                f"name=line runId={run_id}" in a_log
            )
        else:
            assert after.status is RunStatus.MISSED, after
            assert after.error_tag == "abandoned", after
            assert after.error_message and "past the adoption bound" in after.error_message
            assert run_id not in ran, "an occurrence past the adoption bound ran"
            assert f"recorded missed  name=line runId={run_id} heldBy={b.replica_id}" in a_log
    # Every waiter recovered once, and each one B's: `held` is what B's rows said once it was
    # killed — a COMMIT B had already sent may still land after that read (the server finishes
    # it), so the log names the rows recovered, a superset of `held` by at most those.
    said = (
        r"adopted a queued firing from a replica that stopped reporting  name=line runId=(\S+)"
        if recovered == "adopted"
        else r"recorded missed  name=line runId=(\S+) heldBy=" + re.escape(b.replica_id)
    )
    named = re.findall(said, a_log)
    assert len(named) == len(set(named)), named  # none recovered twice
    assert set(held) <= set(named), (held.keys(), named)
    assert count == len(named), (count, named)
    if recovered == "adopted":
        # Each ran exactly once (one marker: the counting is the handler's own), before any
        # of A's own later occurrences started.
        adopted = [s for s in spans if str(s["runId"]) in held]
        assert len(adopted) == len(held)
        adopted_end = max(float(s["end"]) for s in adopted)  # type: ignore[arg-type]
        own_later = [
            s
            for s in spans
            if str(s["runId"]) not in held and str(s["slot"]) > last_held.isoformat()
        ]
        assert own_later
        assert all(float(s["start"]) >= adopted_end for s in own_later)  # type: ignore[arg-type]
    assert "Traceback" not in a_log


@pytest.mark.parametrize("store", STORES)
def test_a_waiter_stalled_for_less_than_three_beats_is_not_adopted_and_runs_once(
    store: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """B is stopped outside the line's lock, and stays stopped until A has looked at the line
    with B silent for a full beat at least (one of A's own firings queued behind B's waiters
    then: it judged them live), so "not adopted" cannot pass because A never looked. The one
    thing left to time is B itself: once SIGCONTed it must beat again before its silence
    reaches three beats — that a stalled replica is slow and not dead is a wall-clock
    judgment by design. The 2 s heartbeat leaves it about two beats (4 s) for that."""
    url = request.getfixturevalue(f"{store}_url")
    run_async(upgrade_to_head(url))
    beat = timedelta(seconds=2)
    beats = {"VOLTRO_SCHEDULE_HEARTBEAT_MS": str(int(beat.total_seconds() * 1000))}
    log, markers, env_b, env_a = _boot_b_then_a(
        url,
        store,
        tmp_path,
        b={"CLUSTER_LINE_SECONDS": "1.5", **beats},
        a={"CLUSTER_LINE_SECONDS": "0.3", **LOSES_RACES, **beats},
    )
    with uvicorn_cluster(tmp_path, [env_b, env_a]) as (b, a):
        wait_for(lambda: len(_queued_of(url, b.replica_id)) >= 1, what="B's waiters")

        def stopped_off_the_line() -> bool:
            # Stopped holding the line's lock, B would hold A's every look back with it.
            b.process.send_signal(signal.SIGSTOP)
            if not locked_now(url, CLAIMS_TABLE, "key", [f"line{LINE_SUFFIX}"]):
                return True
            b.process.send_signal(signal.SIGCONT)
            return False

        wait_for(stopped_off_the_line, interval=0.05, what="B stopped outside the line's lock")
        try:
            live = [
                r
                for r in fetch_runs(url, "line")
                if r.replica_id == b.replica_id
                and r.status in (RunStatus.QUEUED, RunStatus.RUNNING)
            ]
            held = {r.id: r for r in live if r.status is RunStatus.QUEUED}
            assert held, "B held no waiter when it was stopped"
            silent_since = max(_seen(r) for r in live)
            last_held = max(r.scheduled_at for r in held.values())

            def judged_live() -> list[RunRecord]:
                return [
                    r
                    for r in fetch_runs(url, "line")
                    if r.replica_id == a.replica_id
                    and r.scheduled_at > last_held
                    and r.fired_at is not None
                    and r.fired_at - silent_since >= beat
                ]

            wait_for(judged_live, what="A queueing behind B's waiters a beat into B's silence")
        finally:
            b.process.send_signal(signal.SIGCONT)
        final = wait_for(lambda: _settled(url, set(held)), what="B's waiters settled")
        adopted = _recoveries(a, "adopted") + _recoveries(a, "abandoned")
        logs = a.log() + b.log()
    assert adopted == 0
    assert "adopted a queued firing" not in logs
    assert all(r.status is RunStatus.SUCCEEDED for r in final.values()), final
    assert all(r.replica_id == b.replica_id for r in final.values()), final
    ran = [m for m in read_markers(markers, "line") if m.run_id in held]
    assert sorted(m.run_id for m in ran) == sorted(held), "a waiter ran twice or not at all"
    assert all(m.replica_id == b.replica_id for m in ran)
    assert_one_at_a_time_in_order(read_spans(log))
    assert "Traceback" not in logs


def _seen(row: RunRecord) -> datetime:
    seen = last_seen(row.fired_at, row.heartbeat_at)
    assert seen is not None, row
    return seen
