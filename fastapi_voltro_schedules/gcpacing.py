"""Full garbage collections, moved out of the moments the scheduler is starting handlers.

CPython runs a full (generation-2) collection when the objects promoted into the oldest
generation since the last one reach a quarter of what it held then. In a FastAPI app that heap
is large (FastAPI, SQLAlchemy, pydantic: ~200,000 objects, 70–100 ms to walk on a 2-core box),
and the collection fires on an allocation — in a scheduler, almost always during a burst of
firings, so every handler of that second starts 70–100 ms late. That was the steady bench's
p99.

The pacer follows CPython's own bookkeeping from ``gc.callbacks`` (what each generation-1
collection promotes, what a full one leaves behind, how many generation-1 collections passed
since) and, at a quiet moment the dispatcher offers — a herd's handlers have all started and
the next instant is further away than a full collection takes — runs the full collection that
is about to come due anyway (the timer and the cluster beat offer more: a wake with nothing due
before a long sleep, and the moment after each beat). It takes no
process-wide decision from the app: thresholds, ``gc.freeze()`` and ``gc.disable()`` stay the
app's (a disabled collector is never run), and it collects about as often as CPython would, only
earlier: at most one burst's worth of promotions before the threshold. ``docs/engine.md``
("Latency and the garbage collector") says what the app may add.
"""

from __future__ import annotations

import gc
import time
from typing import Any

__all__ = ["CollectionPacer", "shared_pacer"]

RISE_DECAY = 0.9
"""How fast the remembered per-burst rise of promotions forgets an old peak (per quiet moment)."""
PAUSE_SAFETY = 2.0
"""A collection is run only when the quiet ahead is this many times the last one's length."""


class CollectionPacer:
    """Tracks CPython's pending promotions and runs a due full collection when told it is quiet.

    One per process (:func:`shared_pacer`): ``gc.callbacks`` is process-wide, and several
    ``Scheduling`` objects in one process share the one collector they would all be pacing.
    The dispatcher of every running engine offers it quiet moments.
    """

    def __init__(self) -> None:
        self._following = False
        self._pending = 0
        """Objects promoted into generation 2 since the last full collection (as CPython counts
        ``long_lived_pending``: promotions, whether or not they died since)."""
        self._total: int | None = None
        """Objects generation 2 held after the last full collection (``long_lived_total``);
        ``None`` until one has been seen: before it the estimate is not in step."""
        self._young = 0
        self._rise = 0
        self._passes = 0
        """The most promotions, and generation-1 collections, seen between two quiet moments
        lately (a burst's worth): what may come before the next one."""
        self._at_last_quiet = (0, 0)
        self._full_seconds = 0.0
        self._full_started = 0.0
        self.collected = 0
        """Full collections this pacer ran (all time)."""

    # -- lifecycle -----------------------------------------------------------------------

    def follow(self) -> None:
        """Follow the collector from now on, for the life of the process (again: nothing).

        The first call runs one full collection, so the estimate starts in step — at boot,
        before anything is armed — instead of at whichever full collection comes first, most
        likely mid-burst. Following goes on once the scheduler stops, so a process that starts
        schedulers again and again (a test suite) pays that collection once: the callback
        costs a function call per collection, and a list of the young objects per
        generation-1 one."""
        if self._following:
            return
        self._following = True
        gc.callbacks.append(self._observe)
        if gc.isenabled():
            gc.collect()

    def close(self) -> None:
        """Stop following (a pacer of a test's own; the process's follows to the end)."""
        if self._observe in gc.callbacks:
            gc.callbacks.remove(self._observe)
        self._following = False
        self._total = None

    # -- CPython's bookkeeping, followed ---------------------------------------------------

    def _observe(self, phase: str, info: dict[str, Any]) -> None:
        generation = info["generation"]
        if generation == 1:
            # A generation-1 collection promotes every survivor of generations 0 and 1.
            if phase == "start":
                self._young = len(gc.get_objects(0)) + len(gc.get_objects(1))
            else:
                survivors = self._young - info["collected"] - info["uncollectable"]
                self._pending += max(0, survivors)
        elif generation == 2:
            if phase == "start":
                self._full_started = time.perf_counter()
            else:
                self._full_seconds = time.perf_counter() - self._full_started
                self._pending = 0
                self._at_last_quiet = (0, 0)
                self._total = len(gc.get_objects(2))

    @property
    def pending(self) -> int:
        return self._pending

    @property
    def threshold(self) -> int | None:
        """Pending promotions at which CPython's next generation-1 collection becomes a full
        one (``None``: not in step yet)."""
        return None if self._total is None else self._total // 4

    # -- the quiet moment ------------------------------------------------------------------

    def quiet(self, seconds: float) -> bool:
        """Nothing of the scheduler's is due for ``seconds``: run the full collection now if
        it would otherwise come due before the next quiet moment. Returns whether it ran."""
        threshold = self.threshold
        if threshold is None:
            return False
        pending, passes = self._pending, gc.get_count()[2]
        self._rise = max(pending - self._at_last_quiet[0], int(self._rise * RISE_DECAY))
        self._passes = max(passes - self._at_last_quiet[1], int(self._passes * RISE_DECAY))
        self._at_last_quiet = (pending, passes)
        gen0_threshold, _, passes_threshold = gc.get_threshold()
        if not gc.isenabled() or gen0_threshold == 0:
            return False  # the app switched automatic collection off: not ours to run
        # CPython's two conditions for a full collection, at a generation-1 collection: more
        # than `threshold[2]` of those since the last full one, and pending >= total / 4 —
        # both true by the next quiet moment, at the pace of the last bursts. Once the second
        # holds already, only passes are missing: a fixed few thousand allocations, which the
        # next herd makes in its first milliseconds whatever the last quiet stretch looked like
        # (a takeover or a boot promotes much and passes little; the herd that follows then
        # collected inside itself).
        due = pending >= threshold
        if not due and (
            pending + self._rise < threshold or passes + self._passes <= passes_threshold
        ):
            return False
        if seconds < self._full_seconds * PAUSE_SAFETY:
            return False
        gc.collect()
        self.collected += 1
        return True


_SHARED = CollectionPacer()


def shared_pacer() -> CollectionPacer:
    """The process's pacer."""
    return _SHARED
