"""The records the store speaks in: run and pause rows, the outcomes and conditional writes it
is handed, run ids, and the status sets its queries filter on.

Plain values, apart from the :class:`~.store.base.Store` interface: the planner, the
coordination steps and the API build and read them, and need nothing of how a store is
implemented. They live below the store package so that pure planning reads them without
loading it (and SQLAlchemy with it); ``store`` re-exports them for its callers.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .enums import CoordinationOutcome, RunStatus, Trigger
from .values import value

LIVE_STATUSES: tuple[RunStatus, ...] = (RunStatus.QUEUED, RunStatus.RUNNING)
TERMINAL_STATUSES: tuple[RunStatus, ...] = tuple(s for s in RunStatus if s.terminal)
CLOCK_TRIGGERS: tuple[Trigger, ...] = (Trigger.SELF, Trigger.EXTERNAL)
"""The triggers that count for "last run" (manual runs do not move the schedule's clock)."""


RUN_COLUMNS: tuple[str, ...] = (
    "id",
    "name",
    "scheduled_at",
    "fired_at",
    "finished_at",
    "status",
    "trigger",
    "coordination_outcome",
    "replica_id",
    "heartbeat_at",
    "error_tag",
    "error_message",
    "error_traceback",
)
"""The columns of ``_voltro_schedule_runs``, in the table's order (:meth:`RunRecord.values`)."""

_id_lock = threading.Lock()
_id_last = [0, 0]  # [unix_ms, sequence] of the last id minted in this process


def new_run_id() -> str:
    """A run id: ``sr_`` + 32 hex digits, unique and sortable by creation time.

    Layout (uuid7-like): 48 bits of unix milliseconds, a 16-bit per-millisecond sequence (ids
    minted by one process sort in creation order even within a millisecond), then 64 random
    bits. Ids from different processes in the same millisecond are unique but unordered.
    """
    return new_run_ids(1)[0]


def new_run_ids(count: int) -> list[str]:
    """``count`` run ids at once, in creation order (the herd mints 10,000 in one go: one lock
    and one ``urandom`` call instead of one each)."""
    if count <= 0:
        return []
    stamps: list[tuple[int, int]] = []
    with _id_lock:
        now_ms = time.time_ns() // 1_000_000
        seq = 0
        if now_ms <= _id_last[0]:
            now_ms, seq = _id_last[0], _id_last[1] + 1
        for _ in range(count):
            if seq > 0xFFFF:  # 65,536 ids in one ms: borrow the next millisecond
                now_ms, seq = now_ms + 1, 0
            stamps.append((now_ms, seq))
            seq += 1
        _id_last[0], _id_last[1] = now_ms, seq - 1
    noise = os.urandom(8 * count).hex()
    return [
        f"sr_{ms & 0xFFFF_FFFF_FFFF:012x}{sq:04x}{noise[16 * i : 16 * i + 16]}"
        for i, (ms, sq) in enumerate(stamps)
    ]


@value
class RunRecord:
    """One row of ``_voltro_schedule_runs``, with its enums typed and its datetimes aware UTC."""

    id: str
    name: str
    scheduled_at: datetime
    status: RunStatus
    trigger: Trigger
    coordination_outcome: CoordinationOutcome = CoordinationOutcome.NONE
    fired_at: datetime | None = None
    finished_at: datetime | None = None
    replica_id: str = ""
    heartbeat_at: datetime | None = None
    error_tag: str | None = None
    error_message: str | None = None
    error_traceback: str | None = None
    attempt: int = 1
    """Which attempt of the slot the row is on (1 for a first run, see :mod:`.retries`). Not
    part of :data:`RUN_COLUMNS`: an insert leaves it to the server default (1)."""
    retry_at: datetime | None = None
    """While a ``running`` row waits between attempts: when the next one is due."""
    job_id: str | None = None
    """The job a hand-off gave this firing to (:mod:`.handoff`; ``None``: it ran in process).
    Not part of :data:`RUN_COLUMNS`: written once the firing runs, before the enqueue."""
    job_tracking: str | None = None
    """``followed`` (the row's final status is the job's) or ``handed-off`` (``succeeded``
    means enqueued); ``None`` with no job."""

    def to_row(self) -> dict[str, Any]:
        """The column values to insert (enums as their stored strings)."""
        return dict(zip(RUN_COLUMNS, self.values(), strict=True))

    def values(self) -> tuple[Any, ...]:
        """:meth:`to_row`'s values in :data:`RUN_COLUMNS` order: what the hot inserts send
        (a tuple per row, not a dict: the herd builds 10,000 of them)."""
        return (
            self.id,
            self.name,
            self.scheduled_at,
            self.fired_at,
            self.finished_at,
            self.status.value,
            self.trigger.value,
            self.coordination_outcome.value,
            self.replica_id,
            self.heartbeat_at,
            self.error_tag,
            self.error_message,
            self.error_traceback,
        )

    @classmethod
    def from_row(cls, row: Mapping[Any, Any]) -> RunRecord:
        """Build from a result row's mapping (``row._mapping``)."""
        return cls(
            id=row["id"],
            name=row["name"],
            scheduled_at=row["scheduled_at"],
            fired_at=row["fired_at"],
            finished_at=row["finished_at"],
            status=RunStatus(row["status"]),
            trigger=Trigger(row["trigger"]),
            coordination_outcome=CoordinationOutcome(row["coordination_outcome"] or ""),
            replica_id=row["replica_id"] or "",
            heartbeat_at=row["heartbeat_at"],
            error_tag=row["error_tag"],
            error_message=row["error_message"],
            error_traceback=row["error_traceback"],
            attempt=row["attempt"],
            retry_at=row["retry_at"],
            job_id=row["job_id"],
            job_tracking=row["job_tracking"],
        )

    @property
    def terminal(self) -> bool:
        """Whether the row will never change again."""
        return self.status.terminal


@value
class RunOutcome:
    """How one run ended: the values :meth:`Store.finish_runs` writes (``run_id`` to
    ``error_traceback``), and what the run was (``name`` onwards: not written — they label the
    metrics and the outcome hook, see :mod:`..store.instrumented`)."""

    run_id: str
    status: RunStatus
    finished_at: datetime
    error_tag: str | None = None
    error_message: str | None = None
    error_traceback: str | None = None
    name: str | None = None
    trigger: Trigger | None = None
    scheduled_at: datetime | None = None
    fired_at: datetime | None = None
    attempt: int = 1
    """Which attempt of the slot ended (the hook's ``attempts`` for a final outcome)."""
    retry_at: datetime | None = None
    """Set when the failure is not final: the slot's next attempt is due then (the row stays
    ``running``; see :mod:`.retries`). ``status`` is then ``failed``: the attempt's own."""
    roll_up: bool = False
    """A success of a ``record="failures"`` schedule's clock-driven run: the store marks the
    row :data:`ROLLED_UP_TAG` and folds the schedule's older marked rows into the hourly
    rollup (:meth:`Store.finish_runs`)."""


@dataclass(frozen=True, slots=True)
class RowWrite:
    """One conditional write of a run row: ``SET values WHERE id AND status AND replica_id AND
    heartbeat_at`` as judged — a row that moved since it was read is left alone."""

    run_id: str
    expect_status: RunStatus
    expect_replica_id: str
    expect_heartbeat_at: datetime | None
    values: dict[str, object]


ROLLED_UP_HOLDER = "~rollup"
"""``replica_id`` of a slot claim whose run was folded into a rollup (``record="failures"``):
the slot is accounted for without a row, so the sweep of claims without rows and a duplicate
external arrival leave it be (no replica is named so: replica ids are host names and uuids)."""
ROLLED_UP_TAG = "rollup"
"""``error_tag`` of a ``succeeded`` row that a newer success of its schedule folds into the
hourly rollup (``record="failures"``): the row is kept only while it is the newest."""


@dataclass(frozen=True, slots=True)
class RollupRecord:
    """One row of ``_voltro_schedule_rollups``: the successes of one schedule's slots in one
    UTC hour that no longer have a row of their own (``record="failures"``)."""

    name: str
    hour: datetime
    """The hour's first instant (UTC): the rollup counts slots in ``[hour, hour + 1h)``."""
    succeeded: int
    total_ms: int
    """Their summed run time (``finished_at - fired_at``), milliseconds."""
    max_ms: int
    """The longest of them, milliseconds."""


ALL_SCHEDULES = "*"
"""The pauses tables' row of the fleet-wide pause (every schedule at once): no schedule can be
named so (``definition.NAME_RE``)."""
RESUMES_BY_ITSELF = "until"
"""``resumed_by`` of a fleet-wide pause written with its end (``until``): its ``resumed_at``
is that instant, ahead of the pause, and the pause holds until then."""


@dataclass(frozen=True, slots=True)
class PauseRecord:
    """One row of ``_voltro_schedule_pauses``: who paused a schedule, when and why, and — once
    ``resumed_at`` is set — when it was resumed (the row is kept: it marks the paused span)."""

    name: str
    paused_at: datetime
    paused_by: str
    reason: str | None = None
    resumed_at: datetime | None = None
    resumed_by: str | None = None
    until: datetime | None = None
    """When a fleet-wide pause resumes by itself (it is written with its end: ``resumed_at``
    set ahead, ``resumed_by`` :data:`RESUMES_BY_ITSELF`); ``None`` for one that lasts until
    resumed, and for a schedule's own pause. Not a column: read from those two."""

    @property
    def active(self) -> bool:
        """Whether the schedule is paused now (a fleet-wide pause with an ``until``: see
        :meth:`in_force`, which needs the instant)."""
        return self.resumed_at is None

    def in_force(self, now: datetime) -> bool:
        """Whether the pause holds at ``now``: not resumed, or resuming by itself after it
        (``until`` is the window's last instant)."""
        if self.resumed_at is None:
            return True
        return self.until is not None and now <= self.resumed_at

    @classmethod
    def from_row(cls, row: Mapping[Any, Any]) -> PauseRecord:
        return cls(
            name=row["name"],
            paused_at=row["paused_at"],
            paused_by=row["paused_by"],
            reason=row["reason"],
            resumed_at=row["resumed_at"],
            resumed_by=row["resumed_by"],
            until=row["resumed_at"] if row["resumed_by"] == RESUMES_BY_ITSELF else None,
        )


@dataclass(frozen=True, slots=True)
class DefinitionRecord:
    """One row of ``_voltro_schedule_definitions``: a version of a schedule's definition and
    the instant it took effect."""

    name: str
    version: int
    cron: str
    timezone: str
    trigger: str
    on_overlap: str
    backfill: str
    handler: str
    args: str
    source: str
    effective_from: datetime
    recorded_by: str = ""
    deleted: bool = False
    """A tombstone: the run-time schedule was deleted at ``effective_from`` (the version's
    other columns repeat the definition it ended)."""
    max_runtime_ms: int | None = None
    """A run-time schedule's watchdog bound (``None`` for a declared one)."""
    retry_attempts: int | None = None
    """The version's retry policy (``None``: no retries; migration 0009)."""
    retry_backoff_ms: int | None = None
    retry_max_backoff_ms: int | None = None
    exclude: str | None = None
    """The days the version does not run, as canonical JSON (``None``: none; migration 0011,
    :meth:`.exclusions.Exclusions.to_json`)."""
    record: str | None = None
    """``failures`` when the version rolls its successes up (``None``: every run keeps its
    row; migration 0013)."""

    def same_definition(self, other: DefinitionRecord) -> bool:
        """Whether ``other`` defines the same slots and work (name, version, instant and
        recorder aside): the test for "this boot changed nothing"."""
        return self.defining == other.defining

    @property
    def defining(self) -> tuple[str, ...]:
        return (
            self.cron,
            self.timezone,
            self.trigger,
            self.on_overlap,
            self.backfill,
            self.handler,
            self.args,
            self.source,
            "deleted" if self.deleted else "",
            "" if self.max_runtime_ms is None else str(self.max_runtime_ms),
            # no policy reads as the versions written before retries existed: no new version
            ""
            if self.retry_attempts is None
            else f"{self.retry_attempts}/{self.retry_backoff_ms}/{self.retry_max_backoff_ms}",
            # no exclusion reads as the versions written before exclusions existed
            self.exclude or "",
            # every run recorded reads as the versions written before rollups existed
            self.record or "",
        )

    def row(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.version,
            "cron": self.cron,
            "timezone": self.timezone,
            "trigger": self.trigger,
            "on_overlap": self.on_overlap,
            "backfill": self.backfill,
            "handler": self.handler,
            "args": self.args,
            "source": self.source,
            "effective_from": self.effective_from,
            "recorded_by": self.recorded_by,
            "deleted": self.deleted or None,  # NULL unless a tombstone, like the older rows
            "max_runtime_ms": self.max_runtime_ms,
            "retry_attempts": self.retry_attempts,
            "retry_backoff_ms": self.retry_backoff_ms,
            "retry_max_backoff_ms": self.retry_max_backoff_ms,
            "exclude": self.exclude,
            "record": self.record,
        }

    @classmethod
    def from_row(cls, row: Mapping[Any, Any]) -> DefinitionRecord:
        values = {key: row[key] for key in cls.__slots__}
        values["deleted"] = bool(values["deleted"])
        return cls(**values)


__all__ = [
    "CLOCK_TRIGGERS",
    "LIVE_STATUSES",
    "ROLLED_UP_HOLDER",
    "ROLLED_UP_TAG",
    "RUN_COLUMNS",
    "TERMINAL_STATUSES",
    "DefinitionRecord",
    "PauseRecord",
    "RollupRecord",
    "RowWrite",
    "RunOutcome",
    "RunRecord",
    "new_run_id",
    "new_run_ids",
]


@dataclass(frozen=True, slots=True)
class OutcomeRecord:
    """A schedule's newest outcome (``_voltro_schedule_state``): its terminal run with the
    newest ``scheduled_at`` (then the newest id), kept current as runs finish."""

    name: str
    run_id: str
    scheduled_at: datetime
    finished_at: datetime | None
    status: RunStatus

    @classmethod
    def from_row(cls, row: Mapping[Any, Any]) -> OutcomeRecord:
        return cls(
            name=row["name"],
            run_id=row["last_run_id"],
            scheduled_at=row["last_scheduled_at"],
            finished_at=row["last_finished_at"],
            status=RunStatus(row["last_status"]),
        )


@dataclass(frozen=True, slots=True)
class Latest:
    """What a listing shows of each schedule it names (:meth:`~.store.base.Store.latest`),
    read at one instant: its newest run of any trigger (a Run now or a range backfill
    included), its newest clock-driven run, its newest outcome. A name without one is absent
    from that map."""

    newest: dict[str, RunRecord]
    last: dict[str, RunRecord]
    outcomes: dict[str, OutcomeRecord]


@dataclass(frozen=True, slots=True)
class ClaimRecord:
    """One row of ``_voltro_schedule_claims`` read back: a slot's claim, who holds it, since
    when (that replica's clock)."""

    key: str
    replica_id: str
    claimed_at: datetime
