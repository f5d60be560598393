"""The ledger tables, on the package's own ``MetaData``.

They never join the application's ``SQLModel.metadata``: a user's ``create_all`` or Alembic
autogenerate must not pick them up by accident, and ours must not pick up theirs. Users who
want them in their own Alembic import :data:`voltro_metadata` (see ``docs/migrations.md``).
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Dialect,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    TypeDecorator,
    text,
)
from sqlalchemy.dialects import mysql
from sqlalchemy.orm import registry
from sqlmodel import Field, SQLModel

RUNS_TABLE = "_voltro_schedule_runs"
CLAIMS_TABLE = "_voltro_schedule_claims"
PAUSES_TABLE = "_voltro_schedule_pauses"
PAUSE_SPANS_TABLE = "_voltro_schedule_pause_spans"
MEMBERS_TABLE = "_voltro_schedule_members"
LEASES_TABLE = "_voltro_schedule_leases"
DEFINITIONS_TABLE = "_voltro_schedule_definitions"
STATE_TABLE = "_voltro_schedule_state"
ROLLUPS_TABLE = "_voltro_schedule_rollups"
ALEMBIC_VERSION_TABLE = "_voltro_alembic_version"

voltro_metadata = MetaData()
"""The metadata holding ``_voltro_schedule_runs``, ``_voltro_schedule_claims``,
``_voltro_schedule_pauses``, ``_voltro_schedule_pause_spans``, ``_voltro_schedule_definitions``,
``_voltro_schedule_state``, ``_voltro_schedule_rollups`` and the cluster tables
``_voltro_schedule_members`` and ``_voltro_schedule_leases``."""


def bind_utc(value: datetime | None, dialect_name: str) -> Any:
    """An aware instant as the driver of ``dialect_name`` takes it (what ``UTCDateTime``
    binds): ISO-8601 UTC text on SQLite, naive UTC on MySQL/MariaDB, aware on Postgres."""
    if value is None:
        return None
    if value.tzinfo is None:
        raise ValueError(f"naive datetime {value!r}: the ledger stores aware UTC instants")
    value = value.astimezone(UTC)
    if dialect_name == "sqlite":
        return value.isoformat(timespec="microseconds")
    if dialect_name in ("mysql", "mariadb"):
        return value.replace(tzinfo=None)
    return value


class UTCDateTime(TypeDecorator[datetime]):
    """An aware UTC datetime on every dialect.

    SQLite stores ISO-8601 text (``2026-05-28T09:00:00.000123+00:00``, which sorts like time);
    MySQL/MariaDB need ``DATETIME(6)`` or they drop the microseconds; Postgres has
    ``timestamptz``. Naive values are refused rather than guessed at.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> Any:
        if dialect.name == "sqlite":
            return dialect.type_descriptor(String(32))
        if dialect.name in ("mysql", "mariadb"):
            return dialect.type_descriptor(mysql.DATETIME(fsp=6))
        return dialect.type_descriptor(DateTime(timezone=True))

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> Any:
        return bind_utc(value, dialect.name)

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if isinstance(value, str):
            value = datetime.fromisoformat(value)
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)  # type: ignore[no-any-return]
        return value.astimezone(UTC)  # type: ignore[no-any-return]


class _VoltroModel(SQLModel, registry=registry(metadata=voltro_metadata)):
    pass


