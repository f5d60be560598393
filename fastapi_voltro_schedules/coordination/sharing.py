"""Which schedules' overlap rules must read the shared ledger rather than this process alone.

On a multi-instance store (``advisoryLock``, ``cluster``) every schedule's runs may be on any
replica: ``skip`` reads the ``running`` rows, ``queue`` waits in the durable line.

Under ``single`` on a SQLite *file*, several processes of one machine share the ledger
(``uvicorn --workers N``, see ``leadership.py``): only the firer arms the timer, but every
process serves the trigger route. So a ``trigger="external"`` schedule's arrivals land on any
worker (and its in-app fallback fires at the firer): two runs of it can be live in two
processes at once, and its rules must read the file as on a fleet. A ``self`` schedule is fired
by the firer alone (Run now and range backfills are ``manual``: no overlap rule), so it keeps
the in-process rules — no read on the firing path, the herd and the benchmarks unchanged.

The memory ledger belongs to one process: nothing is shared there.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..definition import Schedule

Shared = Callable[["Schedule"], bool]
"""Whether runs of a schedule may live in other processes (its rules read the ledger)."""


def shared_schedules(*, cluster: bool, shared_file: bool, external: Collection[str]) -> Shared:
    """The one place this is decided. ``cluster``: multi-instance coordination;
    ``shared_file``: the store is a SQLite file (``Store.shared_file``); ``external``: the
    names of the ``trigger="external"`` schedules."""
    if cluster:
        return _everyone
    if not shared_file:
        return _no_one
    names = frozenset(external)

    def arrives_anywhere(schedule: Schedule) -> bool:
        return schedule.name in names

    return arrives_anywhere


def _everyone(schedule: Schedule) -> bool:
    return True


def _no_one(schedule: Schedule) -> bool:
    return False
