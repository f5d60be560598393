"""Prometheus collectors of the scheduler, on an injectable registry.

``SchedulerMetrics(registry)`` registers the collectors on ``registry``; tests pass a fresh
``CollectorRegistry`` so nothing leaks between them. :func:`default_metrics` is the one
instance on prometheus_client's global ``REGISTRY`` (what ``GET /metrics`` exposes) — created
on first use, because registering the same name twice on one registry is an error. Several
``Scheduling`` objects in one process (tests, an app with two) share it.

What feeds them: run outcomes are observed where they are written, at the store seam
(:class:`~fastapi_voltro_schedules.store.instrumented.InstrumentedStore`); the external missed
counter by its watcher; the next-fire timestamps are read at scrape time from every running
``Scheduling`` (:meth:`SchedulerMetrics.watch`), so they are never stale. See
``docs/operating.md`` for every series and what to alert on.
"""

from __future__ import annotations

import math
import threading
import time
import weakref
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from typing import Protocol

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

__all__ = [
    "NextFireSource",
    "QueueMetrics",
    "RunSeries",
    "SchedulerMetrics",
    "default_metrics",
    "default_queue_metrics",
]

DURATION_BUCKETS: tuple[float, ...] = (
    0.01,
    0.05,
    0.1,
    0.5,
    1.0,
    5.0,
    15.0,
    60.0,
    300.0,
    900.0,
    3600.0,
    math.inf,
)
"""Run durations: from a no-op to an hour-long job."""
LAG_BUCKETS: tuple[float, ...] = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    30.0,
    60.0,
    300.0,
    math.inf,
)
"""Firing lag: a healthy timer fires within milliseconds; seconds mean a busy loop or a slow
claim, minutes a catch-up."""


class NextFireSource(Protocol):
    """Something that knows when its schedules fire next (a running ``Scheduling``)."""

    def next_fire_times(self) -> Mapping[str, datetime]: ...


class _NextFireCollector(Collector):
    """``voltro_schedule_next_fire_timestamp_seconds{name}``, computed at scrape time from the
    watched sources: the value is what the timer is armed for at that moment, never a copy."""

    def __init__(self) -> None:
        self._sources: weakref.WeakSet[NextFireSource] = weakref.WeakSet()
        self._lock = threading.Lock()

    def add(self, source: NextFireSource) -> None:
        with self._lock:
            self._sources.add(source)

    def discard(self, source: NextFireSource) -> None:
        with self._lock:
            self._sources.discard(source)

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "voltro_schedule_next_fire_timestamp_seconds",
            "When each schedule fires next (unix seconds): the armed timer of a self-triggered "
            "schedule, the next occurrence the platform should trigger for an external one.",
            labels=["name"],
        )
        with self._lock:
            sources = list(self._sources)
        earliest: dict[str, float] = {}
        for source in sources:
            for name, at in source.next_fire_times().items():
                stamp = at.timestamp()
                # Two schedulers in one process with one name: the sooner firing is the truth.
                earliest[name] = min(stamp, earliest.get(name, stamp))
        for name in sorted(earliest):
            family.add_metric([name], earliest[name])
        yield family


Recorded = tuple[str, str, str, float | None, float | None]
"""A terminal row for :meth:`RunSeries.recorded`: its schedule's name, status and trigger (the
stored strings), its duration in seconds (``None``: not observed) and, for a success, when it
finished (unix seconds; ``None`` otherwise)."""


class _Histogram:
    """One schedule's histogram: counts per bucket (not cumulative), their sum, its birth."""

    __slots__ = ("counts", "created", "sum")

    def __init__(self, size: int) -> None:
        self.counts = [0] * size
        self.sum = 0.0
        self.created = time.time()


_RUNS_DOC = (
    "Recorded run outcomes (succeeded, failed, skipped, missed…), counted by the replica that "
    "wrote them."
)
_DURATION_DOC = "How long runs took, from fired to finished (succeeded and failed runs)."
_LAG_DOC = "Firing lag of clock-driven runs: fired minus scheduled."
_LAST_SUCCESS_DOC = "When a run of the schedule last succeeded (unix seconds, its finish time)."
_RUNNING_DOC = "Runs of the schedule executing in this process now."


