"""Prometheus collectors of the scheduler, on an injectable registry.

``SchedulerMetrics(registry)`` registers the collectors on ``registry``; tests pass a fresh
``CollectorRegistry`` so nothing leaks between them. :func:`default_metrics` is the one
instance on prometheus_client's global ``REGISTRY`` (what a ``/metrics`` route exposes) —
created on first use, because registering the same name twice on one registry is an error.
"""

from __future__ import annotations

import threading

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["QueueMetrics", "SchedulerMetrics", "default_metrics", "default_queue_metrics"]


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
