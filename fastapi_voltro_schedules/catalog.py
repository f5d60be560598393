"""The catalog of schedules written at run time: their writes, their loading at boot, and how
every replica follows them.

**Stored as definition versions.** ``put_schedule`` adds a version to
``_voltro_schedule_definitions`` (``source="runtime"``), effective from the write: a new
schedule owes no slot before it; an edit is a new version, so the slots its previous version
ran are not run again and the new cadence owes nothing from before the edit (the same rule as a
cron edited between deploys, :mod:`.definitions`). ``delete_schedule`` adds a *tombstone*: a
version with ``deleted`` set, effective from the deletion — the slots before it are still owed
(the audit checks them), none after it; the firings of an ``on_overlap="queue"`` schedule
still waiting in its line are written off (``missed``, ``error_tag="written-off"``) and never
run. Writing the name again later starts a new span.
Versions are only ever added; two writers racing for one version number are told apart by the
primary key ``(name, version)``, and the loser writes the next number.

**This replica** applies its own write at once (:meth:`Catalog.apply`): the engine arms a new
schedule from its ``effective_from``, re-arms an edited one, disarms a deleted one (a firing in
flight finishes; nothing new fires).

**Other replicas** read the versions that took effect since the last they saw, every
heartbeat (:meth:`Catalog.follow`), and apply them the same way — so a write reaches every
replica within one heartbeat. The read overlaps the previous one by :data:`LOOKBACK` (a
version commits a little after the instant it is stamped with) and skips versions already
known. On Postgres under ``change_strategy="cdc"`` each write also sends a ``NOTIFY`` (in the
insert's own statement, delivered at commit, on a channel of its own); every replica's
engine listens on its one ``LISTEN`` session and calls :meth:`Catalog.poke`, so
:meth:`follow` reads at once instead of at the next beat — milliseconds, not a heartbeat.
The heartbeat read stays: a notification is a hint, lost while the session is down.

Until a replica has read a write, it runs what it knew: an edit's old cadence may fire there
for up to one heartbeat (its slots are claimed like any other, so under ``advisoryLock`` a slot
still runs once across replicas), and a new schedule's first slots are fired late there, or
lost to the claim of the replica that fired them on time — as are an edit's new-cadence slots
of that beat (:func:`.planning.unplanned_after_edit`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import anyio

from .clock import iso_z
from .definition import Schedule
from .definitions import RECORD_ATTEMPTS, Versions, definition_record
from .engine import Engine
from .enums import BackfillPolicy, OverlapPolicy, RecordPolicy, TriggerMode
from .errors import DeclaredInCodeError, ScheduleNotFoundError, StoreUnavailableError
from .handlers import NamedHandler
from .logs import logger
from .records import DefinitionRecord
from .retries import RetryPolicy
from .runtime_schedules import (
    RUNTIME_SOURCE,
    ChangeKind,
    build_runtime_schedule,
    plan_change,
    retry_policy,
)

if TYPE_CHECKING:
    from .clock import Clock
    from .store import Store

__all__ = ["LOOKBACK", "Catalog", "PutResult", "load_runtime_schedules", "newest_effective"]

LOOKBACK = timedelta(seconds=10)
"""How far each read of new versions reaches back before the newest one already seen: a
version stamped at ``t`` commits within a store call's bound (8 s, retries included:
``store.sql_connections.OPERATION_TIMEOUT_S``) of it, and replicas' clocks (the database's, on
a server store) agree within a second. Not more: every version in the overlap is read again
each beat — after 10,000 writes, a minute's overlap was 10,000 keys a beat for a minute."""


@dataclass(frozen=True, slots=True)
class PutResult:
    """What ``put_schedule`` did."""

    created: bool
    """True: no run-time schedule of that name was running (a new one, or one written again
    after a delete); False: an existing one was replaced."""
    changed: bool
    """False: the definition was the same as the current version (nothing was written)."""
    schedule: Schedule
    version: DefinitionRecord
    """The version in force after the write."""


