"""Definition versions: what each schedule was, and from when (SPEC §7).

Every boot compares each schedule's definition — cron, zone, trigger, overlap, backfill,
handler, args, retries, excluded days — with the newest version recorded in
``_voltro_schedule_definitions`` and adds a version when it changed, effective from that boot.
The versions answer one question for catch-up, ``missed`` accounting and the audit: *which
slots does a schedule owe?* Each version owns the occurrences of its own cron in its own
span, ``(effective_from, next version's effective_from]``; nothing before the first version
is owed. So a cron edited
between deploys (``15 1 * * *`` ran at 01:15, the deploy at 10:00 says ``15 2 * * *``) owes no
02:15 today: that slot of the new cadence lies before the new version took effect — it is
neither run again nor recorded ``missed`` (Oban #1156, Dagster #13597, Prefect #18894).

A change of overlap, backfill or handler alone keeps the cadence: a version is still added (the
inspect route shows it), but the slots owed do not change.

Two replicas booting with the same new definition record one version: the primary key
``(name, version)`` elects the first writer and the other reads its row back, so both start
from the same ``effective_from``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .cron import CronSpec
from .enums import RecordPolicy
from .logs import logger
from .planning import CATCH_UP_CAP, passed_slots
from .store.base import DefinitionRecord

if TYPE_CHECKING:
    from .definition import Schedule
    from .enums import TriggerMode
    from .store import Store

__all__ = [
    "NO_VERSIONS",
    "Span",
    "Versions",
    "definition_record",
    "handler_name",
    "record_versions",
]

RECORD_ATTEMPTS = 5
"""Rounds of insert-then-read before a boot gives up recording (peers racing with different
definitions each round: a deploy flapping, not something a boot should wait on)."""


def handler_name(schedule: Schedule) -> str:
    """What runs in a slot, as a stable string: the handler's module and qualified name, or
    the workflow a ``workflow=`` schedule starts."""
    if schedule.handler_ref is not None:  # a run-time schedule: its handler's registered name
        return schedule.handler_ref
    if schedule.workflow is not None:
        return f"workflow:{schedule.workflow.name}"
    handler = schedule.handler
    module = getattr(handler, "__module__", None) or type(handler).__module__
    qualname = getattr(handler, "__qualname__", None) or type(handler).__qualname__
    return f"{module}:{qualname}"


def definition_record(
    schedule: Schedule,
    trigger: TriggerMode,
    *,
    effective_from: datetime,
    version: int = 1,
    recorded_by: str = "",
    source: str = "code",
    args: dict[str, Any] | None = None,
    deleted: bool = False,
) -> DefinitionRecord:
    """The version row ``schedule`` would record (a run-time one: its own args and watchdog
    bound, which no code holds)."""
    runtime = schedule.source == "runtime"
    retry = schedule.retry
    if runtime:
        source, args = "runtime", dict(schedule.args)
    return DefinitionRecord(
        name=schedule.name,
        version=version,
        cron=schedule.cron,
        timezone=schedule.timezone,
        trigger=trigger.value,
        on_overlap=schedule.on_overlap.value,
        backfill=schedule.backfill.value,
        handler=handler_name(schedule),
        args=json.dumps(args, sort_keys=True, separators=(",", ":")) if args else "{}",
        source=source,
        effective_from=effective_from,
        recorded_by=recorded_by,
        deleted=deleted,
        max_runtime_ms=schedule.max_runtime_ms if runtime else None,
        retry_attempts=None if retry is None else retry.attempts,
        retry_backoff_ms=None if retry is None else retry.backoff_ms,
        retry_max_backoff_ms=None if retry is None else retry.max_backoff_ms,
        exclude=schedule.exclude.to_json() if schedule.exclude else None,
        record=None if schedule.record is RecordPolicy.ALL else schedule.record.value,
    )


@dataclass(frozen=True, slots=True)
class Span:
    """One version's reign: its slots in ``(start, end]`` are its own (``end`` ``None``: the
    current version, open-ended)."""

    version: DefinitionRecord
    start: datetime
    end: datetime | None

    @property
    def spec(self) -> CronSpec:
        return CronSpec.parse(self.version.cron, self.version.timezone)


class Versions:
    """The recorded versions of a scheduler's schedules, read at boot (what catch-up asks)."""

    def __init__(self, by_name: dict[str, list[DefinitionRecord]]) -> None:
        self._by_name = by_name

    def of(self, name: str) -> list[DefinitionRecord]:
        """Newest first; empty for a schedule never recorded."""
        return list(self._by_name.get(name, ()))

    def current(self, name: str) -> DefinitionRecord | None:
        """The newest version (a run-time schedule's tombstone, when it was deleted)."""
        versions = self._by_name.get(name)
        return versions[0] if versions else None

    def names(self) -> list[str]:
        return list(self._by_name)

    def add(self, record: DefinitionRecord) -> bool:
        """Take a version read or written after boot (a run-time write, here or on another
        replica) as the newest; ``False`` when it is not newer than the one known (already
        taken: nothing changes)."""
        if self is NO_VERSIONS:
            raise RuntimeError("NO_VERSIONS is shared and never changes: build a Versions")
        versions = self._by_name.setdefault(record.name, [])
        if versions and versions[0].version >= record.version:
            return False
        versions.insert(0, record)
        return True

    def first_effective(self, name: str) -> datetime | None:
        """When the schedule came to exist (its first version took effect)."""
        versions = self._by_name.get(name)
        return versions[-1].effective_from if versions else None

    def spans(self, name: str) -> list[Span]:
        """Each cadence's reign, oldest first. Consecutive versions with the same cron, zone
        and trigger are one span (an overlap or handler change does not move a slot). A
        tombstone (a deleted run-time schedule) ends the span before it and starts none: the
        schedule owes nothing until it is written again."""
        spans: list[Span] = []
        for record in reversed(self._by_name.get(name, ())):
            open_span = spans[-1] if spans and spans[-1].end is None else None
            if open_span is not None and not record.deleted:
                if _same_cadence(open_span.version, record):
                    continue
            if open_span is not None:
                spans[-1] = Span(open_span.version, open_span.start, record.effective_from)
            if not record.deleted:
                spans.append(Span(record, record.effective_from, None))
        return spans

    def windows(
        self, schedule: Schedule, after: datetime | None, until: datetime
    ) -> list[tuple[datetime, datetime, CronSpec]]:
        """Where ``schedule`` owes slots in ``(after, until]`` (``after`` ``None``: since it
        came to exist): each span's part of it, oldest first, as ``(after, until]`` with the
        cron that owns it. Empty for a schedule with no recorded version."""
        windows = []
        for span in self.spans(schedule.name):
            start = span.start if after is None else max(after, span.start)
            end = until if span.end is None else min(until, span.end)
            if start < end:
                windows.append((start, end, schedule.spec if span.end is None else span.spec))
        return windows

    def owed(
        self, schedule: Schedule, after: datetime | None, until: datetime, cap: int = CATCH_UP_CAP
    ) -> tuple[list[datetime], bool]:
        """The slots ``schedule`` owes in ``(after, until]`` (``after`` ``None``: since it
        came to exist), oldest first, the newest ``cap`` of them; and whether it was capped.
        Each span contributes its own cron's occurrences within its reign. A schedule with no
        recorded version owes its current cron's occurrences after ``after`` (nothing without
        one): a ledger from before versions were recorded."""
        if self.current(schedule.name) is None:
            return passed_slots(schedule.spec, after, until, cap) if after else ([], False)
        slots: list[datetime] = []
        capped = False
        for start, end, spec in self.windows(schedule, after, until):
            found, cut = passed_slots(spec, start, end, cap)
            slots.extend(found)
            capped = capped or cut
        if len(slots) > cap:
            slots, capped = slots[-cap:], True
        return slots, capped

    def deleted(self, name: str) -> bool:
        """Whether the newest version is a tombstone (a deleted run-time schedule)."""
        current = self.current(name)
        return current is not None and current.deleted

    def cadence_from(self, name: str) -> datetime | None:
        """Where the current cadence began: slots of the current cron before it are not
        owed (``None``: never recorded)."""
        spans = self.spans(name)
        return spans[-1].start if spans else None


