"""A test app for multi-replica tests: ``uvicorn apps.cluster_app:app`` (``tests/`` on the path).

Everything comes from the environment, so several uvicorn processes can run the same module as
distinct replicas of one deployment:

- ``VOLTRO_*``                    the scheduler's own config (``SchedulingConfig()``):
  ``VOLTRO_DATABASE_URL``, ``VOLTRO_REPLICA_ID``, ``VOLTRO_SCHEDULE_HEARTBEAT_MS``, …
- ``CLUSTER_SCHEDULES``           comma-separated subset of ``tick,slow`` (default ``tick``).
- ``CLUSTER_TICK_CRON``           default ``* * * * * *`` (every second); a no-op handler.
- ``CLUSTER_TICK_OVERLAP``        default ``parallel`` (a no-op never overlaps itself; parallel
  keeps a corpse ``tick`` row from suppressing the next slot in crash tests).
- ``CLUSTER_SLOW_CRON``           default ``*/2 * * * * *``.
- ``CLUSTER_SLOW_SLEEP_S``        default ``8``: how long one ``slow`` execution sleeps.
- ``CLUSTER_SLOW_OVERLAP``        default ``skip``.
- ``CLUSTER_LINE_CRON``           default ``* * * * * *``: ``line`` (``on_overlap="queue"``).
- ``CLUSTER_LINE_SECONDS``        default ``1.5-2.5``: a ``line`` run sleeps a uniform draw.
- ``CLUSTER_LINE_LOG``            when set, each ``line`` run appends one JSON line as it ends:
  ``{"slot", "start", "end", "replica", "runId", "trigger"}`` — its own wall-clock span.
- ``ext``                         (in ``CLUSTER_SCHEDULES``) ``trigger="external"``, cron
  ``CLUSTER_EXT_CRON`` (default ``* * * * *``): driven by POSTs to its trigger route.
- ``CLUSTER_TICKS``               when set to N, N more every-second no-op schedules
  ``tick0`` … ``tick<N-1>`` (``CLUSTER_TICKS_BACKFILL``, default ``all``, is their backfill).
- ``CLUSTER_LIFE``                when set, the life-cycle schedules: ``life-<backfill>-<overlap>``
  for each backfill ``all``/``latest``/``skip`` × overlap ``skip``/``queue``/``parallel``, cron
  ``*/2 * * * * *``; a run sleeps a uniform draw of ``CLUSTER_LIFE_SECONDS`` (default
  ``0.2-1.2``), a ``queue`` one of ``CLUSTER_LIFE_QUEUE_SECONDS`` (default ``1.0-2.6``: waiters
  line up now and then). ``CLUSTER_LIFE_EDIT`` names one whose cron is ``*/3 * * * * *`` instead
  (a deploy that edits it).
- ``CLUSTER_CLOCK_LAG_MS``        when set, this replica's wall clock runs that far behind (kept
  under the database clock's tolerance, a quarter heartbeat, so it is used as it is): it fires
  each slot that late and the other replicas win every claim race — for a test that needs one
  replica, and only that one, to hold the line.
- ``CLUSTER_HALT_FLAG``           when set, a path: once a file appears there, this replica's
  next lease beat stops *inside its transaction* (after its statements, before the commit) with
  a blocking wait — the whole process halts with its lease rows locked, as a SIGSTOP or a VM
  pause at that moment would leave them — and writes ``<flag>.frozen`` (the instant, epoch
  seconds). It stays halted until the test deletes the flag: the halt lasts until the test has
  seen what the other replicas did meanwhile, not a fixed time a slow machine could outrun.
- ``CLUSTER_MARKER_DIR``          when set, every handler execution creates one empty file there,
  ``<name>__<scheduled_at YYYYmmddTHHMMSS>__<replica_id>__<run_id>``, *before* doing its work —
  so executions are counted independently of the ledger, even for a run killed mid-way.

Two handlers for run-time schedules (``PUT /_voltro/inspect/schedules/{name}``):
``markArgs`` and ``markArgsToo`` each write the marker above with, as its contents,
``{"handler": <its name>, "args": ctx.args}`` — so a test sees which version ran a slot — then
sleep ``args["sleep"]`` seconds, if given (a run a test can kill mid-way).
"""

from __future__ import annotations

import json
import os
import random
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
from fastapi import FastAPI
from support.clocks import SteppedClock

from fastapi_voltro_schedules import (
    Schedule,
    ScheduleContext,
    Scheduling,
    SchedulingConfig,
    define_handler,
    define_schedule,
    schedules_router,
)

config = SchedulingConfig()
_MARKERS = os.environ.get("CLUSTER_MARKER_DIR")


def _mark(ctx: ScheduleContext, contents: str = "") -> None:
    if not _MARKERS:
        return
    slot = ctx.scheduled_at.strftime("%Y%m%dT%H%M%S")
    name = f"{ctx.name}__{slot}__{config.replica_id}__{ctx.run_id}"
    # O_EXCL: a second execution of one run id would fail loudly rather than overwrite.
    fd = os.open(Path(_MARKERS) / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        if contents:
            os.write(fd, contents.encode())
    finally:
        os.close(fd)


def _args_marker(handler: str) -> Any:
    async def mark(ctx: ScheduleContext) -> None:
        _mark(ctx, json.dumps({"handler": handler, "args": dict(ctx.args)}, sort_keys=True))
        await anyio.sleep(float(ctx.args.get("sleep", 0)))

    return define_handler(name=handler)(mark)


RUNTIME_HANDLERS = [_args_marker("markArgs"), _args_marker("markArgsToo")]


async def tick(ctx: ScheduleContext) -> None:
    _mark(ctx)


async def slow(ctx: ScheduleContext) -> None:
    _mark(ctx)
    await anyio.sleep(float(os.environ.get("CLUSTER_SLOW_SLEEP_S", "8")))


async def line(ctx: ScheduleContext) -> None:
    _mark(ctx)
    start = time.time()
    low, _, high = os.environ.get("CLUSTER_LINE_SECONDS", "1.5-2.5").partition("-")
    await anyio.sleep(random.uniform(float(low), float(high or low)))
    log = os.environ.get("CLUSTER_LINE_LOG")
    if log:
        entry = {
            "slot": ctx.scheduled_at.isoformat(),
            "start": start,
            "end": time.time(),
            "replica": config.replica_id,
            "runId": ctx.run_id,
            "trigger": str(ctx.trigger),
        }
        # One short O_APPEND write per run: lines from several processes never interleave.
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (json.dumps(entry) + "\n").encode())
        finally:
            os.close(fd)