def load_runtime_schedules(
    known: Mapping[str, list[DefinitionRecord]],
    handlers: Mapping[str, NamedHandler],
    declared: set[str],
) -> list[Schedule]:
    """Boot: the run-time schedules stored (each name's newest version, unless a tombstone or
    a name the code declares). A version whose handler this deployment does not register is
    skipped with a warning saying what to do — the app boots without it."""
    loaded: list[Schedule] = []
    for name, versions in sorted(known.items()):
        change = plan_change(
            versions[0], running=False, declared=name in declared, handlers=handlers
        )
        if change.problem is not None:
            _warn_unknown(change.record, change.problem)
        if change.kind is ChangeKind.ADD and change.schedule is not None:
            loaded.append(change.schedule)
    if loaded:
        logger.info("scheduler: run-time schedules loaded  count=%d", len(loaded))
    return loaded


def _warn_unknown(record: DefinitionRecord, problem: Exception) -> None:
    logger.warning(
        "schedule: run-time schedule not armed  name=%s version=%d handler=%s — %s. Register "
        "the handler in this deployment (@define_handler(name=%r)), or delete the schedule "
        "(DELETE /_voltro/inspect/schedules/%s, `voltro schedule delete %s`)",
        record.name,
        record.version,
        record.handler,
        problem,
        record.handler,
        record.name,
        record.name,
    )


