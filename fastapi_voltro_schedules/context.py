"""What a handler receives: ``ScheduleContext``, and the workflow starter it may call."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from .enums import Trigger
from .values import value

if TYPE_CHECKING:
    from fastapi import FastAPI


class ScheduleInfo(Protocol):
    """What a handler can read of the schedule it runs for (a
    :class:`~fastapi_voltro_schedules.Schedule` is one). A protocol rather than the class, so
    this module — which the definition builds on — never imports it back."""

    @property
    def name(self) -> str: ...
    @property
    def cron(self) -> str: ...
    @property
    def timezone(self) -> str: ...
    @property
    def description(self) -> str | None: ...
    @property
    def max_runtime_ms(self) -> int: ...

    def next_occurrence(self, after: datetime) -> datetime: ...
    def previous_occurrence(self, at: datetime) -> datetime | None: ...


@runtime_checkable
class WorkflowStarter(Protocol):
    """Anything that can start a durable workflow by name (``Scheduling(workflows=...)``)."""

    async def start(self, name: str, payload: dict[str, Any]) -> str:
        """Start workflow ``name`` with ``payload``; return its id."""
        ...


@dataclass(frozen=True, slots=True)
class FiringRef:
    """The firing a :class:`FiringStarter` starts a job for: what the job's identity is derived
    from (the schedule's ``name`` and the slot), and how the job is put on the run's row."""

    name: str
    scheduled_at: datetime
    run_id: str
    trigger: Trigger
    attempt: int
    replica_id: str
    """This replica: the run's row is its ``running`` row."""
    job_id: str | None
    """The job this attempt's row already names — a replica took the row over after the one
    that handed it off stopped: that job is followed, not a new one — else ``None``."""
    record_job: Callable[[str, str], Awaitable[None]] = field(repr=False)
    """``await record_job(job_id, tracking)`` writes the job onto the run's row (a conditional
    write: it raises when the row is no longer this replica's ``running`` row)."""


@runtime_checkable
class FiringStarter(Protocol):
    """A :class:`WorkflowStarter` that knows which firing it starts for (the hand-off starters,
    :mod:`fastapi_voltro_schedules.handoff`): the runner gives each firing's context
    ``workflows=starter.for_firing(firing)``, whose ``start`` derives the job's identity from
    the slot and records the job on the run's row."""

    async def start(self, name: str, payload: dict[str, Any]) -> str: ...

    def for_firing(self, firing: FiringRef) -> WorkflowStarter: ...


@value
class ScheduleContext:
    """Firing metadata handed to a schedule's handler.

    Use ``scheduled_at`` — not ``datetime.now()`` — for time-bucketed work: it is derived from
    the cron expression, identical on every replica, and stays the slot's instant when the run
    is late (or replayed by a backfill). For a Run now click it is the instant of the click.
    """

    scheduled_at: datetime
    """The slot this firing is for (aware, UTC)."""
    fired_at: datetime
    """When the handler actually started (aware, UTC)."""
    run_id: str
    """The ``_voltro_schedule_runs`` row of this firing (``sr_…``)."""
    trigger: Trigger
    """``"self"``, ``"external"`` or ``"manual"`` (a ``str`` enum equal to those strings)."""
    deadline: datetime
    """When the watchdog (``max_runtime_ms``) gives up on this run; long handlers can check it."""
    schedule: ScheduleInfo
    """The schedule being fired (the :class:`~fastapi_voltro_schedules.Schedule` itself)."""
    app: FastAPI | None = None
    """The FastAPI application the scheduler runs in (``None`` outside an app)."""
    workflows: WorkflowStarter | None = None
    """The starter given to ``Scheduling(workflows=...)``, also on ``app.state.workflows``."""
    args: dict[str, Any] = field(default_factory=dict, hash=False)
    """A run-time schedule's JSON arguments (``Scheduling.put_schedule(..., args=...)``), a
    fresh copy per firing; ``{}`` for a declared schedule."""
    attempt: int = 1
    """Which attempt of the slot this is: 1, then 2, 3… when a ``RetryPolicy`` retries a
    failed run within its slot (the same ``run_id`` and ``scheduled_at`` each time)."""

    @property
    def name(self) -> str:
        """The schedule's name."""
        return self.schedule.name