class RunSeries(Collector):
    """The per-schedule run series, kept as plain numbers and exposed at scrape time.

    prometheus_client's labelled children cost a schedule ~80 objects the garbage collector
    tracks (a value object per histogram bucket, a lock, a child per series) — 800,000 at
    10,000 schedules, created in the middle of their first herd and walked by every full
    collection after it. Here a schedule costs a few dict entries and two small lists; the
    exposition is the same (``_total``/``_created`` for the counter, cumulative ``_bucket``,
    ``_count``, ``_sum`` and ``_created`` for the histograms). Updates come from the event loop,
    scrapes from any thread: both under one lock, never contended for long.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[tuple[str, str, str], float] = {}
        self._runs_created: dict[tuple[str, str, str], float] = {}
        self._duration: dict[str, _Histogram] = {}
        self._lag: dict[str, _Histogram] = {}
        self._last_success: dict[str, float] = {}
        self._running: dict[str, float] = {}

    # -- updates (the store seam) ---------------------------------------------------------
    #
    # In batches: the store seam observes a herd's rows together, and one lock and one call
    # per batch instead of five per run took the metrics of a steady 1,000-a-second worker
    # from 12% of its event loop's profile samples to 6%.

    def started(self, names: Iterable[str], lags: Iterable[tuple[str, float]]) -> None:
        """Runs taken on here (``names``, the running gauge up one each) and firing lags
        (``(name, seconds)``, the lag histogram)."""
        with self._lock:
            running = self._running
            for name in names:
                running[name] = running.get(name, 0.0) + 1.0
            self._observe_many(self._lag, LAG_BUCKETS, lags)

    def ended(self, names: Iterable[str]) -> None:
        """Runs over here: the running gauge down one each."""
        with self._lock:
            running = self._running
            for name in names:
                running[name] = running.get(name, 0.0) - 1.0

    def recorded(self, rows: Iterable[Recorded]) -> None:
        """Terminal rows written: counted, and their durations and successes observed."""
        with self._lock:
            runs, created, last_success = self._runs, self._runs_created, self._last_success
            durations: list[tuple[str, float]] = []
            for name, status, trigger, duration, success in rows:
                key = (name, status, trigger)
                value = runs.get(key)
                if value is None:
                    created[key] = time.time()
                    value = 0.0
                runs[key] = value + 1.0
                if duration is not None:
                    durations.append((name, duration))
                if success is not None:
                    last_success[name] = success
            self._observe_many(self._duration, DURATION_BUCKETS, durations)

    @staticmethod
    def _observe_many(
        into: dict[str, _Histogram],
        bounds: tuple[float, ...],
        values: Iterable[tuple[str, float]],
    ) -> None:
        """Under the lock."""
        size = len(bounds)
        for name, value in values:
            histogram = into.get(name)
            if histogram is None:
                histogram = into[name] = _Histogram(size)
            histogram.counts[bisect_left(bounds, value)] += 1  # le: value <= bound
            histogram.sum += value

    # -- the scrape ------------------------------------------------------------------------

    def describe(self) -> Iterator[Metric]:
        """The names, for the registry's duplicate check (no samples)."""
        yield from _Families()

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            runs = self._runs.copy()
            runs_created = self._runs_created.copy()
            duration = _snapshot(self._duration)
            lag = _snapshot(self._lag)
            last_success = self._last_success.copy()
            running = self._running.copy()
        out = _Families()
        for key in sorted(runs):
            out.runs.add_metric(list(key), runs[key], created=runs_created[key])
        _fill_histogram(out.duration, DURATION_BUCKETS, duration)
        _fill_histogram(out.lag, LAG_BUCKETS, lag)
        for family, values in ((out.last_success, last_success), (out.running, running)):
            for name in sorted(values):
                family.add_metric([name], values[name])
        yield from out


class _Families:
    """The five families of :class:`RunSeries`, empty."""

    def __init__(self) -> None:
        self.runs = CounterMetricFamily(
            "voltro_schedule_runs", _RUNS_DOC, labels=["name", "status", "trigger"]
        )
        self.duration = HistogramMetricFamily(
            "voltro_schedule_run_duration_seconds", _DURATION_DOC, labels=["name"]
        )
        self.lag = HistogramMetricFamily("voltro_schedule_lag_seconds", _LAG_DOC, labels=["name"])
        self.last_success = GaugeMetricFamily(
            "voltro_schedule_last_success_timestamp_seconds", _LAST_SUCCESS_DOC, labels=["name"]
        )
        self.running = GaugeMetricFamily("voltro_schedule_running", _RUNNING_DOC, labels=["name"])

    def __iter__(self) -> Iterator[Metric]:
        return iter((self.runs, self.duration, self.lag, self.last_success, self.running))


_LE: dict[tuple[float, ...], list[str]] = {
    bounds: [floatToGoString(b) for b in bounds]  # type: ignore[no-untyped-call]
    for bounds in (DURATION_BUCKETS, LAG_BUCKETS)
}


def _snapshot(histograms: dict[str, _Histogram]) -> dict[str, tuple[list[int], float, float]]:
    return {name: (h.counts.copy(), h.sum, h.created) for name, h in histograms.items()}


