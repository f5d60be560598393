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
import weakref
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Protocol

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = [
    "NextFireSource",
    "QueueMetrics",
    "SchedulerMetrics",
    "default_metrics",
    "default_queue_metrics",
]

DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, math.inf)
"""Run durations: from a no-op to an hour-long job."""
LAG_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 30.0, 60.0, 300.0, math.inf)
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
            "Occurrences of external schedules with fallback=\"self\" that the platform did not "
            "trigger in time, fired by the app itself (counted by the replica that fired them).",
            ["name"],
            registry=registry,
        )
        """``voltro_schedule_external_fallback_total{name}``."""
        self.runs = Counter(
            "voltro_schedule_runs",
            "Recorded run outcomes (succeeded, failed, skipped, missed…), counted by the "
            "replica that wrote them.",
            ["name", "status", "trigger"],
            registry=registry,
        )
        """``voltro_schedule_runs_total{name,status,trigger}``."""
        self.run_duration = Histogram(
            "voltro_schedule_run_duration_seconds",
            "How long runs took, from fired to finished (succeeded and failed runs).",
            ["name"],
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        """``voltro_schedule_run_duration_seconds{name}``."""
        self.lag = Histogram(
            "voltro_schedule_lag_seconds",
            "Firing lag of clock-driven runs: fired minus scheduled.",
            ["name"],
            buckets=LAG_BUCKETS,
            registry=registry,
        )
        """``voltro_schedule_lag_seconds{name}``."""
        self.last_success = Gauge(
            "voltro_schedule_last_success_timestamp_seconds",
            "When a run of the schedule last succeeded (unix seconds, its finish time).",
            ["name"],
            registry=registry,
        )
        """``voltro_schedule_last_success_timestamp_seconds{name}``."""
        self.running = Gauge(
            "voltro_schedule_running",
            "Runs of the schedule executing in this process now.",
            ["name"],
            registry=registry,
        )
        """``voltro_schedule_running{name}``."""
        self.store_errors = Counter(
            "voltro_schedule_store_errors",
            "Store calls that failed (database unreachable or refusing): the scheduler fails "
            "closed on them, so nothing fires while this rises.",
            ["operation"],
            registry=registry,
        )
        """``voltro_schedule_store_errors_total{operation}``."""
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
