"""One OpenTelemetry span per run (SPEC §7; issue 33): ``voltro.schedule.run`` with the
schedule, slot, trigger, status and run id; the handler runs with it current (its own spans
are children, its log lines carry the trace); a run fired from a traced request (the trigger
route, Run now) is linked to the request's span; nothing at all when the app configured no
tracer provider. Spans are read with the SDK's in-memory exporter.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from fastapi import FastAPI, Request
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from support.running import runs_of
from support.waiting import wait_until

from fastapi_voltro_schedules import (
    RetryPolicy,
    RunStatus,
    ScheduleContext,
    Scheduling,
    SchedulingConfig,
    define_schedule,
    schedules_router,
)
from fastapi_voltro_schedules.store import RunRecord
from fastapi_voltro_schedules.testing import ManualClock, run_retries
from fastapi_voltro_schedules.tracing import SPAN_NAME, run_spans

T0 = datetime(2026, 6, 1, 11, 59, 30, tzinfo=UTC)
TRIGGER = "trigger-token-for-the-tracing-tests"
OPERATOR = "operator-token-for-the-tracing-tests"


@pytest.fixture
def exported(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """An SDK tracer provider, as an app configures one, for this test only (the API lets a
    process set its provider once: the test swaps the global back afterwards)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", provider)
    yield exporter
    provider.shutdown()


def runs_spans(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == SPAN_NAME]


seen: dict[str, trace.SpanContext] = {}


async def works(ctx: ScheduleContext) -> None:
    # what a logging integration reads to stamp a line: the current span
    seen[ctx.run_id] = trace.get_current_span().get_span_context()
    with trace.get_tracer("the-app").start_as_current_span("the handler's own work"):
        pass


async def fails(ctx: ScheduleContext) -> None:
    seen[ctx.run_id] = trace.get_current_span().get_span_context()
    raise RuntimeError("the export server said no")


def booted(url: str, clock: ManualClock) -> tuple[Scheduling, FastAPI]:
    schedules = [
        define_schedule(name="export", cron="* * * * *", timezone="UTC", handler=works),
        define_schedule(name="broken", cron="* * * * *", timezone="UTC", handler=fails),
        define_schedule(
            name="ext", cron="* * * * *", timezone="UTC", trigger="external", handler=works
        ),
    ]
    config = SchedulingConfig(
        database_url=url,
        replica_id="solo",
        schedule_trigger_token=TRIGGER,
        inspect_token=OPERATOR,
    )
    app = FastAPI()

    @app.middleware("http")
    async def request_span(request: Request, call_next):  # type: ignore[no-untyped-def]
        # what opentelemetry-instrumentation-fastapi does: each request in a server span
        tracer = trace.get_tracer("the-app")
        with tracer.start_as_current_span(f"{request.method} {request.url.path}"):
            return await call_next(request)

    app.include_router(schedules_router)
    return Scheduling(schedules, config=config, clock=clock), app


async def settled(scheduling: Scheduling, name: str, count: int) -> list[RunRecord]:
    async def done() -> list[RunRecord] | None:
        rows = await runs_of(scheduling, name)
        return rows if len(rows) == count and all(r.status.terminal for r in rows) else None

    found: list[RunRecord] = await wait_until(done, what=f"{count} recorded runs of {name}")
    return found


async def test_each_run_is_one_span_with_its_slot_trigger_status_and_run_id(
    sqlite_url: str, exported: InMemorySpanExporter
) -> None:
    clock = ManualClock(T0)
    scheduling, app = booted(sqlite_url, clock)
    async with scheduling.run(app):
        await clock.advance(30)  # 12:00: both clock schedules fire, one herd
        (ok,) = await settled(scheduling, "export", 1)
        (bad,) = await settled(scheduling, "broken", 1)
    assert (ok.status, bad.status) == (RunStatus.SUCCEEDED, RunStatus.FAILED)
    by_run = {s.attributes["voltro.schedule.run_id"]: s for s in runs_spans(exported)}  # type: ignore[index]
    assert set(by_run) == {ok.id, bad.id}
    for row in (ok, bad):
        span = by_run[row.id]
        assert span.attributes is not None
        assert dict(span.attributes) | {"voltro.schedule.error_tag": None} == {
            "voltro.schedule.name": row.name,
            "voltro.schedule.scheduled_at": row.scheduled_at.isoformat(),
            "voltro.schedule.trigger": "self",
            "voltro.schedule.status": row.status.value,
            "voltro.schedule.run_id": row.id,
            "voltro.schedule.attempt": 1,
            "voltro.schedule.error_tag": None,
        }
        assert span.parent is None and not span.links  # the timer fired: a root, no link
        # the handler ran with its run's span current: a log line would carry this trace
        assert seen[row.id] == span.get_span_context()
    failed = by_run[bad.id]
    assert failed.status.status_code is trace.StatusCode.ERROR
    assert [e.name for e in failed.events] == ["exception"]
    assert failed.events[0].attributes is not None
    assert failed.events[0].attributes["exception.message"] == "the export server said no"
    assert by_run[ok.id].status.status_code is trace.StatusCode.UNSET
    # the handler's own span is a child of the run's
    (own,) = [s for s in exported.get_finished_spans() if s.name == "the handler's own work"]
    assert own.parent is not None
    assert own.parent.span_id in {by_run[ok.id].context.span_id}


