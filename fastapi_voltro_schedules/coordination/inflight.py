"""This process's live runs, per schedule: the in-process half of every overlap rule."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import anyio

if TYPE_CHECKING:
    from ..store import RunRecord


@dataclass(slots=True)
class InFlight:
    runs: dict[str, dict[str, RunRecord]] = field(default_factory=lambda: defaultdict(dict))
    count: int = 0
    idle: anyio.Event = field(default_factory=anyio.Event)
    finishing: set[str] = field(default_factory=set)
    """Runs whose handler is over but whose terminal write is not recorded yet: the overlap
    rule looks at handlers, so such a row read ``running`` is not a live run."""
    on_end: list[Callable[[str], None]] = field(default_factory=list)
    """Told the schedule's name whenever one of its runs here ends (the lines wake on it)."""
    retrying: set[str] = field(default_factory=set)
    """Runs here waiting between two attempts (``RetryPolicy``): they hold their schedule
    like the attempt they follow, but no handler runs — shutdown does not wait for them (the
    pending retry stays in the ledger for another replica)."""

    def add(self, run: RunRecord) -> None:
        self.runs[run.name][run.id] = run
        self.count += 1

    def remove(self, run: RunRecord) -> None:
        if self.runs[run.name].pop(run.id, None) is not None:
            self.count -= 1
            if self.settled:
                self.idle.set()
                self.idle = anyio.Event()
        for listener in self.on_end:
            listener(run.name)

    @property
    def settled(self) -> bool:
        """Whether no handler runs here (what is left waits for a retry): shutdown's drain is
        over."""
        return self.count <= len(self.retrying)

    def held(self, name: str) -> RunRecord | None:
        """A run of ``name`` in flight here, if any."""
        return next(iter(self.runs[name].values()), None)

    def ids(self) -> set[str]:
        return {run_id for runs in self.runs.values() for run_id in runs}


class Wakeups:
    """Per schedule, an event waiters sleep on: set when the run ledger of that schedule
    changed here (a terminal write recorded) or elsewhere (a ``NOTIFY`` under cdc)."""

    def __init__(self) -> None:
        self._events: dict[str, anyio.Event] = {}

    def event(self, name: str) -> anyio.Event:
        event = self._events.get(name)
        if event is None:
            event = self._events[name] = anyio.Event()
        return event

    def notify(self, name: str) -> None:
        event = self._events.pop(name, None)
        if event is not None:
            event.set()
