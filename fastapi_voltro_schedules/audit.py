"""Auditing the ledger: did any slot run twice, is anything stuck, did a slot leave no trace?

:func:`audit` is pure — rows and schedules in, findings out — and :func:`audit_ledger` feeds it
from a store. ``voltro schedule audit`` (``cli/audit.py``) prints the same report; the chaos
test calls :func:`audit_ledger` to prove its run clean.

The three findings:

- **duplicate** — one clock-driven slot (``self``/``external``, same name and
  ``scheduled_at``) with two or more rows whose handler ran (``running``, ``succeeded``,
  ``failed``). Not duplicates: the ``missed`` row plus the run of an external arrival the
  missed policy recorded and then ran (only one of the two ran), ``skipped`` rows, and
  ``manual`` runs (Run now, a range backfill), which may run any slot again on purpose. A slot
  retried within its window (``RetryPolicy``) is one row whatever its ``attempt``.
- **stuck** — a ``running``/``queued`` row silent for more than 3 heartbeats (no
  ``heartbeat_at``/``fired_at`` newer than ``now − 3 × schedule_heartbeat_ms``): its replica
  is gone and nobody marked it ``failed/abandoned`` yet. A ``running`` row waiting between two
  attempts (``retry_at`` set) is live while its replica beats it; silent, it is stuck until
  another replica takes the retry over (the detail says so).
- **gap** — a slot a ``self`` schedule owed in the range with no row at all (no run, no
  ``skipped``, no ``missed``). Owed are the slots its definition versions own
  (:mod:`.definitions`: each version's cron within its own span, nothing before the first
  version took effect — a cron edited between deploys owes nothing of its new cadence from
  before the edit), outside every span it was paused for (``paused_at < slot <= resumed_at``,
  or after ``paused_at`` while paused — each pause's span, from ``_voltro_schedule_pause_spans``,
  not only the latest), and older than 3 heartbeats (a slot due just now may not have
  its row yet). A ledger with no recorded version for a schedule (written before migration
  0006) is judged from the schedule's first clock-driven row instead — a range backfill's
  ``manual`` rows never count as a first row. Needs the schedules: an audit from a bare
  database URL reports duplicates and stuck rows only — except for run-time schedules
  (``put_schedule``), whose definitions the versions table holds: they are always
  gap-checked, up to their deletion when they were deleted.

An excluded slot (``exclude=``: a listed day, a holiday) is not a finding: the engine records
it ``skipped`` with ``error_tag="excluded"`` — the slot's row — and the report counts them.

A ``record="failures"`` schedule's successes have no rows: each is counted in its slot's UTC
hour (``_voltro_schedule_rollups``). The slots of an hour without a row are accounted for when
the hour's count covers them all; otherwise every one of them is reported a gap (with the
count in the detail). The report counts the successes so accounted for (``rolledUp``). A
rolled-up success cannot be told from its slot's other rows, so a slot that succeeded twice
without rows is not reported a duplicate — the claims elect each slot exactly as for rows.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from .clock import iso_z
from .cron import CronSpec
from .definition import Schedule
from .definitions import NO_VERSIONS, Versions
from .enums import RunStatus
from .exclusions import EXCLUDED_TAG
from .pauses import NO_PAUSES, PauseView, RecordedPauses
from .planning import DEAD_AFTER_BEATS, is_live
from .runtime_schedules import audited_runtime
from .store.base import CLOCK_TRIGGERS, LIVE_STATUSES, RollupRecord, RunRecord, Store

RAN_STATUSES: frozenset[RunStatus] = frozenset(
    {RunStatus.RUNNING, RunStatus.SUCCEEDED, RunStatus.FAILED}
)
"""Statuses of a row whose handler started: two of them on one slot are a duplicate."""
MAX_OCCURRENCES = 1_000_000
"""Occurrences one schedule may have in an audited range (an every-second schedule: 11 days)."""
PAGE = 5000
"""Rows per ledger read."""
MAX_ROLLUPS = 10_000_000
"""Hourly rollup rows one audit reads (a year of 1,000 ``record="failures"`` schedules)."""


class FindingKind(StrEnum):
    DUPLICATE = "duplicate"
    STUCK = "stuck"
    GAP = "gap"


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem in the ledger."""

    kind: FindingKind
    name: str
    scheduled_at: datetime
    run_ids: tuple[str, ...] = ()
    """The rows concerned (none for a gap)."""
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "name": self.name,
            "scheduledAt": iso_z(self.scheduled_at),
            "runIds": list(self.run_ids),
            "detail": self.detail,
        }

    def line(self) -> str:
        ids = f"  runIds={','.join(self.run_ids)}" if self.run_ids else ""
        return f"{self.kind.value:<9} {self.name}  {iso_z(self.scheduled_at)}{ids}  {self.detail}"