async def test_a_run_fired_from_a_request_is_linked_to_the_requests_span(
    sqlite_url: str, exported: InMemorySpanExporter
) -> None:
    """The trigger route and Run now: the run is a trace of its own, linked to the request's
    span (a run outlives the request that asked for it)."""
    clock = ManualClock(T0)
    scheduling, app = booted(sqlite_url, clock)
    slot = T0.replace(second=0)
    async with (
        scheduling.run(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as http,
    ):
        arrival = await http.post(
            "/_voltro/schedules/ext/trigger",
            headers={
                "Authorization": f"Bearer {TRIGGER}",
                "X-Voltro-Scheduled-At": slot.isoformat(),
            },
        )
        assert arrival.status_code == 202, arrival.text
        now = await http.post(
            "/_voltro/inspect/schedules/export/fire",
            headers={"Authorization": f"Bearer {OPERATOR}"},
        )
        assert now.status_code in (200, 202), now.text
        (external,) = await settled(scheduling, "ext", 1)
        (manual,) = await settled(scheduling, "export", 1)
    requests = {s.name: s for s in exported.get_finished_spans() if s.name.startswith("POST ")}
    by_run = {s.attributes["voltro.schedule.run_id"]: s for s in runs_spans(exported)}  # type: ignore[index]
    for row, path in (
        (external, "POST /_voltro/schedules/ext/trigger"),
        (manual, "POST /_voltro/inspect/schedules/export/fire"),
    ):
        span, request = by_run[row.id], requests[path]
        assert span.attributes is not None
        assert span.attributes["voltro.schedule.trigger"] == row.trigger.value
        assert span.parent is None  # its own trace…
        assert span.context.trace_id != request.context.trace_id
        # …linked to the span current in the request (the endpoint's, inside the request's
        # trace: FastAPI itself opens spans under the server's)
        (link,) = span.links
        assert link.context.trace_id == request.context.trace_id
        in_request = {
            s.context.span_id
            for s in exported.get_finished_spans()
            if s.context.trace_id == request.context.trace_id
        }
        assert link.context.span_id in in_request


async def test_no_tracer_provider_no_span(sqlite_url: str) -> None:
    """The API's default (no SDK configured): nothing is started, runs go on as before."""
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    assert run_spans() is None
    clock = ManualClock(T0)
    scheduling, app = booted(sqlite_url, clock)
    async with scheduling.run(app):
        await clock.advance(30)
        (row,) = await settled(scheduling, "export", 1)
    assert row.status is RunStatus.SUCCEEDED
    assert not seen[row.id].is_valid  # no span was current in the handler


async def test_a_herd_is_one_span_a_run_each_in_its_own_trace(
    sqlite_url: str, exported: InMemorySpanExporter
) -> None:
    clock = ManualClock(T0)
    herd = [
        define_schedule(name=f"h{i}", cron="* * * * *", timezone="UTC", handler=works)
        for i in range(40)
    ]
    config = SchedulingConfig(database_url=sqlite_url, replica_id="solo")
    scheduling = Scheduling(herd, config=config, clock=clock)
    async with scheduling.run():
        await clock.advance(30)
        for schedule in herd:
            await settled(scheduling, schedule.name, 1)
        await clock.advance(timedelta(minutes=1).total_seconds())
        for schedule in herd:
            await settled(scheduling, schedule.name, 2)
    spans = runs_spans(exported)
    assert len(spans) == 80
    assert len({s.context.trace_id for s in spans}) == 80
    assert all(
        s.attributes and s.attributes["voltro.schedule.status"] == "succeeded" for s in spans
    )


async def test_each_attempt_of_a_retried_slot_is_a_span_of_the_same_run_with_its_attempt(
    exported: InMemorySpanExporter,
) -> None:
    tries: list[int] = []

    async def flaky(ctx: ScheduleContext) -> None:
        tries.append(1)
        if len(tries) < 3:
            raise RuntimeError(f"try {len(tries)} failed")

    sync = define_schedule(
        name="sync",
        cron="0 * * * *",
        timezone="UTC",
        handler=flaky,
        retry=RetryPolicy(attempts=3, backoff_ms=1000),
    )
    ran = await run_retries(sync, at=datetime(2026, 6, 1, 12, tzinfo=UTC))
    assert ran.run.status is RunStatus.SUCCEEDED and ran.run.attempt == 3
    spans = sorted(runs_spans(exported), key=lambda s: s.start_time or 0)
    assert [
        (
            s.attributes["voltro.schedule.attempt"],  # type: ignore[index]
            s.attributes["voltro.schedule.status"],  # type: ignore[index]
            s.attributes["voltro.schedule.run_id"],  # type: ignore[index]
        )
        for s in spans
    ] == [(1, "failed", ran.run.id), (2, "failed", ran.run.id), (3, "succeeded", ran.run.id)]