class Catalog:
    """The run-time schedules of one running scheduler: writes them, and keeps its engine
    and listing in step with what every replica wrote."""

    def __init__(
        self,
        *,
        store: Store,
        clock: Clock,
        engine: Engine,
        versions: Versions,
        handlers: Mapping[str, NamedHandler],
        declared: set[str],
        listing: list[Schedule],
        replica_id: str,
        heartbeat_ms: int,
    ) -> None:
        self.store = store
        self.clock = clock
        self.engine = engine
        self.versions = versions
        self.handlers = handlers
        self.declared = declared
        """The names declared in code: never written at run time here."""
        self.listing = listing
        """The scheduler's schedules (what the routes list): kept in step, in place."""
        self.replica_id = replica_id
        self.heartbeat_ms = heartbeat_ms
        self._seen: datetime | None = None
        """The newest ``effective_from`` read so far (``None``: from boot on)."""
        self._booted = clock.now()
        """Where the first read starts when boot read no version (see :meth:`read_changes`)."""
        self._poked = anyio.Event()
        self._writing: dict[str, anyio.Lock] = {}
        """One lock per name being written here: two writes of one name take turns (each reads
        the newest version, then writes the next); writes of different names do not wait for
        each other — ten thousand tenants are written in parallel, not one at a time."""
        self._runtime = {s.name: s for s in listing if s.source == RUNTIME_SOURCE}
        """The run-time part of :attr:`listing`, by name (what :meth:`runs` answers in O(1))."""
        self.changes = 0
        """How many times :attr:`listing` changed (the inspect listing's sorted copy is
        rebuilt when it moves, see :mod:`.listing`)."""
        # cdc: a peer's write arrives as a NOTIFY on the engine's listening session
        engine.definition_written = lambda _name: self.poke()

    def runs(self, name: str) -> Schedule | None:
        """The run-time schedule ``name`` as this scheduler runs it."""
        return self._runtime.get(name)

    @asynccontextmanager
    async def _writing_name(self, name: str) -> AsyncIterator[None]:
        lock = self._writing.setdefault(name, anyio.Lock())
        try:
            async with lock:
                yield
        finally:
            if not lock.locked() and not lock.statistics().tasks_waiting:
                del self._writing[name]

    # -- writes ---------------------------------------------------------------------------

    async def put(
        self,
        name: str,
        *,
        cron: str,
        timezone: str,
        handler: str,
        args: Mapping[str, Any] | None = None,
        on_overlap: OverlapPolicy | str = OverlapPolicy.SKIP,
        backfill: BackfillPolicy | str = BackfillPolicy.SKIP,
        max_runtime_ms: int | None = None,
        retry: RetryPolicy | Mapping[str, Any] | None = None,
        exclude: object = None,
        record: RecordPolicy | str | None = None,
        by: str | None = None,
    ) -> PutResult:
        """Create or replace the run-time schedule ``name`` (see the module docstring).
        Refusals write nothing: :class:`InvalidScheduleError` (a bad field, named),
        :class:`DeclaredInCodeError` (the name is the code's)."""
        if name in self.declared:
            raise DeclaredInCodeError(name)
        schedule = build_runtime_schedule(
            name,
            cron=cron,
            timezone=timezone,
            handler=handler,
            handlers=self.handlers,
            args=args,
            on_overlap=on_overlap,
            backfill=backfill,
            max_runtime_ms=max_runtime_ms,
            retry=retry_policy(name, retry),
            exclude=exclude,
            record=record,
        )
        async with self._writing_name(name):
            # First try on what this replica knows (boot's read, its own writes, what it
            # followed): a new name or an edit is then one INSERT and no read. Knowledge that
            # is behind a peer's write loses the race for the version number (the primary
            # key), and the next attempt reads the table. Only "the same definition again" is
            # never believed from memory: a peer may have changed it since.
            newest, read = self.versions.current(name), False
            for _ in range(RECORD_ATTEMPTS):
                live = newest is not None and newest.source == RUNTIME_SOURCE and not newest.deleted
                proposal = definition_record(
                    schedule,
                    TriggerMode.SELF,
                    effective_from=self.clock.now(),
                    version=1 if newest is None else newest.version + 1,
                    recorded_by=self._recorder(by),
                )
                if live and newest is not None and newest.same_definition(proposal):
                    if read:
                        self.apply(newest)  # read elsewhere and not yet applied here: now it is
                        return PutResult(False, False, self.runs(name) or schedule, newest)
                    newest, read = await self._newest(name), True
                    continue
                stored, newest = await self._write(proposal)
                read = True
                if stored is not None:
                    self.apply(stored)
                    logger.info(
                        "schedule: run-time schedule %s  name=%s version=%d cron=%r "
                        "timezone=%s handler=%s effectiveFrom=%s by=%s",
                        "replaced" if live else "created",
                        name,
                        stored.version,
                        stored.cron,
                        stored.timezone,
                        stored.handler,
                        iso_z(stored.effective_from),
                        stored.recorded_by,
                    )
                    return PutResult(not live, True, self.runs(name) or schedule, stored)
        raise StoreUnavailableError(
            f'put_schedule("{name}"): other writers kept taking the next version number — '
            "nothing was written; retry"
        )

    async def delete(self, name: str, *, by: str | None = None) -> DefinitionRecord:
        """Delete the run-time schedule ``name`` on every replica: a tombstone version,
        effective now. :class:`ScheduleNotFoundError` when no run-time schedule has that name
        (never written, or deleted already); :class:`DeclaredInCodeError` for a declared one."""
        if name in self.declared:
            raise DeclaredInCodeError(name)
        async with self._writing_name(name):
            for _ in range(RECORD_ATTEMPTS):
                newest = await self._newest(name)
                if newest is None or newest.source != RUNTIME_SOURCE or newest.deleted:
                    if newest is not None:
                        await self._carry_out(newest)  # a delete read from elsewhere: now
                    raise ScheduleNotFoundError(name)
                tombstone = DefinitionRecord(
                    **{
                        **{key: getattr(newest, key) for key in DefinitionRecord.__slots__},
                        "version": newest.version + 1,
                        "effective_from": self.clock.now(),
                        "recorded_by": self._recorder(by),
                        "deleted": True,
                    }
                )
                stored, _ = await self._write(tombstone)
                if stored is not None:
                    await self._carry_out(stored)
                    logger.info(
                        "schedule: run-time schedule deleted  name=%s version=%d "
                        "effectiveFrom=%s by=%s",
                        name,
                        stored.version,
                        iso_z(stored.effective_from),
                        stored.recorded_by,
                    )
                    return stored
        raise StoreUnavailableError(
            f'delete_schedule("{name}"): other writers kept taking the next version number — '
            "nothing was written; retry"
        )

    def _recorder(self, by: str | None) -> str:
        return self.replica_id if not by else f"{by}@{self.replica_id}"[:200]

    async def _newest(self, name: str) -> DefinitionRecord | None:
        versions = (await self.store.definitions([name])).get(name, [])
        return versions[0] if versions else None

    async def _write(
        self, record: DefinitionRecord
    ) -> tuple[DefinitionRecord | None, DefinitionRecord | None]:
        """Insert ``record``: ``(record, record)`` when it is stored; ``(None, newest)`` when a
        peer wrote that version number first (the caller writes the next after ``newest``,
        read here in the same breath)."""
        if await self.store.add_definitions([record], announce=self.engine.cdc) == 1:
            return record, record  # recorded as given: nothing to read back
        # Nothing recorded by this call — a peer's version holds the number, or a retried
        # statement whose first try had committed ours: the table says which.
        stored = (await self.store.definitions([record.name])).get(record.name, [])
        newest = stored[0] if stored else None
        mine = next((v for v in stored if v.version == record.version), None)
        return (mine if mine == record else None), newest

    # -- following the table --------------------------------------------------------------

    def apply(self, record: DefinitionRecord) -> bool:
        """Take ``record`` — a version written here or read from the table — as its
        schedule's newest and carry it out on the engine; ``False`` when it was known."""
        if not self.versions.add(record):
            return False
        running = self.runs(record.name) is not None
        change = plan_change(
            record,
            running=running,
            declared=record.name in self.declared,
            handlers=self.handlers,
        )
        if change.problem is not None:
            _warn_unknown(record, change.problem)
        if change.kind is ChangeKind.REMOVE:
            self.engine.disarm_written(record.name)
            if self._runtime.pop(record.name, None) is not None:
                self.listing[:] = [
                    s for s in self.listing if not (s.name == record.name and s.source == "runtime")
                ]
        elif change.schedule is not None:  # ADD / REPLACE
            self.engine.arm_written(change.schedule, record.effective_from)
            if self._runtime.pop(record.name, None) is not None:  # an edit: O(listing), rare
                self.listing[:] = [s for s in self.listing if s.name != record.name]
            self.listing.append(change.schedule)  # a new one: O(1), the common write
            self._runtime[record.name] = change.schedule
        self.changes += 1
        return True

    async def _carry_out(self, record: DefinitionRecord) -> bool:
        """:meth:`apply` ``record``; a tombstone newly applied also writes off the firings
        waiting in the deleted schedule's line (:meth:`.Engine.write_off_deleted`)."""
        applied = self.apply(record)
        if applied and record.deleted:
            await self.engine.write_off_deleted(record.name, record.effective_from)
        return applied

    async def follow(self) -> None:
        r"""Every heartbeat of the engine's clock (or at once when :meth:`poke`\ d), read the
        versions that took effect since the newest seen and apply them (see the module
        docstring); until cancelled. A failed read is retried at the next beat."""
        while True:
            async with anyio.create_task_group() as first:

                async def beat() -> None:
                    await self.clock.sleep(self.heartbeat_ms / 1000)
                    first.cancel_scope.cancel()

                async def poked() -> None:
                    await self._poked.wait()
                    first.cancel_scope.cancel()

                first.start_soon(beat)
                first.start_soon(poked)
            self._poked = anyio.Event()
            await self.read_changes()

    def poke(self) -> None:
        """Read the table now, not at the next beat (the seam for change notifications)."""
        self._poked.set()

    async def read_changes(self) -> int:
        """One read of the versions since the newest seen; returns how many were applied."""
        now = self.clock.now()
        # Nothing seen yet: from boot, not from the read's own instant — a beat can be longer
        # than LOOKBACK, and a write made in the first beat would never be read here.
        after = (self._seen or self._booted) - LOOKBACK
        try:
            newest, records = await self.store.definitions_since(after, self._known)
        except StoreUnavailableError as exc:
            logger.warning("scheduler: could not read run-time schedule changes: %s", exc)
            return 0
        applied = 0
        for record in records:
            applied += await self._carry_out(record)
        if newest is not None and (self._seen is None or newest > self._seen):
            self._seen = newest
        if self._seen is None:
            self._seen = now  # everything up to this read was read
        return applied

    def _known(self, name: str, version: int) -> bool:
        """Whether this replica holds version ``version`` of ``name`` or a newer one."""
        current = self.versions.current(name)
        return current is not None and current.version >= version

    def start_from(self, seen: datetime) -> None:
        """Versions up to ``seen`` were read at boot: the first read starts there."""
        self._seen = seen


def newest_effective(known: Mapping[str, Sequence[DefinitionRecord]]) -> datetime | None:
    """The newest ``effective_from`` among ``known`` (where the first read of changes starts)."""
    stamps = [versions[0].effective_from for versions in known.values() if versions]
    return max(stamps) if stamps else None