@dataclass(frozen=True, slots=True)
class AuditReport:
    """What :func:`audit` found in ``(start, end]``."""

    start: datetime
    end: datetime
    now: datetime
    rows: int
    """Rows read from the ledger."""
    gap_checked: tuple[str, ...]
    """The ``self`` schedules whose occurrences were checked for gaps."""
    findings: tuple[Finding, ...] = field(default=())
    excluded: int = 0
    """Slots recorded ``skipped`` on an excluded day (``error_tag="excluded"``): each is the
    slot's row, not a problem — counted so the report says why those slots did not run."""
    rolled_up: int = 0
    """Owed slots without a row that their hour's rollup accounts for (``record="failures"``:
    successes counted, not recorded)."""

    @property
    def clean(self) -> bool:
        return not self.findings

    def of(self, kind: FindingKind) -> list[Finding]:
        return [f for f in self.findings if f.kind is kind]

    @property
    def duplicates(self) -> list[Finding]:
        return self.of(FindingKind.DUPLICATE)

    @property
    def stuck(self) -> list[Finding]:
        return self.of(FindingKind.STUCK)

    @property
    def gaps(self) -> list[Finding]:
        return self.of(FindingKind.GAP)

    def to_json(self) -> dict[str, Any]:
        return {
            "from": iso_z(self.start),
            "to": iso_z(self.end),
            "now": iso_z(self.now),
            "rows": self.rows,
            "gapChecked": list(self.gap_checked),
            "clean": self.clean,
            "excluded": self.excluded,
            "rolledUp": self.rolled_up,
            "counts": {kind.value: len(self.of(kind)) for kind in FindingKind},
            "findings": [f.to_json() for f in self.findings],
        }

    def text(self) -> str:
        counts = ", ".join(f"{len(self.of(k))} {k.value}" for k in FindingKind)
        excluded = f" ({self.excluded} skipped on excluded days)" if self.excluded else ""
        if self.rolled_up:
            excluded += f" ({self.rolled_up} successes rolled up per hour)"
        head = (
            f"ledger audit ({iso_z(self.start)}, {iso_z(self.end)}]: {self.rows} rows{excluded}, "
            f"gaps checked for {len(self.gap_checked)} self schedule(s): "
            f"{'clean' if self.clean else counts}"
        )
        return "\n".join([head, *(f.line() for f in self.findings)])