def _same_cadence(a: DefinitionRecord, b: DefinitionRecord) -> bool:
    return (a.cron, a.timezone, a.trigger) == (b.cron, b.timezone, b.trigger)


NO_VERSIONS = Versions({})
"""Nothing recorded: every schedule owes slots from its last row, as before versions."""


async def record_versions(
    store: Store,
    schedules: Sequence[Schedule],
    trigger_of: Callable[[Schedule], TriggerMode],
    now: datetime,
    replica_id: str,
    known: dict[str, list[DefinitionRecord]] | None = None,
) -> Versions:
    """Add a version for each schedule whose definition differs from its newest recorded one
    (or that has none), effective ``now``; returns every schedule's versions as stored.

    ``known``: the versions already read (boot reads the whole table once, for the run-time
    schedules too) — kept current here, in place; read for ``schedules`` when not given."""
    names = [s.name for s in schedules]
    if not names:
        return NO_VERSIONS if known is None else Versions(known)
    if known is None:
        known = await store.definitions(names)
    # A schedule with runs but no version is older than this table (a ledger from before
    # migration 0006): its first version is dated back to its last run, so the slots owed
    # since then are still caught up — the upgrade must not cost a deploy's backfill.
    unrecorded = [name for name in names if name not in known]
    existed = await store.last_runs(unrecorded) if unrecorded else {}
    for _ in range(RECORD_ATTEMPTS):
        wanted: list[DefinitionRecord] = []
        for schedule in schedules:
            newest = known.get(schedule.name, [None])[0]
            last = existed.get(schedule.name) if newest is None else None
            proposal = definition_record(
                schedule,
                trigger_of(schedule),
                effective_from=now if last is None else min(now, last.scheduled_at),
                version=1 if newest is None else newest.version + 1,
                recorded_by=replica_id,
            )
            if newest is None or not newest.same_definition(proposal):
                wanted.append(proposal)
        if not wanted:
            return Versions(known)
        every = await store.add_definitions(wanted) == len(wanted)
        if every:
            # every proposal was inserted here: stored as proposed, nothing to read back and
            # no round after this one (a first boot of 100,000 schedules read back the 100,000
            # rows it had just written, then proposed them all again to find nothing to do)
            for record in wanted:
                known[record.name] = [record, *known.get(record.name, [])]
        else:  # a peer recorded some first: what is stored is read, and looked at again
            known.update(await store.definitions([w.name for w in wanted]))
        firsts = 0
        for record in wanted:
            stored = known[record.name][0]
            if stored.version != record.version or not stored.same_definition(record):
                continue  # a peer recorded another definition: the next round looks again
            if stored.version == 1:
                firsts += 1  # one line for all of them: a first boot may record thousands
                continue
            logger.info(
                "schedule: definition changed  name=%s version=%d cron=%r timezone=%s "
                "effectiveFrom=%s recordedBy=%s",
                record.name,
                stored.version,
                record.cron,
                record.timezone,
                stored.effective_from.isoformat(),
                stored.recorded_by,
            )
        if firsts:
            logger.info("schedule: definitions recorded  new=%d", firsts)
        if every:
            return Versions(known)
    logger.warning(
        "schedule: definitions still changing under this boot after %d rounds — another "
        "replica boots with different definitions (a deploy flapping?); going on with the "
        "versions as stored",
        RECORD_ATTEMPTS,
    )
    return Versions(known)
