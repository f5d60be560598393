"""``GET /metrics`` over real HTTP (uvicorn on 127.0.0.1): after a known sequence of runs the
scrape, parsed with prometheus_client's own parser, matches the ledger row for row; a failed
run's traceback is served by the run routes; the example app's HTTP series share the scrape."""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import run_async
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample
from support.cluster import fetch_runs
from support.servers import uvicorn_server
from support.waiting import wait_for

from fastapi_voltro_schedules import RunStatus, Trigger
from fastapi_voltro_schedules.migrations import upgrade_to_head
from fastapi_voltro_schedules.store import RunRecord, create_store, new_run_id

TRIGGER_TOKEN = "trigger-token-for-metrics-test"
INSPECT_TOKEN = "inspect-token-for-metrics-test"


def ledger(url: str) -> list[RunRecord]:
    return [r for r in fetch_runs(url) if r.replica_id != "old"]


def seed_late(url: str) -> None:
    """An old run of ``late``: boot records the slots since then ``missed``."""

    async def write() -> None:
        await upgrade_to_head(url)
        store = create_store(url)
        at = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=200)
        try:
            await store.insert_run(
                RunRecord(
                    id=new_run_id(),
                    name="late",
                    scheduled_at=at,
                    status=RunStatus.SUCCEEDED,
                    trigger=Trigger.SELF,
                    fired_at=at,
                    finished_at=at,
                    replica_id="old",
                )
            )
        finally:
            await store.dispose()

    run_async(write())


def samples(text: str, family_name: str) -> list[Sample]:
    return [
        s
        for family in text_string_to_metric_families(text)
        if family.name == family_name
        for s in family.samples
    ]


def families(text: str) -> set[str]:
    return {family.name for family in text_string_to_metric_families(text)}


def wait_for_sequence(url: str) -> list[RunRecord]:
    want = {("ok", 3), ("boom", 2), ("slow", 2)}

    def complete() -> list[RunRecord]:
        rows = ledger(url)
        done = Counter(r.name for r in rows if r.status.terminal and r.trigger is Trigger.SELF)
        missed = sum(r.status is RunStatus.MISSED for r in rows)
        return rows if all(done[name] >= n for name, n in want) and missed else []

    return wait_for(complete, interval=0.2, what="the sequence to complete")


