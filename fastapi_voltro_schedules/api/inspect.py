"""The inspect API behind the inspect token: schedules, run history, Run now, range backfill.

The dashboard is a thin client over exactly these routes.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import TYPE_CHECKING, Annotated, Any

import anyio
from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from ..backfill import (
    HARD_CEILING,
    LOCK_SUFFIX,
    RangePlan,
    RangeSummary,
    parse_instant,
    run_range,
)
from ..clock import iso_z
from ..enums import TriggerMode
from ..errors import (
    BackfillRefusedError,
    ScheduleNotFoundError,
    VoltroError,
)
from ..store import RunRecord
from .auth import InspectAuth, scheduling_of
from .errors import VoltroRoute, error_responses
from .trigger import RunView

if TYPE_CHECKING:
    from ..scheduling import Scheduling

router = APIRouter(route_class=VoltroRoute, dependencies=[InspectAuth], tags=["voltro inspect"])

INSPECT_PREFIX = "/_voltro/inspect/schedules"


class InspectRunView(RunView):
    """One run with everything the dashboard shows."""

    trigger: str
    coordination_outcome: str
    replica_id: str
    heartbeat_at: str | None
    duration_ms: int | None

    @classmethod
    def of(cls, run: RunRecord) -> InspectRunView:
        base = RunView.of(run).model_dump()
        duration = (
            None
            if run.fired_at is None or run.finished_at is None
            else int((run.finished_at - run.fired_at).total_seconds() * 1000)
        )
        return cls(
            **base,
            trigger=run.trigger.value,
            coordination_outcome=run.coordination_outcome.value,
            replica_id=run.replica_id,
            heartbeat_at=None if run.heartbeat_at is None else iso_z(run.heartbeat_at),
            duration_ms=duration,
        )


class BackfillRequest(BaseModel):
    """``POST /_voltro/inspect/schedules/{name}/backfill``."""

    model_config = ConfigDict(populate_by_name=True, extra="forbid")

    start: str = Field(alias="from", description="ISO-8601 instant with a zone; exclusive.")
    end: str = Field(alias="to", description="ISO-8601 instant with a zone; inclusive.")
    confirm: bool = Field(default=False, description="Required above 25 occurrences.")
    limit: int | None = Field(
        default=None, ge=1, description=f"Default 1000; at most {HARD_CEILING}."
    )


def _camel(data: dict[str, Any]) -> dict[str, Any]:
    return {to_camel(k): v for k, v in data.items()}


@router.get(INSPECT_PREFIX, summary="Schedules, effective coordination, next firing")
async def list_schedules(request: Request) -> JSONResponse:
    scheduling = scheduling_of(request)
    engine = scheduling.engine
    store = scheduling.store
    names = [s.name for s in scheduling.schedules]
    last = await store.last_runs(names) if store is not None else {}
    now = scheduling.clock.now()
    items = []
    for schedule in scheduling.schedules:
        trigger = scheduling.trigger_of(schedule)
        next_firing = engine.next_firing(schedule.name) if engine is not None else None
        # External schedules arm no timer, and neither does a process that is not the firer of
        # its SQLite file: the cron still says when the slot comes.
        if next_firing is None and (trigger is TriggerMode.EXTERNAL or not scheduling.fires_here):
            next_firing = schedule.next_occurrence(now)
        previous = last.get(schedule.name)
        items.append(
            _camel(
                {
                    "name": schedule.name,
                    "cron": schedule.cron,
                    "timezone": schedule.timezone,
                    "trigger": trigger.value,
                    "on_overlap": schedule.on_overlap.value,
                    "backfill": schedule.backfill.value,
                    "max_runtime_ms": schedule.max_runtime_ms,
                    "description": schedule.description,
                    "next_firing": None if next_firing is None else iso_z(next_firing),
                    "last_run": None
                    if previous is None
                    else InspectRunView.of(previous).model_dump(by_alias=True),
                }
            )
        )
    return JSONResponse(
        {
            "coordination": scheduling.effective_coordination.value,
            "replicaId": scheduling.config.replica_id,
            "firesHere": scheduling.fires_here,
            "now": iso_z(now),
            "schedules": items,
        }
    )


@router.get(f"{INSPECT_PREFIX}/runs", summary="Firing history")
async def list_runs(
    request: Request,
    name: Annotated[str | None, Query(description="One schedule; all when omitted.")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    before: Annotated[str | None, Query(description="Page: scheduledAt of the last row.")] = None,
) -> JSONResponse:
    scheduling = scheduling_of(request)
    if name is not None and scheduling.get(name) is None:
        raise ScheduleNotFoundError(name)
    cursor = None if before is None else parse_instant(before, "before")
    assert scheduling.store is not None
    runs = await scheduling.store.list_runs(name, limit=limit, before=cursor)
    return JSONResponse({"runs": [InspectRunView.of(r).model_dump(by_alias=True) for r in runs]})


@router.post(
    f"{INSPECT_PREFIX}/{{name}}/fire",
    status_code=202,
    summary="Run now (always runs, trigger=manual)",
    responses=error_responses(ScheduleNotFoundError),
)
async def fire(name: str, request: Request) -> JSONResponse:
    run = await scheduling_of(request).fire_now(name)
    return JSONResponse(
        {"status": "accepted", "runId": run.id, "scheduledAt": iso_z(run.scheduled_at)},
        status_code=202,
    )


@router.post(
    f"{INSPECT_PREFIX}/{{name}}/backfill",
    summary="Range backfill: every occurrence in (from, to], in order, as manual runs",
    description="Refusals answer 409 with the count and the reason and fire nothing. Accepted "
    "ranges stream NDJSON: one `progress` line per slot, then a `summary` line.",
)
async def backfill(name: str, body: BackfillRequest, request: Request) -> StreamingResponse:
    scheduling = scheduling_of(request)
    plan = await scheduling.plan_backfill(
        name, body.start, body.end, confirm=body.confirm, limit=body.limit
    )
    engine = scheduling.running_engine()
    schedule = scheduling.schedule(name)
    await _refuse_if_running(scheduling, plan)
    send, receive = anyio.create_memory_object_stream[dict[str, Any]](max_buffer_size=16)

    async def produce() -> None:
        async with send:

            async def progress(summary: RangeSummary) -> None:
                await send.send({"event": "progress", **_summary(summary)})

            try:
                summary = await run_range(
                    engine,
                    schedule,
                    plan,
                    heartbeat_ms=scheduling.config.schedule_heartbeat_ms,
                    progress=progress,
                )
            except VoltroError as error:  # e.g. refused: another range started meanwhile
                event: dict[str, Any] = {"event": "error", "detail": str(error)}
                if isinstance(error, BackfillRefusedError):
                    event.update(code="backfill_refused", reason=error.reason)
                await send.send(event)
                return
            await send.send({"event": "summary", **_summary(summary)})

    async def lines() -> AsyncIterator[bytes]:
        async with anyio.create_task_group() as tg:
            tg.start_soon(produce)
            async with receive:
                async for event in receive:
                    yield (json.dumps(event) + "\n").encode()

    return StreamingResponse(lines(), media_type="application/x-ndjson")


async def _refuse_if_running(scheduling: Scheduling, plan: RangePlan) -> None:
    """Answer 409 ``in-progress`` up front when a live range of this schedule holds the lock
    (a range that starts between this check and ours still ends as an ``error`` line)."""
    assert scheduling.store is not None
    holder = await scheduling.store.claim_holder(plan.schedule + LOCK_SUFFIX)
    if holder is None:
        return
    held_by, claimed_at = holder
    stale_after = timedelta(milliseconds=3 * scheduling.config.schedule_heartbeat_ms)
    if scheduling.clock.now() - claimed_at > stale_after:
        return  # its holder died; run_range takes the lock over
    raise BackfillRefusedError(
        f'refused: a range backfill of "{plan.schedule}" is already running (held by '
        f"{held_by}) — wait for it to finish; two ranges are never interleaved",
        reason="in-progress",
        count=plan.count,
        already_succeeded=plan.already_succeeded,
    )


def _summary(summary: RangeSummary) -> dict[str, Any]:
    return {
        "name": summary.schedule,
        "count": summary.count,
        "alreadySucceeded": summary.already_succeeded,
        "fired": summary.fired,
        "succeeded": summary.succeeded,
        "failed": summary.failed,
    }


__all__ = ["BackfillRequest", "InspectRunView", "router"]