class ScheduleRun(_VoltroModel, table=True):
    """One firing that ran, was skipped, missed, or is queued."""

    __tablename__ = RUNS_TABLE
    __table_args__ = (
        # "last run of a schedule" and "queued rows of a schedule by scheduled_at"
        Index("ix_voltro_runs_name_scheduled", "name", "scheduled_at"),
        # (id since migration 0012: the runs list of one schedule in one status, newest first,
        # is read in the index's order — without it SQLite preferred the status index below)
        Index("ix_voltro_runs_name_status_scheduled", "name", "status", "scheduled_at", "id"),
        # the retention sweep walks finished rows by age
        Index("ix_voltro_runs_finished", "finished_at"),
        # the runs list of every schedule, newest first (migration 0003): without it the
        # inspect runs page sorted the whole ledger (2.8 s at 1 M rows on SQLite)
        Index("ix_voltro_runs_scheduled", "scheduled_at"),
        # the runs list of every schedule in one status (migration 0012): without it a rare
        # status walked the time index past every row of the others (0.85 s at 1 M rows)
        Index("ix_voltro_runs_status_scheduled", "status", "scheduled_at", "id"),
    )

    id: str = Field(sa_type=String(40), primary_key=True)
    name: str = Field(sa_type=String(200), nullable=False)
    scheduled_at: datetime = Field(sa_type=UTCDateTime, nullable=False)
    fired_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    finished_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    status: str = Field(sa_type=String(16), nullable=False)
    trigger: str = Field(sa_type=String(16), nullable=False)
    coordination_outcome: str = Field(default="", sa_type=String(16), nullable=False)
    replica_id: str = Field(default="", sa_type=String(200), nullable=False)
    heartbeat_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    error_tag: str | None = Field(default=None, sa_type=String(200))
    error_message: str | None = Field(default=None, sa_type=Text)
    error_traceback: str | None = Field(default=None, sa_type=Text)
    """A failed run's traceback, bounded (the tail is kept: the innermost frames and the
    exception itself). Added by migration 0002."""
    attempt: int = Field(
        default=1,
        sa_column=Column("attempt", Integer, nullable=False, server_default=text("1")),
    )
    """Which attempt of the slot the row is on (1 for a first run; a retry of the same slot
    counts up on the same row, see :mod:`.retries`). The server default fills it in: a firing's
    insert does not send it. Added by migration 0009."""
    retry_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    """While a ``running`` row waits between attempts: when the next attempt is due
    (``NULL`` otherwise). Kept on the row so a replica that dies between attempts leaves the
    pending retry for another to take over. Added by migration 0009."""
    job_id: str | None = Field(default=None, sa_type=String(250))
    """The id of the job a hand-off gave this firing to (:mod:`.handoff`: Celery's task id,
    arq's job id, procrastinate's job id), derived from the slot (``<name>@<slot>``) and
    written before the enqueue, so a replica that takes a silent row over enqueues the same
    job (deduplicated) and follows it. ``NULL``: the firing ran in process. Migration 0010."""
    job_tracking: str | None = Field(default=None, sa_type=String(16))
    """How the row's final status relates to the job: ``followed`` (the engine reports the
    job's end: ``succeeded``/``failed`` are the job's) or ``handed-off`` (it cannot:
    ``succeeded`` means the job was enqueued, nothing more). Migration 0010."""


class ScheduleClaim(_VoltroModel, table=True):
    """One claimed slot: ``<name>@<YYYY-MM-DDTHH:MM:SS>``. The primary key elects the winner."""

    __tablename__ = CLAIMS_TABLE
    __table_args__ = (Index("ix_voltro_claims_claimed_at", "claimed_at"),)

    key: str = Field(sa_type=String(255), primary_key=True)
    claimed_at: datetime = Field(sa_type=UTCDateTime, nullable=False)
    replica_id: str = Field(default="", sa_type=String(200), nullable=False)


class SchedulePause(_VoltroModel, table=True):
    """A schedule an operator paused (and, once ``resumed_at`` is set, resumed).

    The row outlives the resume on purpose: ``resumed_at`` is where the boot backfill and the
    external missed watcher start again, so the paused span is never replayed or recorded
    ``missed``. One row per schedule; pausing again reuses it.
    """

    __tablename__ = PAUSES_TABLE

    name: str = Field(sa_type=String(200), primary_key=True)
    paused_at: datetime = Field(sa_type=UTCDateTime, nullable=False)
    paused_by: str = Field(sa_type=String(16), nullable=False)
    reason: str | None = Field(default=None, sa_type=String(500))
    resumed_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    resumed_by: str | None = Field(default=None, sa_type=String(16))


class SchedulePauseSpan(_VoltroModel, table=True):
    """One paused span of a schedule, kept for ever: the pauses table holds only the latest
    pause of each schedule (what the hot paths ask), so a schedule paused twice would leave
    its first span unexplained — the audit reads every span here. Written in the pause's and
    the resume's own transactions. Added by migration 0007."""

    __tablename__ = PAUSE_SPANS_TABLE

    name: str = Field(sa_type=String(200), primary_key=True)
    paused_at: datetime = Field(sa_type=UTCDateTime, primary_key=True)
    paused_by: str = Field(sa_type=String(16), nullable=False)
    reason: str | None = Field(default=None, sa_type=String(500))
    resumed_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    resumed_by: str | None = Field(default=None, sa_type=String(16))