def test_metrics_scraped_over_http_match_the_ledger(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path}/voltro.db"
    seed_late(url)
    env = {
        "VOLTRO_DATABASE_URL": url,
        "VOLTRO_REPLICA_ID": "scraped",
        "VOLTRO_SCHEDULE_TRIGGER_TOKEN": TRIGGER_TOKEN,
        "VOLTRO_INSPECT_TOKEN": INSPECT_TOKEN,
    }
    with uvicorn_server("apps.metrics_app:app", tmp_path, env, name="metrics") as server:
        wait_for_sequence(url)
        inspect = {"Authorization": f"Bearer {INSPECT_TOKEN}"}
        fired = httpx.post(f"{server.url}/_voltro/inspect/schedules/ok/fire", headers=inspect)
        assert fired.status_code == 202, fired.text
        manual_id = fired.json()["runId"]
        wait_for(
            lambda: any(r.id == manual_id and r.status.terminal for r in ledger(url)),
            what="the manual run to finish",
        )

        before = time.time()
        scrape = httpx.get(f"{server.url}/metrics")  # no token
        after = time.time()
        rows = ledger(url)
        boom_id = next(r.id for r in rows if r.name == "boom")
        run_view = httpx.get(
            f"{server.url}/_voltro/schedules/runs/{boom_id}",
            headers={"Authorization": f"Bearer {TRIGGER_TOKEN}"},
        )
        listing = httpx.get(
            f"{server.url}/_voltro/inspect/schedules/runs", params={"name": "boom"}, headers=inspect
        )
        log = server.log()

    assert scrape.status_code == 200
    assert scrape.headers["content-type"].startswith("text/plain")
    text = scrape.text

    # every recorded outcome, by name/status/trigger: exactly the ledger's terminal rows
    ledger_counts = Counter(
        (r.name, r.status.value, r.trigger.value) for r in rows if r.status.terminal
    )
    scraped = {
        (s.labels["name"], s.labels["status"], s.labels["trigger"]): s.value
        for s in samples(text, "voltro_schedule_runs")
        if s.name == "voltro_schedule_runs_total"
    }
    assert scraped == ledger_counts
    assert ledger_counts[("ok", "succeeded", "self")] == 3
    assert ledger_counts[("ok", "succeeded", "manual")] == 1
    assert ledger_counts[("boom", "failed", "self")] == 2
    assert ledger_counts[("slow", "succeeded", "self")] == 1
    assert ledger_counts[("slow", "skipped", "self")] == 1
    assert ledger_counts[("late", "missed", "self")] >= 1

    ran = [r for r in rows if r.status in (RunStatus.SUCCEEDED, RunStatus.FAILED)]
    durations = {
        s.labels["name"]: s.value
        for s in samples(text, "voltro_schedule_run_duration_seconds")
        if s.name.endswith("_count")
    }
    assert durations == Counter(r.name for r in ran)
    lags = {
        s.labels["name"]: s.value
        for s in samples(text, "voltro_schedule_lag_seconds")
        if s.name.endswith("_count")
    }
    assert Counter(lags) == Counter(r.name for r in ran if r.trigger is Trigger.SELF)
    lag_sums = {
        s.labels["name"]: s.value
        for s in samples(text, "voltro_schedule_lag_seconds")
        if s.name.endswith("_sum")
    }
    # Each run's lag is its row's fired_at - scheduled_at. How small that is on time is a
    # latency question for the benchmarks (bench/), not a verdict for a busy test machine.
    row_lags = Counter[str]()
    for r in ran:
        if r.trigger is Trigger.SELF and r.fired_at is not None:
            row_lags[r.name] += max(0.0, (r.fired_at - r.scheduled_at).total_seconds())
    assert set(lag_sums) == set(lags), lag_sums
    assert all(lag_sums[n] == pytest.approx(row_lags[n], abs=1e-3) for n in lags), (
        lag_sums,
        row_lags,
    )
    slow_durations = [
        s.value
        for s in samples(text, "voltro_schedule_run_duration_seconds")
        if s.name.endswith("_sum") and s.labels["name"] == "slow"
    ]
    assert slow_durations and slow_durations[0] >= 1.5  # it slept 1.6 s

    last_success = {
        s.labels["name"]: s.value
        for s in samples(text, "voltro_schedule_last_success_timestamp_seconds")
    }
    newest = {
        name: max(r.finished_at.timestamp() for r in ran if r.name == name and r.finished_at)
        for name in ("ok", "slow")
    }
    assert set(last_success) == {"ok", "slow"}
    assert all(abs(last_success[n] - newest[n]) < 1e-3 for n in newest), (last_success, newest)

    running = {s.labels["name"]: s.value for s in samples(text, "voltro_schedule_running")}
    assert running and set(running.values()) == {0.0}

    next_fire = {
        s.labels["name"]: s.value
        for s in samples(text, "voltro_schedule_next_fire_timestamp_seconds")
    }
    assert set(next_fire) == {"ok", "boom", "slow", "late"}
    # each fires at least once a minute: its next firing is within a minute of the scrape
    assert all(before < at <= after + 60 for at in next_fire.values()), (before, next_fire)

    assert samples(text, "voltro_schedule_store_errors") == []  # declared, nothing failed
    assert "voltro_schedule_external_missed" in families(text)

    # the failed run's traceback, on both run routes
    assert run_view.status_code == 200, run_view.text
    trace = run_view.json()["traceback"]
    assert "in kaboom" in trace and trace.rstrip().endswith("ValueError: the handler's own defect")
    assert run_view.json()["error"] == "the handler's own defect"
    listed = listing.json()["runs"]
    assert len(listed) == 2 and all("in kaboom" in r["traceback"] for r in listed)
    # …and in the log, with the traceback (a plain uvicorn run: the fallback handler prints)
    assert "schedule: run failed  name=boom" in log
    assert 'in kaboom\n    raise ValueError("the handler\'s own defect")' in log


def test_the_example_app_serves_http_and_scheduler_series_on_one_scrape(tmp_path: Path) -> None:
    env = {"VOLTRO_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path}/voltro.db"}
    with uvicorn_server("example_app.main:app", tmp_path, env, name="example") as server:
        assert httpx.get(f"{server.url}/billing/health").status_code == 200
        text = httpx.get(f"{server.url}/metrics").text
    names = families(text)
    # prometheus-fastapi-instrumentator's HTTP series…
    requests = [
        s
        for s in samples(text, "http_requests")
        if s.name == "http_requests_total" and s.labels.get("handler") == "/billing/health"
    ]
    assert requests and requests[0].value >= 1
    # …beside ours, from the same registry
    assert {
        "voltro_schedule_runs",
        "voltro_schedule_run_duration_seconds",
        "voltro_schedule_lag_seconds",
        "voltro_schedule_next_fire_timestamp_seconds",
        "voltro_schedule_store_errors",
    } <= names
    next_fire = {
        s.labels["name"] for s in samples(text, "voltro_schedule_next_fire_timestamp_seconds")
    }
    assert next_fire  # the example's schedules are armed and reported


def _paths(routes: list[Any]) -> list[str]:
    """Every route path, included routers walked (FastAPI keeps them nested)."""
    found: list[str] = []
    for route in routes:
        inner = getattr(route, "original_router", None)
        if inner is not None:
            found += _paths(inner.routes)
        elif getattr(route, "path", None) is not None:
            found.append(route.path)
    return found


def test_the_example_app_has_one_metrics_route() -> None:
    from example_app.main import app

    paths = _paths(app.routes)
    assert "/billing/health" in paths  # the walk sees included routers
    assert paths.count("/metrics") == 1
