"""The closed vocabularies of the scheduler.

Every member's value is the exact string stored in the ledger and shown in the API, so
``RunStatus.SUCCEEDED == "succeeded"`` holds and a row can be compared with a literal.
"""

from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    """What happened to one slot of a schedule."""

    QUEUED = "queued"
    """Waiting its turn behind a run in flight (``on_overlap="queue"`` across replicas)."""
    RUNNING = "running"
    """The handler is executing now; ``heartbeat_at`` says it is still alive."""
    SUCCEEDED = "succeeded"
    """The handler returned within ``max_runtime_ms``."""
    FAILED = "failed"
    """The handler raised, the watchdog tripped (``timeout``), the app shut down mid-run
    (``shutdown``) or its replica stopped beating (``abandoned``)."""
    SKIPPED = "skipped"
    """A firing that stood down because a run of the same schedule was live
    (``on_overlap="skip"``)."""
    MISSED = "missed"
    """A slot nobody ran: downtime under a backfill policy, or an external trigger that never
    arrived. Visible evidence of a gap, never a silent hole."""

    @property
    def terminal(self) -> bool:
        """Whether the row will never change again."""
        return self not in (RunStatus.QUEUED, RunStatus.RUNNING)


class Trigger(StrEnum):
    """Where a firing came from."""

    SELF = "self"
    """The in-app timer."""
    EXTERNAL = "external"
    """An outside scheduler POSTed the trigger route."""
    MANUAL = "manual"
    """An operator: Run now, or a range backfill. Bypasses coordination and overlap."""


class TriggerMode(StrEnum):
    """Who keeps time for a schedule (``trigger=`` on a schedule or the app)."""

    SELF = "self"
    """An in-app supervised timer fires the schedule."""
    EXTERNAL = "external"
    """A platform scheduler POSTs ``/_voltro/schedules/{name}/trigger``; no timer is armed."""


class CoordinationOutcome(StrEnum):
    """Why this replica ran a firing."""

    SINGLE = "single"
    """No coordination: single-instance mode."""
    WON_LOCK = "wonLock"
    """Won the claims-row race under ``advisoryLock``."""
    CLUSTER = "cluster"
    """Fired as the schedule's owner under ``cluster``."""
    EXTERNAL = "external"
    """Driven by an outside scheduler; the claim deduped the arrival."""
    NONE = ""
    """Manual runs bypass coordination and record an empty outcome."""


class Coordination(StrEnum):
    """How replicas avoid double-firing (app-wide)."""

    SINGLE = "single"
    """No gate. Correct only when exactly one process runs the schedules."""
    ADVISORY_LOCK = "advisoryLock"
    """A primary-key insert into ``_voltro_schedule_claims`` elects one replica per slot."""
    CLUSTER = "cluster"
    """One owner per schedule through the database."""


class OverlapPolicy(StrEnum):
    """What a firing does while a run of the same schedule is still in flight."""

    SKIP = "skip"
    """Stand down and record a ``skipped`` row."""
    QUEUE = "queue"
    """Wait for the run in flight, then run; never concurrent, ordered by ``scheduled_at``."""
    PARALLEL = "parallel"
    """Start alongside the run in flight."""


class BackfillPolicy(StrEnum):
    """What boot does with slots that passed while no process was running."""

    SKIP = "skip"
    """Run none; record every passed slot ``missed``."""
    LATEST = "latest"
    """Run the newest passed slot once; record the older ones ``missed``."""
    ALL = "all"
    """Run every passed slot, in order, each with its own ``scheduled_at``."""


class RecordPolicy(StrEnum):
    """Which runs of a schedule keep a row of their own in the ledger once they are over."""

    ALL = "all"
    """Every run keeps its row (the default)."""
    FAILURES = "failures"
    """A clock-driven (``self``/``external``) run that succeeded is counted in its hour's
    rollup (``_voltro_schedule_rollups``: how many, total and longest duration) instead: its
    row is deleted once a newer success of the schedule replaces it, so the schedule's newest
    success is always a row. Failures, timeouts, ``skipped``, ``missed`` and ``manual`` runs
    keep their rows; claims elect each slot exactly as under ``all``."""


class Reprocess(StrEnum):
    """Which slots of a range backfill run, by what the ledger already says of each. A slot
    with nothing recorded runs under every policy (that is what a backfill is for); a slot
    whose run is still ``running`` or ``queued`` never runs again (it is in progress)."""

    NONE = "none"
    """Only slots with nothing recorded: a slot with any outcome is left as it is."""
    FAILED = "failed"
    """Also the slots whose work was not done: ``failed`` and ``missed``. A ``skipped`` slot is
    not among them: its own overlap rule stood it down behind a run in flight."""
    ALL = "all"
    """Every slot of the range, ``succeeded`` and ``skipped`` ones too."""


class ExternalMissedPolicy(StrEnum):
    """What happens to occurrences of an external schedule that nobody triggered."""

    RECORD = "record"
    """Record them ``missed`` and count them; do not run them."""
    RECORD_AND_RUN = "record-and-run"
    """Record them and also run them."""
    OFF = "off"
    """Do neither."""


class ChangeStrategy(StrEnum):
    """How a waiting firing learns that the run ledger changed."""

    POLL = "poll"
    """Re-read the ledger every second."""
    CDC = "cdc"
    """LISTEN/NOTIFY on Postgres."""
