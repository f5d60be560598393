"""Prometheus collectors of the scheduler, on an injectable registry.

``SchedulerMetrics(registry)`` registers the collectors on ``registry``; tests pass a fresh
``CollectorRegistry`` so nothing leaks between them. :func:`default_metrics` is the one
instance on prometheus_client's global ``REGISTRY`` (what a ``/metrics`` route exposes) —
created on first use, because registering the same name twice on one registry is an error.
"""

from __future__ import annotations

import threading

from prometheus_client import REGISTRY, CollectorRegistry, Counter

__all__ = ["SchedulerMetrics", "default_metrics"]


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