class ScheduleMember(_VoltroModel, table=True):
    """One live replica under ``coordination="cluster"``: it beats ``heartbeat_at`` (the
    database's clock) every heartbeat; a row silent for two beats is not a member. Added by
    migration 0004."""

    __tablename__ = MEMBERS_TABLE

    replica_id: str = Field(sa_type=String(200), primary_key=True)
    heartbeat_at: datetime = Field(sa_type=UTCDateTime, nullable=False)
    started_at: datetime = Field(sa_type=UTCDateTime, nullable=False)


class ScheduleLease(_VoltroModel, table=True):
    """Who owns a schedule under ``coordination="cluster"``: ``owner`` until ``expires_at``
    (the database's clock). ``token`` grows by one on every change of hands — the fencing
    token every write of the owner is checked against. Added by migration 0004."""

    __tablename__ = LEASES_TABLE

    name: str = Field(sa_type=String(200), primary_key=True)
    owner: str = Field(default="", sa_type=String(200), nullable=False)
    token: int = Field(default=0, sa_type=BigInteger, nullable=False)
    expires_at: datetime = Field(sa_type=UTCDateTime, nullable=False)


class ScheduleDefinition(_VoltroModel, table=True):
    """One version of a schedule's definition: what decides which slots it owns and what runs
    in them, and the instant it took effect (the first boot or write that saw it). Catch-up,
    ``missed`` accounting and the audit start each version at its ``effective_from``, so a
    changed cron never re-runs the day's job nor owes slots of the new cadence from before
    the change. Rows are only ever added. Added by migration 0006."""

    __tablename__ = DEFINITIONS_TABLE
    __table_args__ = (
        # each replica's read of the versions written since the last it saw (migration 0008)
        Index("ix_voltro_definitions_effective_from", "effective_from"),
    )

    name: str = Field(sa_type=String(200), primary_key=True)
    version: int = Field(
        sa_type=Integer, primary_key=True, sa_column_kwargs={"autoincrement": False}
    )
    cron: str = Field(sa_type=String(200), nullable=False)
    timezone: str = Field(sa_type=String(64), nullable=False)
    trigger: str = Field(sa_type=String(16), nullable=False)
    on_overlap: str = Field(sa_type=String(16), nullable=False)
    backfill: str = Field(sa_type=String(16), nullable=False)
    handler: str = Field(sa_type=String(500), nullable=False)
    args: str = Field(default="{}", sa_type=Text, nullable=False)
    """The run-time schedule's JSON arguments (``{}`` for declared ones)."""
    source: str = Field(sa_type=String(16), nullable=False)
    """``code`` (declared with ``define_schedule``) or ``runtime`` (written at run time)."""
    effective_from: datetime = Field(sa_type=UTCDateTime, nullable=False)
    recorded_by: str = Field(default="", sa_type=String(200), nullable=False)
    deleted: bool | None = Field(default=None, sa_type=Boolean, nullable=True)
    """True: this version is a tombstone — the run-time schedule was deleted at
    ``effective_from`` (``NULL``/false: a definition). Added by migration 0008."""
    max_runtime_ms: int | None = Field(default=None, sa_type=BigInteger, nullable=True)
    """A run-time schedule's ``max_runtime_ms`` (``NULL`` for a declared one: its code says
    it). Added by migration 0008."""
    retry_attempts: int | None = Field(default=None, sa_type=Integer, nullable=True)
    """The version's ``RetryPolicy.attempts`` (``NULL``: no retries). Added by migration 0009."""
    retry_backoff_ms: int | None = Field(default=None, sa_type=BigInteger, nullable=True)
    retry_max_backoff_ms: int | None = Field(default=None, sa_type=BigInteger, nullable=True)
    exclude: str | None = Field(default=None, sa_type=Text, nullable=True)
    """The days the version does not run (dates, holidays specs) as canonical JSON (``NULL``:
    none). Added by migration 0011."""
    record: str | None = Field(default=None, sa_type=String(16), nullable=True)
    """``failures``: the version rolls its successes up per hour (``NULL``: every run keeps
    its row). Added by migration 0013."""