def audit(
    rows: Iterable[RunRecord],
    *,
    start: datetime,
    end: datetime,
    now: datetime,
    heartbeat_ms: int,
    self_schedules: Sequence[Schedule] = (),
    first_seen: Mapping[str, datetime] | None = None,
    versions: Versions = NO_VERSIONS,
    pauses: PauseView = NO_PAUSES,
    rollups: Iterable[RollupRecord] = (),
) -> AuditReport:
    """The findings in ``rows`` (the ledger's rows with ``start < scheduled_at <= end``).

    ``self_schedules`` are checked for gaps up to ``min(end, now − 3 heartbeats)``: in the
    spans their ``versions`` own, or — a schedule with no version recorded — from
    ``first_seen[name]`` (its first clock-driven row in the whole ledger; a schedule without
    one is not gap-checked) or ``start``, whichever is later; never inside a span ``pauses``
    holds. ``now`` is the ledger's clock (the database's, in :func:`audit_ledger`).
    ``rollups``: the hourly success counts of the range's hours (``record="failures"``). Pure.
    """
    if start >= end:
        raise ValueError(f"audit: from ({iso_z(start)}) must be before to ({iso_z(end)})")
    first_seen = first_seen or {}
    silence = timedelta(milliseconds=DEAD_AFTER_BEATS * heartbeat_ms)
    slots: dict[tuple[str, datetime], list[RunRecord]] = defaultdict(list)
    findings: list[Finding] = []
    count = excluded = 0
    for row in rows:
        count += 1
        if row.status is RunStatus.SKIPPED and row.error_tag == EXCLUDED_TAG:
            excluded += 1
        slots[(row.name, row.scheduled_at)].append(row)
        if row.status in LIVE_STATUSES and not is_live(
            row.status, row.fired_at, row.heartbeat_at, now, heartbeat_ms
        ):
            seen = max((t for t in (row.heartbeat_at, row.fired_at) if t is not None), default=None)
            last = "no sign of life at all" if seen is None else f"last seen {iso_z(seen)}"
            # a retry pending between two attempts (RetryPolicy): the next replica to run
            # takes it over, and the slot ends within its window either way
            pending = (
                f", a retry pending after attempt {row.attempt} (due {iso_z(row.retry_at)})"
                if row.retry_at is not None
                else ""
            )
            findings.append(
                Finding(
                    FindingKind.STUCK,
                    row.name,
                    row.scheduled_at,
                    (row.id,),
                    f"{row.status.value} on replica {row.replica_id or '?'}{pending}, {last} "
                    f"(silent for more than {DEAD_AFTER_BEATS} heartbeats)",
                )
            )
    for (name, at), group in slots.items():
        ran = [r for r in group if r.trigger in CLOCK_TRIGGERS and r.status in RAN_STATUSES]
        if len(ran) > 1:
            ran.sort(key=lambda r: r.id)
            what = ", ".join(f"{r.status.value}@{r.replica_id or '?'}" for r in ran)
            findings.append(
                Finding(
                    FindingKind.DUPLICATE,
                    name,
                    at,
                    tuple(r.id for r in ran),
                    f"one slot ran {len(ran)} times: {what}",
                )
            )
    horizon: datetime = min(end, now - silence)
    checked: list[str] = []
    counted = {(r.name, r.hour): r.succeeded for r in rollups}
    rolled_up = 0
    for schedule in self_schedules:
        windows = _owed_windows(schedule, versions, first_seen.get(schedule.name), start, horizon)
        if windows is None:
            continue
        checked.append(schedule.name)
        total = 0
        for begin, until, spec in windows:
            occurrences = spec.occurrences(begin, until, limit=MAX_OCCURRENCES + 1)
            total += len(occurrences)
            if total > MAX_OCCURRENCES:
                raise ValueError(
                    f"audit: {schedule.name!r} has more than {MAX_OCCURRENCES:,} occurrences "
                    "in the range — audit a shorter one (--from/--to)"
                )
            holes: dict[datetime, list[datetime]] = defaultdict(list)
            for at in pauses.unpaused(schedule.name, occurrences):
                if (schedule.name, at) not in slots:
                    holes[_hour_of(at)].append(at)
            for hour, missing in holes.items():
                succeeded = counted.get((schedule.name, hour), 0)
                if len(missing) <= succeeded:
                    rolled_up += len(missing)
                    continue
                detail = "no row for this occurrence" + (
                    f" ({succeeded} successes of its hour rolled up, {len(missing)} slots "
                    "of it without a row)"
                    if succeeded
                    else ""
                )
                findings += [
                    Finding(FindingKind.GAP, schedule.name, at, (), detail) for at in missing
                ]
    findings.sort(key=lambda f: (f.scheduled_at, f.name, f.kind.value))
    return AuditReport(start, end, now, count, tuple(checked), tuple(findings), excluded, rolled_up)


