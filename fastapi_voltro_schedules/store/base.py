"""The store interface: everything the engine asks of the ledger, and nothing more.

One narrow seam in the spirit of apscheduler 4's ``abc.py::DataStore``: every method says which
rows it touches, which conditional write it performs and what a conflict means. Exactly-once is
a database constraint (the claims table's primary key), never a read-then-write in Python.

Every method raises :class:`~fastapi_voltro_schedules.errors.StoreUnavailableError` (with the
driver error as ``__cause__``) when the database cannot be reached or refuses the statement: the
engine fails closed on it. Conflicts are not errors: they are the ``False``/empty answers below.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Collection, Hashable, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol, TypeVar

from ..enums import RunStatus, Trigger

# Re-exported: the store's callers import the records from here (they live below the store,
# in ..records, so that pure planning reads them without loading the store).
from ..records import (
    CLOCK_TRIGGERS,
    LIVE_STATUSES,
    TERMINAL_STATUSES,
    ClaimRecord,
    DefinitionRecord,
    Latest,
    OutcomeRecord,
    PauseRecord,
    RollupRecord,
    RowWrite,
    RunOutcome,
    RunRecord,
    new_run_id,
    new_run_ids,
)

UNCHECKED: Any = object()
"""``update_run(expect_heartbeat_at=UNCHECKED)``: do not compare ``heartbeat_at``."""


class LineDecision(Protocol):
    """What :meth:`Store.take_turn` carries out (see ``planning.TurnPlan``)."""

    @property
    def insert(self) -> RunRecord | None: ...
    @property
    def writes(self) -> Sequence[RowWrite]: ...


D = TypeVar("D", bound=LineDecision)


class Store(abc.ABC):
    """The ledger: claims (who fires a slot) and runs (what happened to it)."""

    # -- identity ---------------------------------------------------------------------------

    @property
    @abc.abstractmethod
    def dialect_name(self) -> str:
        """``"memory"``, ``"sqlite"``, ``"postgresql"``, ``"mariadb"`` or ``"mysql"``.

        A MySQL URL reads ``"mysql"`` until the first connection has told MariaDB apart.
        """

    @property
    @abc.abstractmethod
    def supports_multi_instance(self) -> bool:
        """Whether several processes on several hosts can share this store (server databases).

        ``False`` for SQLite and memory: ``advisoryLock``/``cluster`` fall back to ``single``.
        """

    @property
    def shared_file(self) -> bool:
        """Whether this is a SQLite *file*: several processes of one machine may open it
        (``uvicorn --workers N``), though it is no multi-instance store. ``False`` for the
        memory ledger (one process's) and for servers (:attr:`supports_multi_instance`)."""
        return False

    # -- claims -----------------------------------------------------------------------------

    @abc.abstractmethod
    async def claim(self, key: str, replica_id: str, claimed_at: datetime) -> bool:
        """Insert the claims row ``key`` if absent; ``True`` iff this call inserted it.

        The primary key elects the winner: of every caller that ever claims ``key`` (any task,
        process or replica), exactly one gets ``True``; the rest get ``False`` and write
        nothing. The row is committed before this returns. Keys longer than 255 characters
        raise ``ValueError``. Anything but a conflict — connection refused, timeout, missing
        table, permission — raises ``StoreUnavailableError``: callers fail closed.
        """

    @abc.abstractmethod
    async def claim_many(
        self, keys: Sequence[str], replica_id: str, claimed_at: datetime
    ) -> set[str]:
        """:meth:`claim` for many keys at once; returns the keys this call won.

        Same guarantee per key as :meth:`claim` (a key already present, or won concurrently by
        someone else, is not returned), in as few round trips as the dialect allows — one
        statement per chunk of keys. Duplicated keys in ``keys`` count once. Errors as
        :meth:`claim`; on an error no key is reported won (some may be committed: they stay
        claimed, as a crashed winner's would).
        """

    @abc.abstractmethod
    async def claim_and_insert(
        self,
        runs: Sequence[RunRecord],
        replica_id: str,
        claimed_at: datetime,
        *,
        keys: Sequence[str] | None = None,
    ) -> set[str]:
        """Claim each run's slot (its :func:`~..models.claim_key`) and insert the rows of the
        slots this call won, in one transaction per chunk of keys; returns the ids of the runs
        inserted. A claim never lands without its row, nor a row without its claim: a process
        killed halfway leaves neither. Same election per key as :meth:`claim_many`; errors as
        :meth:`claim` (on an error no run is reported inserted).

        ``keys`` (aligned with ``runs``): claim these keys instead of the slots' own — a range
        backfill's re-run of a slot claims the re-run (:func:`~..models.rerun_claim_key`)."""

    @abc.abstractmethod
    async def rowless_claims(
        self, after: datetime, upto: datetime, limit: int
    ) -> tuple[list[tuple[ClaimRecord, str, datetime]], datetime | None]:
        """The slot claims with ``after < claimed_at <= upto`` whose slot has no row at all,
        each with the name and slot its key stands for; and, when ``limit`` claims were read
        (oldest first) and more may follow, the ``claimed_at`` to go on from (else ``None``).
        Read-only: the sweeper's question (:meth:`account_claim` is its answer)."""

    @abc.abstractmethod
    async def account_claim(self, claim: ClaimRecord, row: RunRecord, replica_id: str) -> bool:
        """In one transaction: unless a row of ``row``'s slot exists by now, take ``claim``
        over for ``replica_id`` — iff it is still held as read (holder and instant) — and
        insert ``row``. Whether this call wrote it (of replicas accounting for one claim at
        once, one does)."""

    @abc.abstractmethod
    async def prune_claims(self, older_than: datetime, limit: int) -> int:
        """Delete at most ``limit`` claims rows with ``claimed_at < older_than``, oldest first,
        in small batches (short transactions); returns how many were deleted."""

    @abc.abstractmethod
    async def claim_holder(self, key: str) -> tuple[str, datetime] | None:
        """``(replica_id, claimed_at)`` of the claims row ``key``, or ``None`` if absent."""

    @abc.abstractmethod
    async def touch_claim(self, key: str, replica_id: str, at: datetime) -> bool:
        """Set ``claimed_at = at`` on ``key`` iff ``replica_id`` holds it; ``True`` iff it did.
        A long-held claim (a range backfill's lock) stays fresh this way."""

    @abc.abstractmethod
    async def release_claim(
        self, key: str, *, replica_id: str | None = None, claimed_at: datetime | None = None
    ) -> bool:
        """Delete ``key`` iff it is still as the caller saw it (held by ``replica_id``, claimed
        at ``claimed_at``, whichever are given); ``True`` iff it was deleted. Releasing a lock,
        or taking over a stale one exactly once."""

    # -- runs: writes -----------------------------------------------------------------------

    @abc.abstractmethod
    async def insert_run(self, run: RunRecord) -> None:
        """Insert one run row. A duplicate ``id`` is a bug and raises ``StoreUnavailableError``."""

    @abc.abstractmethod
    async def insert_runs(self, runs: Sequence[RunRecord]) -> None:
        """Insert many run rows in one transaction, one round trip per chunk (a backfill's
        ``missed`` wall)."""

    @abc.abstractmethod
    async def update_run(
        self,
        run_id: str,
        *,
        expect_status: RunStatus | Collection[RunStatus],
        expect_replica_id: str | None = None,
        expect_heartbeat_at: datetime | None = UNCHECKED,
        **values: Any,
    ) -> bool:
        """Conditionally update one run: ``UPDATE … SET values WHERE id = run_id AND status IN
        expect_status [AND replica_id = expect_replica_id] [AND heartbeat_at = expect_heartbeat_at
        (IS NULL for None)]``.

        ``expect_heartbeat_at`` is how "mark a corpse abandoned" compares the beat it judged: a
        run that beat in between is not marked.

        ``True`` iff the row matched (even when ``values`` equal what is stored); ``False``
        means the row is gone or someone else moved it first — nothing was changed. This is
        the compare-and-set behind "finish my run", "take my queued turn" and "mark a corpse
        abandoned once". ``values`` are column names of the runs table (not ``id``); enums are
        stored as their values. An unknown column raises ``TypeError``.
        """

    @abc.abstractmethod
    async def claim_turn(
        self,
        key: str,
        replica_id: str,
        claimed_at: datetime,
        name: str,
        decide: Callable[[list[RunRecord]], D],
    ) -> D | None:
        """:meth:`take_turn` behind the slot's claim, in the same transaction: the claims row
        ``key`` is inserted first; if it was already there, nothing is written and ``None``
        returned (another replica has the slot). A process killed halfway leaves neither the
        claim nor the line's row."""

    @abc.abstractmethod
    async def take_turn(self, name: str, decide: Callable[[list[RunRecord]], D]) -> D:
        """One look at ``name``'s queue line, serialised across every replica.

        In one transaction: take the line's lock (the claims row ``<name>@queue-line``, locked
        by an ``UPDATE`` — on SQLite the write transaction itself), read ``name``'s ``queued``
        and ``running`` rows, call ``decide`` with them (a pure function, see
        :func:`~fastapi_voltro_schedules.planning.plan_turn`), then insert ``plan.insert`` and
        apply ``plan.writes`` — each a conditional update. If a write finds its row moved (a
        beat landed between the read and the write), the transaction is rolled back and the
        look repeated, so the returned plan is exactly what was committed. Two replicas can
        never both be told ``START``.
        """

    @abc.abstractmethod
    async def finish_runs(
        self, outcomes: Sequence[RunOutcome], replica_id: str, *, announce: bool = False
    ) -> None:
        """Write many runs' terminal status (``status``, ``finished_at``, ``error_tag``,
        ``error_message``, ``error_traceback``) in one transaction (one ``executemany``).

        ``announce`` (``change_strategy="cdc"``): also tell every :meth:`listen_changed` of the
        outcomes' schedule names, in the same transaction — delivered at commit, so a listener
        never hears of a write it cannot yet read, and without a round trip of its own. A store
        without change notifications ignores it.

        Each row is written only if it is still ``running`` and owned by ``replica_id`` — the
        same compare-and-set as :meth:`update_run`, per row — so a row another replica already
        marked ``abandoned`` is left alone. Per-row results are not reported (drivers disagree
        on ``rowcount`` for ``executemany``): use :meth:`update_run` when the answer matters.

        An outcome with ``roll_up`` (a success of a ``record="failures"`` schedule's
        clock-driven run) is written with ``error_tag =`` :data:`~..records.ROLLED_UP_TAG`,
        and in the same transaction its schedule's older rows so marked are *folded*: locked,
        deleted, added to their hours' :meth:`rollups` and their slot claims handed to the
        rollup (so no sweep reads them as claims without a row). Each success is then a row
        or a count, never both, and the schedule's newest success stays a row. Folding is
        idempotent: a retried call finds nothing left to fold.
        """

    @abc.abstractmethod
    async def defer_run(self, outcome: RunOutcome, replica_id: str) -> bool:
        """Record a failed attempt that will be retried within its slot: the row stays
        ``running`` and gets ``retry_at = outcome.retry_at``, ``heartbeat_at =
        outcome.finished_at`` and the attempt's ``error_tag`` / ``error_message`` /
        ``error_traceback`` — iff it is still ``running`` and owned by ``replica_id`` (the
        compare-and-set of :meth:`finish_runs`). ``True`` iff the row matched."""

    @abc.abstractmethod
    async def heartbeat(self, run_ids: Sequence[str], at: datetime | None, replica_id: str) -> int:
        """Set ``heartbeat_at = at`` on those of ``run_ids`` that are still ``running`` or
        ``queued`` and owned by ``replica_id``, in one statement; returns how many matched.
        A row another replica adopted, or one already terminal, is left alone.

        ``at=None`` stamps the beat with the database's own clock (:meth:`database_now`), so
        beats from every replica are on one clock, whatever each replica's wall clock says."""

    @abc.abstractmethod
    async def database_now(self) -> datetime:
        """The database server's clock, aware UTC (microseconds where the server has them).

        One clock for every replica: liveness judged against it cannot be broken by one
        replica's wall-clock step. SQLite's is the local clock (its ledger is on one host)."""

    @abc.abstractmethod
    async def sweep_runs(self, finished_before: datetime, limit: int) -> int:
        """Delete at most ``limit`` terminal runs with ``finished_at < finished_before``, oldest
        first, in small batches; returns how many. Never touches ``queued`` or ``running`` rows
        (nor terminal rows without ``finished_at``)."""

    @abc.abstractmethod
    async def sweep_rollups(self, before: datetime, limit: int) -> int:
        """Delete at most ``limit`` rollup rows of the hours that began before ``before``,
        oldest first, in small batches; returns how many (retention, beside
        :meth:`sweep_runs`)."""

    # -- runs: reads ------------------------------------------------------------------------

    @abc.abstractmethod
    async def rollups(
        self, names: Collection[str] | None, first: datetime, last: datetime, limit: int = 1000
    ) -> list[RollupRecord]:
        """The hourly success counts (``record="failures"``) of ``names`` (every schedule when
        ``None``) whose hour begins in ``[first, last]``, newest hour first (ties by name), at
        most ``limit``. The successes counted there have no row of their own."""

    @abc.abstractmethod
    async def get_run(self, run_id: str) -> RunRecord | None:
        """The run with this id, or ``None``."""

    @abc.abstractmethod
    async def list_runs(
        self,
        name: str | None,
        limit: int = 100,
        before: datetime | None = None,
        *,
        before_id: str | None = None,
        statuses: Collection[RunStatus] | None = None,
    ) -> list[RunRecord]:
        """Runs of ``name`` (every schedule when ``None``), newest ``scheduled_at`` first (ties
        by id, newest first), at most ``limit``, only in ``statuses`` when given.

        Paging: only rows *after* the cursor in that order — ``scheduled_at < before``, or with
        ``before_id`` also ``scheduled_at == before and id < before_id`` (a keyset cursor: pass
        the last row's ``scheduled_at`` and ``id``; no row is skipped or repeated when many
        share one instant)."""

    @abc.abstractmethod
    async def runs_between(
        self,
        after: datetime,
        until: datetime,
        limit: int = 1000,
        cursor: tuple[datetime, str] | None = None,
    ) -> list[RunRecord]:
        """Every schedule's runs with ``after < scheduled_at <= until``, oldest first (ties by
        id), at most ``limit``; pass the last row's ``(scheduled_at, id)`` as ``cursor`` for
        the next page. Keyset paging on both columns: rows sharing one ``scheduled_at`` (a
        herd, a duplicate) are never split or skipped at a page boundary — what an audit of
        the ledger needs. Read through ``ix_voltro_runs_scheduled``."""

    @abc.abstractmethod
    async def run_for_slot(
        self, name: str, scheduled_at: datetime, trigger: Trigger
    ) -> RunRecord | None:
        """The first run recorded for one slot: ``name``'s row with exactly this
        ``scheduled_at`` and ``trigger`` (any status), or ``None`` if there is none yet.

        "First" is the smallest ``id`` (ids sort by creation time). A claimed slot normally
        holds one such row; an external slot the missed policy ran holds two (``missed``, then
        the run), and the run — inserted first — is the one returned. Committed rows only: the
        winner of a claim may not have inserted its row yet, so a caller that lost the claim
        polls this briefly. A plain read, no lock taken.
        """

    @abc.abstractmethod
    async def succeeded_slots(self, name: str, after: datetime, until: datetime) -> set[datetime]:
        """The ``scheduled_at`` of ``name``'s ``succeeded`` runs in ``(after, until]``, any
        trigger — what an operator is about to run again with a range backfill."""

    @abc.abstractmethod
    async def last_run(self, name: str) -> RunRecord | None:
        """The run with the newest ``scheduled_at`` among ``name``'s clock-driven rows (trigger
        ``self`` or ``external``, any status); ``manual`` rows never count. ``None`` if none."""

    @abc.abstractmethod
    async def last_runs(self, names: Collection[str]) -> dict[str, RunRecord]:
        """:meth:`last_run` for many schedules in one query; names without a row are absent."""

    @abc.abstractmethod
    async def latest(self, names: Collection[str]) -> Latest:
        """What a listing shows of each name, in one transaction per chunk of names: its run
        with the newest ``scheduled_at`` (then the newest ``id``) of **any** trigger — a Run
        now or a range backfill included: the first row of its runs list —, its
        :meth:`last_run` (one statement reads both, a row once when they are the same) and its
        :meth:`outcomes` entry."""

    @abc.abstractmethod
    async def outcomes(self, names: Collection[str]) -> dict[str, OutcomeRecord]:
        """Each name's newest outcome (``_voltro_schedule_state``: its terminal run with the
        newest ``scheduled_at``, then id), kept current by every write that makes a row
        terminal, in that write's transaction. A primary-key read per name, whatever the
        ledger's size; names that never finished a run are absent."""

    @abc.abstractmethod
    async def names_in_status(
        self,
        statuses: Collection[RunStatus],
        *,
        after: str | None,
        prefix: str | None,
        limit: int,
    ) -> list[str]:
        """Up to ``limit`` names whose newest outcome (:meth:`outcomes`) is one of
        ``statuses``, in the database's name order, after ``after``, starting with
        ``prefix`` (matched literally). Served by the state table's ``(last_status, name)``
        index; the names of schedules that no longer exist may be among them."""

    @abc.abstractmethod
    async def live_runs(
        self, name: str | Collection[str], statuses: Collection[RunStatus] = (RunStatus.RUNNING,)
    ) -> list[RunRecord]:
        """Rows of ``name`` (or of several schedules, in one query — the herd's overlap check)
        in ``statuses`` on any replica, oldest ``scheduled_at`` first.

        Liveness (the heartbeat window) is the caller's judgement, not the store's."""

    @abc.abstractmethod
    async def silent_runs(
        self,
        names: Collection[str],
        silent_for: timedelta,
        statuses: Collection[RunStatus] = (RunStatus.RUNNING,),
    ) -> list[RunRecord]:
        """Rows of ``names`` in ``statuses`` whose newest sign of life (``heartbeat_at``,
        ``fired_at``) is older than ``database_now() - silent_for``, or that have none —
        the corpses, judged by the database's clock in one transaction, so no replica's wall
        clock takes part. Oldest ``scheduled_at`` first. Pair it with heartbeats written with
        ``at=None``: a beat stamped by a replica's own (stepped) clock is judged as stamped."""

    @abc.abstractmethod
    async def queued_runs(self, name: str) -> list[RunRecord]:
        """``name``'s ``queued`` rows, oldest ``scheduled_at`` first (ties by id): the queue."""

    @abc.abstractmethod
    async def queued_names(self) -> dict[str, list[RunRecord]]:
        """Every ``queued`` row in the table, by schedule name (boot write-off of names no
        longer declared)."""

    # -- change notification ---------------------------------------------------------------

    async def notify_changed(self, names: Collection[str]) -> None:  # noqa: B027 - optional
        """Tell other replicas' waiters that ``names``' runs changed (a terminal write). A
        hint only (Postgres ``NOTIFY``); the default does nothing and waiters poll."""

    async def listen_changed(
        self,
        on_change: Callable[[str], None],
        *,
        on_definition: Callable[[str], None] | None = None,
        task_status: Any = None,
    ) -> None:
        """Call ``on_change(name)`` for each :meth:`notify_changed` (and each announced
        :meth:`finish_runs`) from any replica until cancelled, on a dedicated connection; and
        ``on_definition(name)`` for each version an announced :meth:`add_definitions` inserted,
        on the same connection. Raises ``NotImplementedError`` where the store has no
        notification channel (everything but Postgres): waiters then poll."""
        raise NotImplementedError(f"{self.dialect_name} has no change notifications")

    # -- upkeep -----------------------------------------------------------------------------

    def change_stamp(self) -> tuple[float, Hashable] | None:
        """A token that differs whenever the database may have been written since it was
        taken, and when it was last written (unix seconds) — without asking the database
        (SQLite files: the file's and its log's modification time, size and inode, one
        ``stat`` each). ``None``: this store cannot tell so cheaply; ask the database."""
        return None

    async def checkpoint(self) -> None:  # noqa: B027 - optional
        """Fold the write-ahead log into the database file now, at a quiet moment the engine
        offers (a SQLite file: ``PRAGMA wal_checkpoint(PASSIVE)``, which waits on no writer
        and no reader). The default does nothing: the servers checkpoint on their own."""

    # -- pauses -----------------------------------------------------------------------------

    @abc.abstractmethod
    async def pause(
        self, name: str, *, paused_at: datetime, paused_by: str, reason: str | None
    ) -> PauseRecord:
        """Mark ``name`` paused; returns the row as stored.

        Idempotent: a schedule already paused keeps its first ``paused_at``/``paused_by``/
        ``reason`` (two operators pausing at once both get the one row). A resumed schedule's
        row is reused: paused again with these values and ``resumed_*`` cleared. Committed
        before this returns."""

    @abc.abstractmethod
    async def resume(
        self, name: str, *, resumed_at: datetime, resumed_by: str
    ) -> PauseRecord | None:
        """Set ``resumed_at``/``resumed_by`` on ``name``'s row iff it is paused (one conditional
        write: of concurrent resumes one stamps it). Returns the row as stored afterwards —
        ``None`` when the schedule was never paused; an already-resumed row is returned
        unchanged."""

    @abc.abstractmethod
    async def pause_all(
        self,
        *,
        paused_at: datetime,
        paused_by: str,
        reason: str | None,
        until: datetime | None,
    ) -> PauseRecord:
        """Pause every schedule (the row :data:`~..records.ALL_SCHEDULES`), until resumed or —
        ``until`` — until that instant (written as the pause's end: ``resumed_at = until``,
        ``resumed_by =`` :data:`~..records.RESUMES_BY_ITSELF`); returns the row as stored.

        A fleet pause in force at ``paused_at`` keeps its ``paused_at``/``paused_by``/
        ``reason`` and takes the new ``until`` (its window extended, shortened or made
        open-ended), its span too; otherwise a new pause opens (the row reused), with its span.
        Conditional writes in one transaction: operators pausing at once end on one row."""

    @abc.abstractmethod
    async def resume_all(self, *, resumed_at: datetime, resumed_by: str) -> PauseRecord | None:
        """End the fleet pause at ``resumed_at`` iff it is in force then (its row and its open
        span, one transaction). Returns the row as stored afterwards — ``None`` when every
        schedule was never paused at once; one already over is returned unchanged."""

    @abc.abstractmethod
    async def pauses(self) -> list[PauseRecord]:
        """Every row of the pauses table (one per schedule ever paused: a small table)."""

    @abc.abstractmethod
    async def pause_spans(self) -> list[PauseRecord]:
        """Every paused span ever recorded, ``(name, paused_at)`` order — each pause's, not
        only the latest (an open span has no ``resumed_at``). For the audit: read rarely."""

    # -- definition versions ----------------------------------------------------------------

    @abc.abstractmethod
    async def definitions(
        self, names: Collection[str] | None = None
    ) -> dict[str, list[DefinitionRecord]]:
        """The recorded versions of each schedule of ``names`` (every schedule when ``None``),
        newest first; a schedule with none is absent."""

    @abc.abstractmethod
    async def definitions_since(
        self, after: datetime, known: Callable[[str, int], bool] | None = None
    ) -> tuple[datetime | None, list[DefinitionRecord]]:
        """The versions whose ``effective_from`` is after ``after`` (what a replica reads to
        learn of run-time schedules written elsewhere; the caller overlaps its reads, since a
        version may commit a little after the instant it is stamped with): the newest
        ``effective_from`` among them (``None``: none), and each one ``known(name, version)``
        does not claim, oldest first. A follower knows most of what its overlap reads again —
        after 10,000 writes, every beat for a minute — so those rows are compared by key and
        never read whole."""

    @abc.abstractmethod
    async def add_definitions(
        self, records: Sequence[DefinitionRecord], *, announce: bool = False
    ) -> int:
        """Insert each version unless its ``(name, version)`` is already recorded — then the
        stored row stays and this one is dropped (a peer recorded that version first: read
        back with :meth:`definitions`). Returns how many of ``records`` this call recorded
        (one record written: ``1`` means it is stored as given, with no read back). Committed
        before this returns, in chunks: a call that fails partway may have recorded some of
        ``records`` (calling again records the rest), and a replica recording the same
        versions concurrently waits only for the chunk it meets, not for a peer's whole
        write.

        ``announce`` (``change_strategy="cdc"``, a run-time write): also tell every
        :meth:`listen_changed`'s ``on_definition`` the name of each version actually inserted,
        in the same transaction — delivered at commit. A store without change notifications
        ignores it."""

    # -- lifecycle --------------------------------------------------------------------------

    @abc.abstractmethod
    async def ping(self) -> None:
        """Round-trip the database; raise ``StoreUnavailableError`` if it does not answer."""

    @abc.abstractmethod
    async def create_schema(self) -> None:
        """Create the ledger tables if missing (``voltro_metadata.create_all``). The memory
        store and tests use it; server databases go through ``voltro migrate``."""

    @abc.abstractmethod
    async def dispose(self) -> None:
        """Close the pool's connections (only when the store created its engine)."""


__all__ = [
    "CLOCK_TRIGGERS",
    "LIVE_STATUSES",
    "TERMINAL_STATUSES",
    "UNCHECKED",
    "ClaimRecord",
    "D",
    "DefinitionRecord",
    "Latest",
    "LineDecision",
    "OutcomeRecord",
    "PauseRecord",
    "RollupRecord",
    "RowWrite",
    "RunOutcome",
    "RunRecord",
    "Store",
    "new_run_id",
    "new_run_ids",
]