class ScheduleState(_VoltroModel, table=True):
    """Each schedule's newest outcome: its terminal run with the newest ``scheduled_at`` (then
    the newest ``id``). Written in the same statement batch — and transaction — as the run
    row's terminal status, with a conditional upsert that only moves forward, so a range
    backfill of old slots finishing late never hides today's outcome. The inspect listing
    filters by it (``status=failed``) without reading the ledger. A row outlives its schedule
    (a deleted run-time one): the listing walks the schedules, not this table. Added by
    migration 0012."""

    __tablename__ = STATE_TABLE
    __table_args__ = (
        # the listing's status filter: one name-ordered range per status
        Index("ix_voltro_state_status_name", "last_status", "name"),
    )

    name: str = Field(sa_type=String(200), primary_key=True)
    last_run_id: str = Field(sa_type=String(40), nullable=False)
    last_scheduled_at: datetime = Field(sa_type=UTCDateTime, nullable=False)
    last_finished_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    last_status: str = Field(sa_type=String(16), nullable=False)


class ScheduleRollup(_VoltroModel, table=True):
    """The successes of one schedule's slots in one UTC hour that have no row of their own
    (``record="failures"``): how many, their summed and their longest run time. A success is
    counted here in the transaction that deletes its row — each success is a row or a count,
    never both. Retention prunes the hours older than it keeps rows. Added by migration 0013."""

    __tablename__ = ROLLUPS_TABLE

    name: str = Field(sa_type=String(200), primary_key=True)
    hour: datetime = Field(sa_type=UTCDateTime, primary_key=True)
    succeeded: int = Field(default=0, sa_type=BigInteger, nullable=False)
    total_ms: int = Field(default=0, sa_type=BigInteger, nullable=False)
    max_ms: int = Field(default=0, sa_type=BigInteger, nullable=False)


runs_table = ScheduleRun.__table__  # type: ignore[attr-defined]
claims_table = ScheduleClaim.__table__  # type: ignore[attr-defined]
pauses_table = SchedulePause.__table__  # type: ignore[attr-defined]
pause_spans_table = SchedulePauseSpan.__table__  # type: ignore[attr-defined]
members_table = ScheduleMember.__table__  # type: ignore[attr-defined]
leases_table = ScheduleLease.__table__  # type: ignore[attr-defined]
definitions_table = ScheduleDefinition.__table__  # type: ignore[attr-defined]
state_table = ScheduleState.__table__  # type: ignore[attr-defined]
rollups_table = ScheduleRollup.__table__  # type: ignore[attr-defined]


CLAIM_KEY_SECOND = "%Y-%m-%dT%H:%M:%S"


def claim_key(name: str, scheduled_at: datetime) -> str:
    """The claim key of a slot: the name and the UTC second, identical on every replica."""
    return f"{name}@{scheduled_at.astimezone(UTC).strftime(CLAIM_KEY_SECOND)}"


def rerun_claim_key(name: str, scheduled_at: datetime, rerun_of: str) -> str:
    """The claim of one re-run of a slot: the slot's :func:`claim_key` and a digest of the row
    it re-runs (``rerun_of``, its id). Two range backfills re-running the same outcome of the
    same slot claim the same key, so one of them runs it; a later re-run re-runs a newer row,
    so it claims a new key. Not a slot's key (:func:`slot_of_claim_key` answers ``None``): the
    sweep of claims without a row leaves it alone — it is written with its row or not at all."""
    digest = hashlib.blake2s(rerun_of.encode(), digest_size=6).hexdigest()
    return f"{claim_key(name, scheduled_at)}~{digest}"


def slot_of_claim_key(key: str) -> tuple[str, datetime] | None:
    """The ``(name, slot)`` a :func:`claim_key` stands for; ``None`` for any other claims row
    (a queue line's lock)."""
    name, _, second = key.rpartition("@")
    try:
        return name, datetime.strptime(second, CLAIM_KEY_SECOND).replace(tzinfo=UTC)
    except ValueError:
        return None
