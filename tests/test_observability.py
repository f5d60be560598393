"""Failures you can see: the failed run's log record and ledger traceback, the outcome hook,
the store-error counter under a cut database, the logger that keeps propagating, and several
schedulers in one process without duplicate series. (``/metrics`` over real HTTP:
``test_metrics_http.py``.)"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from fastapi import FastAPI
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import make_url
from support.stores import open_store
from support.tcp_proxy import CUT_LINK_WARNINGS, TcpProxy
from support.waiting import wait_until

from fastapi_voltro_schedules import (
    RecordedOutcome,
    RunStatus,
    Schedule,
    ScheduleContext,
    SchedulerMetrics,
    Scheduling,
    SchedulingConfig,
    Trigger,
    define_schedule,
    schedules_router,
)
from fastapi_voltro_schedules.errors import ConfigurationError
from fastapi_voltro_schedules.logs import ensure_visible, logger
from fastapi_voltro_schedules.migrations import upgrade_to_head
from fastapi_voltro_schedules.runner import ERROR_TRACEBACK_LIMIT, bounded_traceback
from fastapi_voltro_schedules.store import RunOutcome, RunRecord, create_store, new_run_id
from fastapi_voltro_schedules.store.instrumented import InstrumentedStore
from fastapi_voltro_schedules.testing import ManualClock

T0 = datetime(2026, 6, 1, 11, 59, 30, tzinfo=UTC)

pytestmark = CUT_LINK_WARNINGS


def value(metrics: SchedulerMetrics, series: str, **labels: str) -> float:
    assert metrics.registry is not None
    found = metrics.registry.get_sample_value(series, labels)
    return 0.0 if found is None else found


@asynccontextmanager
async def running(
    schedules: list[Schedule], url: str, clock: ManualClock, **kwargs: Any
) -> AsyncIterator[Scheduling]:
    config = SchedulingConfig(database_url=url, replica_id="replica-a", shutdown_grace_ms=0)
    scheduling = Scheduling(schedules, config=config, clock=clock, **kwargs)
    async with scheduling.run():
        yield scheduling


async def all_rows(scheduling: Scheduling) -> list[RunRecord]:
    assert scheduling.store is not None
    return await scheduling.store.list_runs(None, limit=1000)


def deep_failure() -> None:
    raise ValueError("the handler's own defect")


# ------------------------------------------------------------------ failed run: log + ledger


async def test_a_failed_run_logs_its_traceback_with_fields_and_the_ledger_keeps_it(
    sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    @define_schedule(name="boom", cron="* * * * *", timezone="UTC")
    async def boom(ctx: ScheduleContext) -> None:
        deep_failure()

    clock = ManualClock(T0)
    caplog.set_level(logging.INFO, logger="fastapi_voltro_schedules")
    async with running([boom], sqlite_url, clock) as s:
        await clock.advance(30)

        async def failed() -> bool:
            return any(r.status.terminal for r in await all_rows(s))

        await wait_until(failed)
        (row,) = await all_rows(s)

    assert row.status is RunStatus.FAILED and row.error_tag == "ValueError"
    records = [r for r in caplog.records if r.getMessage().startswith("schedule: run failed")]
    assert len(records) == 1
    record = records[0]
    assert record.exc_info is not None
    error = record.exc_info[1]
    assert isinstance(error, ValueError) and str(error) == "the handler's own defect"
    assert "deep_failure" in caplog.text  # the formatted traceback reached the log
    fields = record.__dict__
    assert fields["schedule"] == "boom"
    assert fields["run_id"] == row.id
    assert fields["slot"] == "2026-06-01T12:00:00.000Z"
    assert fields["outcome"] == "failed"
    assert fields["trigger"] == "self" and fields["error_tag"] == "ValueError"
    # The ledger keeps the traceback beside the message.
    assert row.error_message == "the handler's own defect"
    assert row.error_traceback is not None
    assert row.error_traceback.startswith("Traceback (most recent call last):")
    assert "in deep_failure" in row.error_traceback
    assert row.error_traceback.rstrip().endswith("ValueError: the handler's own defect")


def test_the_stored_traceback_is_bounded_and_keeps_the_final_exception() -> None:
    def chain(n: int) -> None:
        try:
            if n == 0:
                raise KeyError("the root cause")
            chain(n - 1)
        except Exception as exc:
            raise RuntimeError(f"wrapped at level {n}") from exc

    try:
        chain(150)
    except RuntimeError as exc:
        error = exc
    full = bounded_traceback(error, limit=10**9)
    assert len(full) > ERROR_TRACEBACK_LIMIT  # the case the bound is for
    cut = bounded_traceback(error)
    assert len(cut) == ERROR_TRACEBACK_LIMIT
    assert cut.startswith("[… ") and "characters cut" in cut.splitlines()[0]
    assert cut.endswith("RuntimeError: wrapped at level 150\n")
    assert full.endswith(cut.split("\n", 1)[1])  # what is kept is the true tail


async def test_finish_runs_stores_the_traceback_on_every_store(database_url: str) -> None:
    async with open_store(database_url) as store:
        at = datetime(2026, 6, 1, 12, tzinfo=UTC)
        run = RunRecord(
            id=new_run_id(),
            name="job",
            scheduled_at=at,
            status=RunStatus.RUNNING,
            trigger=Trigger.SELF,
            fired_at=at,
            replica_id="me",
        )
        ok = replace(run, id=new_run_id())
        await store.insert_runs([run, ok])
        trace = "Traceback (most recent call last):\n  ...\nValueError: é — " + "x" * 20_000
        await store.finish_runs(
            [
                RunOutcome(
                    run.id, RunStatus.FAILED, at, "ValueError", "boom", error_traceback=trace
                ),
                RunOutcome(ok.id, RunStatus.SUCCEEDED, at),
            ],
            "me",
        )
        failed, succeeded = await store.get_run(run.id), await store.get_run(ok.id)
    assert failed is not None and failed.error_traceback == trace
    assert succeeded is not None and succeeded.error_traceback is None


# ------------------------------------------------------------------------------ the hook


def _corpse(name: str, at: datetime) -> RunRecord:
    """A ``running`` row of a replica that died long ago: boot marks it abandoned."""
    return RunRecord(
        id=new_run_id(),
        name=name,
        scheduled_at=at,
        status=RunStatus.RUNNING,
        trigger=Trigger.SELF,
        fired_at=at,
        heartbeat_at=at,
        replica_id="dead-replica",
    )


async def _seed(url: str, rows: list[RunRecord]) -> None:
    await upgrade_to_head(url)
    store = create_store(url)
    try:
        await store.insert_runs(rows)
    finally:
        await store.dispose()


async def test_the_hook_is_called_exactly_once_per_recorded_outcome(sqlite_url: str) -> None:
    release = anyio.Event()

    @define_schedule(name="ok", cron="* * * * *", timezone="UTC")
    async def ok(ctx: ScheduleContext) -> None:
        return None

    @define_schedule(name="boom", cron="* * * * *", timezone="UTC")
    async def boom(ctx: ScheduleContext) -> None:
        deep_failure()

    @define_schedule(name="slow", cron="* * * * *", timezone="UTC", on_overlap="skip")
    async def slow(ctx: ScheduleContext) -> None:
        await release.wait()

    @define_schedule(name="late", cron="* * * * *", timezone="UTC", backfill="skip")
    async def late(ctx: ScheduleContext) -> None:
        return None

    # "late" last ran 3.5 minutes before boot, on a replica that died mid-run: boot marks that
    # corpse failed/abandoned, then records the slots since then missed (backfill="skip").
    await _seed(sqlite_url, [_corpse("late", T0 - timedelta(minutes=3, seconds=30))])

    seen: list[RecordedOutcome] = []

    async def hook(outcome: RecordedOutcome) -> None:
        seen.append(outcome)

    metrics = SchedulerMetrics(CollectorRegistry())
    clock = ManualClock(T0)
    async with running(
        [ok, boom, slow, late], sqlite_url, clock, on_outcome=hook, metrics=metrics
    ) as s:
        await clock.advance(30)  # 12:00: ok, boom, slow (holds), late
        await wait_until(lambda: _terminal_count(s, {"ok", "boom", "late"}, 1 + 3 + 1 + 1 + 1))
        print(generate_latest(metrics.registry).decode())
        print(await all_rows(s))
        assert value(metrics, "voltro_schedule_running", name="slow") == 1
        await clock.advance(60)  # 12:01: slow is still running → skipped
        await wait_until(lambda: _terminal_count(s, {"slow"}, 1))
        release.set()
        await wait_until(lambda: _terminal_count(s, {"slow"}, 2))
        # 12:01's ok, boom and late too (they run beside slow), then every hook call
        await wait_until(lambda: _terminal_count(s, {"ok", "boom", "slow", "late"}, 12))
        await wait_until(lambda: _settled(seen, s))
        rows = await all_rows(s)
        assert value(metrics, "voltro_schedule_running", name="slow") == 0

    terminal = [r for r in rows if r.status.terminal]
    # exactly once each: the same run ids, no repeats
    assert Counter(o.run_id for o in seen) == Counter(r.id for r in terminal)
    assert all(n == 1 for n in Counter(o.run_id for o in seen).values())
    by_id = {r.id: r for r in terminal}
    for outcome in seen:
        row = by_id[outcome.run_id]
        assert (outcome.name, outcome.status, outcome.trigger, outcome.scheduled_at) == (
            row.name,
            row.status,
            row.trigger,
            row.scheduled_at,
        )
        assert (outcome.error_tag, outcome.error_message) == (row.error_tag, row.error_message)
    kinds = Counter((o.name, o.status.value, o.error_tag) for o in seen)
    assert kinds == {
        ("ok", "succeeded", None): 2,
        ("late", "failed", "abandoned"): 1,
        ("boom", "failed", "ValueError"): 2,
        ("slow", "succeeded", None): 1,
        ("slow", "skipped", None): 1,
        ("late", "missed", None): 3,
        ("late", "succeeded", None): 2,
    }
    failure = next(o for o in seen if o.error_tag == "ValueError")
    assert failure.error_traceback is not None and "deep_failure" in failure.error_traceback
    # the same outcomes, counted
    for (name, status, _tag), n in Counter((o.name, o.status.value, None) for o in seen).items():
        counted = value(
            metrics, "voltro_schedule_runs_total", name=name, status=status, trigger="self"
        )
        assert counted == n, (name, status)


async def _terminal_count(s: Scheduling, names: set[str], at_least: int) -> bool:
    rows = [r for r in await all_rows(s) if r.name in names]
    return sum(r.status.terminal for r in rows) >= at_least


async def _succeeded_count(s: Scheduling, name: str, at_least: int) -> bool:
    rows = [r for r in await all_rows(s) if r.name == name]
    return sum(r.status is RunStatus.SUCCEEDED for r in rows) >= at_least


async def _settled(seen: list[RecordedOutcome], s: Scheduling) -> bool:
    rows = await all_rows(s)
    return len(seen) == sum(r.status.terminal for r in rows)


async def test_a_raising_hook_is_logged_and_the_engine_keeps_firing(
    sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[str] = []
    threads: set[str] = set()

    def hook(outcome: RecordedOutcome) -> None:  # a plain def: runs in a worker thread
        calls.append(outcome.run_id)
        threads.add(threading.current_thread().name)
        raise RuntimeError("the Slack webhook is down")

    @define_schedule(name="tick", cron="* * * * *", timezone="UTC")
    async def tick(ctx: ScheduleContext) -> None:
        return None

    def raised() -> list[logging.LogRecord]:
        return [
            r for r in caplog.records if r.getMessage().startswith("schedule: outcome hook raised")
        ]

    clock = ManualClock(T0)
    async with running([tick], sqlite_url, clock, on_outcome=hook) as s:
        await clock.advance(30)  # 12:00, then 12:01, 12:02, 12:03: each hook call raises
        for n in range(1, 5):

            async def fired(n: int = n) -> bool:
                # the hook's call is over once its failure is logged (the thread raised first)
                rows = await all_rows(s)
                done = len(calls) == n and len(raised()) == n
                return done and sum(r.status.terminal for r in rows) == n

            await wait_until(fired)
            if n < 4:
                await clock.advance(60)
        rows = await all_rows(s)
    assert [r.status for r in rows] == [RunStatus.SUCCEEDED] * 4
    assert sorted(calls) == sorted(r.id for r in rows)
    assert threading.main_thread().name not in threads
    logged = raised()
    assert len(logged) == 4
    assert logged[0].exc_info is not None and isinstance(logged[0].exc_info[1], RuntimeError)
    assert logged[0].__dict__["schedule"] == "tick" and logged[0].__dict__["outcome"] == "succeeded"


def test_a_hook_that_is_not_callable_is_refused_naming_the_argument() -> None:
    with pytest.raises(ConfigurationError, match=r"on_outcome=.*got str"):
        Scheduling([], on_outcome="notify")  # type: ignore[arg-type]


# --------------------------------------------------------------------- store errors (cut)


@pytest.mark.postgres
async def test_a_cut_database_raises_the_store_error_counter(postgres_url: str) -> None:
    await upgrade_to_head(postgres_url)
    fired: list[datetime] = []

    @define_schedule(name="tick", cron="* * * * *", timezone="UTC")
    async def tick(ctx: ScheduleContext) -> None:
        fired.append(ctx.scheduled_at)

    db = make_url(postgres_url)
    metrics = SchedulerMetrics(CollectorRegistry())
    clock = ManualClock(T0)
    with TcpProxy(db.host or "127.0.0.1", db.port or 5432) as proxy:
        url = db.set(port=proxy.port).render_as_string(hide_password=False)
        async with running([tick], url, clock, metrics=metrics) as s:
            await clock.advance(30)  # 12:00 fires through the proxy
            await wait_until(lambda: _terminal_count(s, {"tick"}, 1))
            assert _store_errors(metrics) == {}

            proxy.cut()
            await clock.advance(60)  # 12:01: the herd's first read fails → fail closed, counted
            # (the herd's own count — its overlap read comes before the claim, which commits
            # with the row: the pauses copy's background read may fail first)
            await wait_until(_async(lambda: _herd_errors(metrics) >= 1))
            await clock.advance(60)  # 12:02: again
            await wait_until(_async(lambda: _herd_errors(metrics) >= 2))

            proxy.restore()
            await clock.advance(60)  # 12:03 fires again
            # succeeded, not terminal: 12:01 and 12:02 come back as missed rows meanwhile
            await wait_until(lambda: _succeeded_count(s, "tick", 2))
            text = generate_latest(metrics.registry).decode()  # type: ignore[arg-type]
    assert fired == [T0 + timedelta(seconds=30), T0 + timedelta(seconds=210)]
    scraped = {
        s.labels["operation"]: s.value
        for family in text_string_to_metric_families(text)
        if family.name == "voltro_schedule_store_errors"
        for s in family.samples
        if s.name == "voltro_schedule_store_errors_total"
    }
    assert scraped.get("live_runs", 0) + scraped.get("claim_and_insert", 0) >= 2
    assert (
        value(
            metrics, "voltro_schedule_runs_total", name="tick", status="succeeded", trigger="self"
        )
        == 2
    )


def _store_errors(metrics: SchedulerMetrics) -> dict[str, float]:
    assert metrics.registry is not None
    return {
        s.labels["operation"]: s.value
        for family in metrics.registry.collect()
        if family.name == "voltro_schedule_store_errors"
        for s in family.samples
        if s.name.endswith("_total")
    }


def _async(check: Callable[[], bool]) -> Callable[[], Awaitable[bool]]:
    async def run() -> bool:
        return check()

    return run


# ------------------------------------------------------------------------------ the logger


def test_the_logger_propagates_so_handlers_added_later_see_every_record_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])
    monkeypatch.setattr(logger, "handlers", [])
    monkeypatch.setattr(logger, "level", logging.NOTSET)
    monkeypatch.setattr(logger, "propagate", True)

    ensure_visible()  # a plain `uvicorn app:app`: nobody configured logging
    assert logger.propagate is True
    logger.info("scheduler: first line")
    assert "scheduler: first line" in capsys.readouterr().err  # the fallback prints it

    class Collect(logging.Handler):
        def __init__(self) -> None:
            super().__init__()
            self.records: list[logging.LogRecord] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.records.append(record)

    later = Collect()
    root.addHandler(later)  # the app configures logging after boot (a JSON formatter, OTel)
    logger.warning("schedule: run failed  name=x", extra={"schedule": "x"})
    assert [r.getMessage() for r in later.records] == ["schedule: run failed  name=x"]
    assert later.records[0].__dict__["schedule"] == "x"
    assert capsys.readouterr().err == ""  # …and it is printed once, by the app's handler


# ------------------------------------------------------------- several apps, one process


async def test_several_schedulers_and_apps_in_one_process_share_the_default_series(
    tmp_path: Any,
) -> None:
    @define_schedule(name="alpha", cron="0 * * * *", timezone="UTC")
    async def alpha(ctx: ScheduleContext) -> None:
        return None

    @define_schedule(name="beta", cron="30 * * * *", timezone="UTC")
    async def beta(ctx: ScheduleContext) -> None:
        return None

    clock = ManualClock(T0)
    first = Scheduling(
        [alpha],
        config=SchedulingConfig(database_url=f"sqlite+aiosqlite:///{tmp_path}/a.db"),
        clock=clock,
    )
    second = Scheduling(
        [beta],
        config=SchedulingConfig(database_url=f"sqlite+aiosqlite:///{tmp_path}/b.db"),
        clock=clock,
    )
    apps = [FastAPI(lifespan=s.lifespan) for s in (first, second)]
    for app in apps:
        app.include_router(schedules_router)
    assert first.metrics is second.metrics  # one set of collectors per process
    async with first.run(apps[0]), second.run(apps[1]):
        text = generate_latest(REGISTRY).decode()
    next_fire = {
        s.labels["name"]: s.value
        for family in text_string_to_metric_families(text)
        if family.name == "voltro_schedule_next_fire_timestamp_seconds"
        for s in family.samples
    }
    assert next_fire["alpha"] == datetime(2026, 6, 1, 12, tzinfo=UTC).timestamp()
    assert next_fire["beta"] == datetime(2026, 6, 1, 12, 30, tzinfo=UTC).timestamp()
    # stopped schedulers are no longer reported
    after = generate_latest(REGISTRY).decode()
    assert 'voltro_schedule_next_fire_timestamp_seconds{name="alpha"}' not in after


async def test_the_running_gauge_returns_to_zero_when_grouped_runs_end_before_the_loop_turns(
    sqlite_url: str,
) -> None:
    """Concurrent single firings share one insert (group commit) and a handler that never
    suspends ends in the same step of the loop: its terminal write reaches the store before
    the insert's deferred metric observation has run. Every run must still be counted in and
    out of ``voltro_schedule_running`` — the gauge back at 0, nothing left tracked."""
    await upgrade_to_head(sqlite_url)
    metrics = SchedulerMetrics(CollectorRegistry())
    store = InstrumentedStore(create_store(sqlite_url), metrics)
    at = datetime(2026, 6, 1, 12, tzinfo=UTC)
    runs = [
        RunRecord(
            id=new_run_id(),
            name=name,
            scheduled_at=at,
            status=RunStatus.RUNNING,
            trigger=Trigger.SELF,
            fired_at=at,
            replica_id="me",
        )
        for name in ("a", "b")
    ]
    try:
        await store.insert_runs(runs)
        # no checkpoint in between: the handlers ended within the insert's own step
        await store.finish_runs(
            [
                RunOutcome(
                    r.id,
                    RunStatus.SUCCEEDED,
                    at,
                    name=r.name,
                    trigger=r.trigger,
                    scheduled_at=r.scheduled_at,
                    fired_at=r.fired_at,
                )
                for r in runs
            ],
            "me",
        )
        for _ in range(5):
            await anyio.lowlevel.checkpoint()  # let every deferred observation run
    finally:
        await store.dispose()
    assert {name: value(metrics, "voltro_schedule_running", name=name) for name in "ab"} == {
        "a": 0.0,
        "b": 0.0,
    }
    assert store._running == {}
    assert value(metrics, "voltro_schedule_lag_seconds_count", name="a") == 1.0


def _herd_errors(metrics: SchedulerMetrics) -> float:
    """Failed store calls of the herd's admission: the overlap read, then the claims with
    their rows."""
    errors = _store_errors(metrics)
    return errors.get("live_runs", 0) + errors.get("claim_and_insert", 0)