LIFE_BACKFILLS = ("all", "latest", "skip")
LIFE_OVERLAPS = ("skip", "queue", "parallel")
LIFE_CRON, LIFE_EDITED_CRON = "*/2 * * * * *", "*/3 * * * * *"


def _life(overlap: str) -> Any:
    span = os.environ.get(
        "CLUSTER_LIFE_QUEUE_SECONDS" if overlap == "queue" else "CLUSTER_LIFE_SECONDS",
        "1.0-2.6" if overlap == "queue" else "0.2-1.2",
    )
    low, _, high = span.partition("-")

    async def life(ctx: ScheduleContext) -> None:
        _mark(ctx)
        await anyio.sleep(random.uniform(float(low), float(high or low)))

    return life


def _life_schedules() -> list[Schedule]:
    edited = os.environ.get("CLUSTER_LIFE_EDIT", "")
    return [
        define_schedule(
            name=(name := f"life-{backfill}-{overlap}"),
            cron=LIFE_EDITED_CRON if name == edited else LIFE_CRON,
            timezone="UTC",
            handler=_life(overlap),
            on_overlap=overlap,
            backfill=backfill,
        )
        for backfill in LIFE_BACKFILLS
        for overlap in LIFE_OVERLAPS
    ]


def _schedules() -> list[Schedule]:
    wanted = {s.strip() for s in os.environ.get("CLUSTER_SCHEDULES", "tick").split(",")}
    out: list[Schedule] = []
    if "tick" in wanted:
        out.append(
            define_schedule(
                name="tick",
                cron=os.environ.get("CLUSTER_TICK_CRON", "* * * * * *"),
                timezone="UTC",
                handler=tick,
                on_overlap=os.environ.get("CLUSTER_TICK_OVERLAP", "parallel"),
            )
        )
    if "slow" in wanted:
        out.append(
            define_schedule(
                name="slow",
                cron=os.environ.get("CLUSTER_SLOW_CRON", "*/2 * * * * *"),
                timezone="UTC",
                handler=slow,
                on_overlap=os.environ.get("CLUSTER_SLOW_OVERLAP", "skip"),
            )
        )
    if "line" in wanted:
        out.append(
            define_schedule(
                name="line",
                cron=os.environ.get("CLUSTER_LINE_CRON", "* * * * * *"),
                timezone="UTC",
                handler=line,
                on_overlap="queue",
            )
        )
    if "ext" in wanted:
        out.append(
            define_schedule(
                name="ext",
                cron=os.environ.get("CLUSTER_EXT_CRON", "* * * * *"),
                timezone="UTC",
                handler=tick,
                trigger="external",
            )
        )
    if os.environ.get("CLUSTER_LIFE"):
        out += _life_schedules()
    for i in range(int(os.environ.get("CLUSTER_TICKS", "0"))):
        out.append(
            define_schedule(
                name=f"tick{i}",
                cron="* * * * * *",
                timezone="UTC",
                handler=tick,
                on_overlap="parallel",
                backfill=os.environ.get("CLUSTER_TICKS_BACKFILL", "all"),
            )
        )
    return out


def _halt_inside_beats(flag: Path) -> None:
    from fastapi_voltro_schedules.store.sql import SQLStore

    attempt = SQLStore._attempt

    async def halting(self: SQLStore, op: str, work: Any, **kw: Any) -> Any:
        if op != "cluster_leases" or not flag.exists():  # noqa: ASYNC240 - a stat, test-only
            return await attempt(self, op, work, **kw)

        async def then_halt(conn: Any) -> Any:
            out = await work(conn)  # the transaction stays open: its rows stay locked
            Path(f"{flag}.frozen").write_text(str(time.time()))  # noqa: ASYNC240
            while flag.exists():  # noqa: ASYNC240 - the halt blocks the whole process
                time.sleep(0.01)  # noqa: ASYNC251
            return out

        return await attempt(self, op, then_halt, **kw)

    SQLStore._attempt = halting  # type: ignore[method-assign]


if os.environ.get("CLUSTER_HALT_FLAG"):
    _halt_inside_beats(Path(os.environ["CLUSTER_HALT_FLAG"]))

_lag_ms = os.environ.get("CLUSTER_CLOCK_LAG_MS")
scheduling = Scheduling(
    _schedules(),
    config=config,
    clock=SteppedClock(-timedelta(milliseconds=float(_lag_ms))) if _lag_ms else None,
    handlers=RUNTIME_HANDLERS,
)
app = FastAPI(title="voltro cluster test app", lifespan=scheduling.lifespan)
app.include_router(schedules_router)  # inspect routes (pause/resume) when a token is set


@app.get("/_cluster/replica")
def replica() -> dict[str, str]:
    return {"replicaId": config.replica_id}