def _fill_histogram(
    family: HistogramMetricFamily,
    bounds: tuple[float, ...],
    histograms: dict[str, tuple[list[int], float, float]],
) -> None:
    les = _LE[bounds]
    for name in sorted(histograms):
        counts, total, created = histograms[name]
        cumulative, running = [], 0
        for le, count in zip(les, counts, strict=True):
            running += count
            cumulative.append((le, float(running)))
        family.add_metric([name], cumulative, total)
        family.samples.append(Sample(f"{family.name}_created", {"name": name}, created))


class SchedulerMetrics:
    """The scheduler's collectors."""

    def __init__(self, registry: CollectorRegistry | None = REGISTRY) -> None:
        self.registry = registry
        self.external_missed = Counter(
            "voltro_schedule_external_missed",
            "Occurrences of external schedules that no trigger arrived for, recorded missed "
            "(counted by the replica that recorded them).",
            ["name"],
            registry=registry,
        )
        """``voltro_schedule_external_missed_total{name}``."""
        self.external_fallback = Counter(
            "voltro_schedule_external_fallback",
            'Occurrences of external schedules with fallback="self" that the platform did not '
            "trigger in time, fired by the app itself (counted by the replica that fired them).",
            ["name"],
            registry=registry,
        )
        """``voltro_schedule_external_fallback_total{name}``."""
        self.series = RunSeries()
        """The per-schedule run series: ``voltro_schedule_runs_total{name,status,trigger}``,
        ``voltro_schedule_run_duration_seconds{name}``, ``voltro_schedule_lag_seconds{name}``,
        ``voltro_schedule_last_success_timestamp_seconds{name}``,
        ``voltro_schedule_running{name}``."""
        if registry is not None:
            registry.register(self.series)
        self.store_errors = Counter(
            "voltro_schedule_store_errors",
            "Store calls that failed (database unreachable or refusing): the scheduler fails "
            "closed on them, so nothing fires while this rises.",
            ["operation"],
            registry=registry,
        )
        """``voltro_schedule_store_errors_total{operation}``."""
        self.retries = Counter(
            "voltro_schedule_retries",
            "Failed attempts retried within their slot (RetryPolicy), per schedule: one per "
            "attempt another attempt follows. Final outcomes are voltro_schedule_runs_total "
            "(one per slot, whatever its attempts): attempts = runs + retries.",
            ["name"],
            registry=registry,
        )
        """``voltro_schedule_retries_total{name}``."""
        self._next_fire = _NextFireCollector()
        if registry is not None:
            registry.register(self._next_fire)

    def watch(self, source: NextFireSource) -> None:
        """Expose ``source``'s next firings (until :meth:`unwatch`; held weakly)."""
        self._next_fire.add(source)

    def unwatch(self, source: NextFireSource) -> None:
        self._next_fire.discard(source)


_default: SchedulerMetrics | None = None
_default_lock = threading.Lock()


def default_metrics() -> SchedulerMetrics:
    """The process-wide collectors on the global registry."""
    global _default
    with _default_lock:
        if _default is None:
            _default = SchedulerMetrics(REGISTRY)
        return _default


class QueueMetrics:
    """The ``on_overlap="queue"`` series (SPEC §4): how long the line is, how long firings wait
    in it, and what became of waiters whose replica stopped reporting."""

    def __init__(self, registry: CollectorRegistry | None = REGISTRY) -> None:
        self.queued = Gauge(
            "voltro_schedule_queued",
            "Firings parked in the queue right now, per schedule — reported per replica: sum "
            "it across the fleet at query time.",
            ["name"],
            registry=registry,
        )
        self.wait_seconds = Histogram(
            "voltro_schedule_queue_wait_seconds",
            "How long a queued firing waited before it started (the run-duration histogram "
            "starts at fired_at, so a queue's lateness is invisible there).",
            ["name"],
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600),
            registry=registry,
        )
        self.recoveries = Counter(
            "voltro_schedule_queue_recoveries",
            "Queued occurrences whose replica stopped reporting, by outcome: adopted (a rolling "
            "deploy working) or abandoned (silent past the bound, recorded missed — alert).",
            ["name", "outcome"],
            registry=registry,
        )
        """``voltro_schedule_queue_recoveries_total{name,outcome}``."""


_default_queue: QueueMetrics | None = None


def default_queue_metrics() -> QueueMetrics:
    """The process-wide queue collectors on the global registry."""
    global _default_queue
    with _default_lock:
        if _default_queue is None:
            _default_queue = QueueMetrics(REGISTRY)
        return _default_queue