def _hour_of(at: datetime) -> datetime:
    return at.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


async def audit_ledger(
    store: Store,
    schedules: Sequence[Schedule],
    start: datetime,
    end: datetime,
    *,
    heartbeat_ms: int = 30_000,
    now: datetime | None = None,
) -> AuditReport:
    """Read ``(start, end]`` of the ledger and :func:`audit` it.

    ``schedules`` are the ``self`` schedules to check for gaps (pass
    ``[s for s in scheduling.schedules if scheduling.trigger_of(s) is TriggerMode.SELF]``, or
    none); ``heartbeat_ms`` is the app's ``schedule_heartbeat_ms``. ``now`` defaults to the
    database's clock. Raises ``StoreUnavailableError`` when the ledger cannot be read.
    """
    if start >= end:
        raise ValueError(f"audit: from ({iso_z(start)}) must be before to ({iso_z(end)})")
    when = now if now is not None else await store.database_now()
    rows: list[RunRecord] = []
    cursor: tuple[datetime, str] | None = None
    while True:
        page = await store.runs_between(start, end, limit=PAGE, cursor=cursor)
        rows += page
        if len(page) < PAGE:
            break
        cursor = (page[-1].scheduled_at, page[-1].id)
    first_inside: dict[str, datetime] = {}
    for row in rows:  # oldest first: the first clock-driven row of a name is its earliest
        if row.trigger in CLOCK_TRIGGERS:
            first_inside.setdefault(row.name, row.scheduled_at)
    first_seen: dict[str, datetime] = {}
    names = [s.name for s in schedules]
    # Run-time schedules are checked from the versions table alone: their definitions are
    # data, so no app is needed to know which slots they owe (deleted ones too, up to the
    # deletion).
    known = await store.definitions()
    runtime = audited_runtime(known, set(names))
    schedules = [*schedules, *runtime]
    names += [s.name for s in runtime]
    versions = Versions({name: known[name] for name in names if name in known})
    for schedule in schedules:
        if versions.current(schedule.name) is not None:
            continue  # judged from its versions
        # a clock-driven row at or before `start` means the schedule was live before the
        # range: judge from `start`; else from its first such row inside the range (if any)
        before = await store.list_runs(schedule.name, limit=1, before=start + _EPSILON)
        if before and before[0].trigger in CLOCK_TRIGGERS:
            first_seen[schedule.name] = before[0].scheduled_at
            continue
        if schedule.name in first_inside:
            first_seen[schedule.name] = first_inside[schedule.name]
    return audit(
        rows,
        start=start,
        end=end,
        now=when,
        heartbeat_ms=heartbeat_ms,
        self_schedules=schedules,
        first_seen=first_seen,
        versions=versions,
        pauses=RecordedPauses(await store.pause_spans()),
        # many names: every schedule's hours (one range read) rather than a huge IN list
        rollups=await store.rollups(
            names if len(names) <= 1000 else None, _hour_of(start), end, limit=MAX_ROLLUPS
        ),
    )


_EPSILON = timedelta(microseconds=1)


def _owed_windows(
    schedule: Schedule,
    versions: Versions,
    first: datetime | None,
    start: datetime,
    horizon: datetime,
) -> list[tuple[datetime, datetime, CronSpec]] | None:
    """The ``(after, until]`` windows of ``schedule``'s owed slots in the range, each with the
    cron that owns it; ``None`` when the schedule is not gap-checked at all."""
    if versions.current(schedule.name) is not None:
        return versions.windows(schedule, start, horizon)
    if first is None:
        return None
    # the first row itself is at `first`: occurrences from it on are judged
    begin = max(start, first - _EPSILON)
    return [(begin, horizon, schedule.spec)] if begin < horizon else []


def report_json(report: AuditReport) -> str:
    return json.dumps(report.to_json(), indent=2)
