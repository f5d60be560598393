"""This process's live runs, per schedule: the in-process half of every overlap rule."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

import anyio

if TYPE_CHECKING:
    from ..store import RunRecord


class Deciding(NamedTuple):
    """One admission's rows being written: set once they are in flight here or not."""

    event: anyio.Event
    names: list[str]


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
    deciding: dict[str, Deciding] = field(default_factory=dict)
    """Skip schedules whose run's row is being written here, its claim not answered yet: a
    firing of the same schedule waits for the answer before it judges overlap (the row may
    be visible already, yet lose its claim)."""
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

    def deciding_on(self, names: list[str]) -> Deciding:
        """``names``' runs are being written (see :attr:`deciding`); tell :meth:`decided`
        once they are in flight or not."""
        decision = Deciding(anyio.Event(), names)
        deciding = self.deciding
        for name in names:
            deciding[name] = decision
        return decision

    def decided(self, decision: Deciding) -> None:
        deciding = self.deciding
        for name in decision.names:
            if deciding.get(name) is decision:  # not a later firing's, begun meanwhile
                del deciding[name]
        decision.event.set()

    async def wait_decided(self, name: str) -> None:
        """Until no run of ``name`` is being written here."""
        while (decision := self.deciding.get(name)) is not None:
            await decision.event.wait()

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
