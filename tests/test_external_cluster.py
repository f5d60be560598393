"""The external trigger across two uvicorn replicas sharing one Postgres ledger.

Each replica runs ``apps.external_app`` with its own ManualClock; tests move both clocks
together. Handler executions are counted with marker files, independently of the ledger.
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from conftest import run_async
from support.cluster import fetch_runs
from support.external import (
    APP,
    TRIGGER_AUTH,
    accounted,
    base_env,
    markers,
    poll_terminal,
    set_clock,
    trigger,
    watcher,
)
from support.servers import Server, uvicorn_server
from support.waiting import HANG, wait_for

from fastapi_voltro_schedules.enums import RunStatus, Trigger
from fastapi_voltro_schedules.migrations import upgrade_to_head
from fastapi_voltro_schedules.store import RunRecord

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def start_replicas(
    url: str, tmp_path: Path, marker_dir: Path, stack: ExitStack, n: int = 2, **extra: str
) -> list[Server]:
    run_async(upgrade_to_head(url))
    replicas = []
    for i in range(n):
        env = base_env(
            url,
            marker_dir,
            VOLTRO_REPLICA_ID=f"replica-{i + 1}",
            # a duplicate waits for the first arrival's row as long as a hang takes: under a
            # storm on a busy machine that row is late, not missing
            EXT_DUPLICATE_WAIT_SECONDS=str(HANG),
            **extra,
        )
        replicas.append(stack.enter_context(uvicorn_server(APP, tmp_path, env, name=f"r{i + 1}")))
    return replicas


@pytest.fixture
def marker_dir(tmp_path: Path) -> Path:
    d = tmp_path / "markers"
    d.mkdir()
    return d


@pytest.fixture
def replicas(postgres_url: str, tmp_path: Path, marker_dir: Path) -> Iterator[list[Server]]:
    with ExitStack() as stack:
        yield start_replicas(postgres_url, tmp_path, marker_dir, stack, EXT_HANDLER_SECONDS="0.5")


def set_clocks(servers: list[Server], instant: str) -> None:
    for s in servers:
        set_clock(s, instant)


# --------------------------------------------------------------------------- duplicates


def test_a_duplicate_on_the_other_replica_gets_the_first_run_id(
    replicas: list[Server], postgres_url: str, marker_dir: Path
) -> None:
    a, b = replicas
    set_clocks(replicas, "2026-03-04T09:00:07+00:00")
    first = trigger(a, "hourly")
    assert first.status_code == 202, first.text
    second = trigger(b, "hourly")
    stated = trigger(b, "hourly", {"X-CloudScheduler-ScheduleTime": "2026-03-04T09:00:00Z"})
    for r in (second, stated):
        assert r.status_code == 200, r.text
        assert r.json()["status"] == "duplicate"
        assert r.json()["runId"] == first.json()["runId"]
    # either replica reports the run
    assert poll_terminal(b, first.json()["runId"])[-1]["status"] == "succeeded"
    assert len(markers(marker_dir, "hourly", "20260304T090000")) == 1
    assert len(fetch_runs(postgres_url, "hourly")) == 1


async def test_duplicate_storm_200_posts_over_two_replicas(
    replicas: list[Server], postgres_url: str, marker_dir: Path
) -> None:
    set_clocks(replicas, "2026-03-04T10:00:12+00:00")
    limits = httpx.Limits(max_connections=400, max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=HANG, limits=limits) as client:
        answers = await asyncio.gather(
            *(
                client.post(
                    f"{replicas[i % 2].url}/_voltro/schedules/hourly/trigger",
                    headers=TRIGGER_AUTH,
                )
                for i in range(200)
            )
        )
    statuses = Counter((r.status_code, r.json()["status"]) for r in answers)
    assert statuses == {(202, "accepted"): 1, (200, "duplicate"): 199}, [
        r.text for r in answers if r.status_code not in (200, 202)
    ][:3]
    run_ids = {r.json()["runId"] for r in answers}
    assert len(run_ids) == 1 and None not in run_ids
    assert {r.json()["scheduledAt"] for r in answers} == {"2026-03-04T10:00:00.000Z"}
    (run_id,) = run_ids
    assert (await asyncio.to_thread(poll_terminal, replicas[0], run_id))[-1]["status"] == (
        "succeeded"
    )
    rows = await asyncio.to_thread(fetch_runs, postgres_url, "hourly")
    assert [(r.id, r.status) for r in rows] == [(run_id, RunStatus.SUCCEEDED)]
    assert len(markers(marker_dir, "hourly", "20260304T100000")) == 1


# --------------------------------------------------------------------------- missed policy


def missed_total(server: Server, name: str) -> float:
    text = httpx.get(f"{server.url}/_test/metrics", timeout=HANG).text
    m = re.search(rf'^voltro_schedule_external_missed_total\{{name="{name}"\}} (\S+)$', text, re.M)
    return float(m.group(1)) if m else 0.0


def hourly_rows(url: str) -> list[RunRecord]:
    return fetch_runs(url, "hourly")


@pytest.mark.parametrize("policy", ["record", "record-and-run", "off"])
def test_external_missed_policy_with_two_replicas(
    policy: str, postgres_url: str, tmp_path: Path, marker_dir: Path
) -> None:
    nine, ten = utc("2026-03-04T09:00:00"), utc("2026-03-04T10:00:00")
    with ExitStack() as stack:
        replicas = start_replicas(
            postgres_url,
            tmp_path,
            marker_dir,
            stack,
            VOLTRO_EXTERNAL_MISSED_POLICY=policy,
            EXT_CLOCK_START="2026-03-04T08:30:00+00:00",  # boot: the walk starts here
        )

        def missed_at(slot: datetime) -> list[RunRecord]:
            return [
                r
                for r in hourly_rows(postgres_url)
                if r.scheduled_at == slot and r.status is RunStatus.MISSED
            ]

        # 09:00 is closed at 09:05 (+2 s grace); 10:00 not yet at 09:10
        set_clocks(replicas, "2026-03-04T09:10:00+00:00")
        if policy != "off":
            wait_for(lambda: len(missed_at(nine)) == 1, what="09:00 recorded missed")
        set_clocks(replicas, "2026-03-04T10:10:00+00:00")
        if policy == "off":
            # no watcher runs anywhere: nothing could record a slot
            assert [watcher(s) for s in replicas] == [{"watching": False, "cursors": {}}] * 2
        else:
            # Both replicas' watchers settled 10:00 (one recorded it, the other found it
            # claimed): a wrong second recording would be in the ledger by now.
            wait_for(
                lambda: all(accounted(s, "hourly", ten) for s in replicas),
                what="both watchers past 10:00",
            )
        if policy == "record-and-run":
            wait_for(
                lambda: (
                    sum(r.status is RunStatus.SUCCEEDED for r in hourly_rows(postgres_url)) == 2
                ),
                what="both missed slots run",
            )
        rows = hourly_rows(postgres_url)
        totals = [missed_total(s, "hourly") for s in replicas]
        # a CronJob retry stating 10:05, as late as the skew allows: accounted for already,
        # unless "off"
        retry = trigger(replicas[1], "hourly", {"X-Voltro-Scheduled-At": "2026-03-04T10:05:00Z"})
        # one stating 09:00, long after: too late whatever the policy (a replay never runs)
        set_clocks(replicas, "2026-03-04T10:20:00+00:00")
        late = trigger(replicas[1], "hourly", {"X-Voltro-Scheduled-At": "2026-03-04T09:00:00Z"})
        logs = [s.log() for s in replicas]

    assert late.status_code == 409, late.text
    assert late.json()["code"] == "too_late"

    summary = [(r.scheduled_at, r.status, r.trigger) for r in rows]
    if policy == "off":
        assert rows == []
        assert totals == [0.0, 0.0]
        assert retry.status_code == 202, retry.text  # nothing claimed 10:00: it runs now
        assert not any("never arrived" in log for log in logs)
        return
    expected = [
        (nine, RunStatus.MISSED, Trigger.EXTERNAL),
        (ten, RunStatus.MISSED, Trigger.EXTERNAL),
    ]
    if policy == "record-and-run":
        expected = [
            (nine, RunStatus.SUCCEEDED, Trigger.EXTERNAL),
            (nine, RunStatus.MISSED, Trigger.EXTERNAL),
            (ten, RunStatus.SUCCEEDED, Trigger.EXTERNAL),
            (ten, RunStatus.MISSED, Trigger.EXTERNAL),
        ]
        assert len(markers(marker_dir, "hourly", "20260304T090000")) == 1
        assert len(markers(marker_dir, "hourly", "20260304T100000")) == 1
    else:
        assert list(marker_dir.glob("hourly__*")) == []
    assert summary == expected
    assert sum(totals) == 2.0  # counted once, by whichever replica recorded it
    assert retry.status_code == 200, retry.text
    assert retry.json()["status"] == "duplicate"
    first_of_ten = next(r for r in rows if r.scheduled_at == ten)
    assert retry.json()["runId"] == first_of_ten.id
    assert any("schedule: external trigger never arrived — recorded missed" in log for log in logs)
