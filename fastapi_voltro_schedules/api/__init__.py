"""HTTP surface: ``schedules_router`` (trigger, runs, inspect, backfill, dashboard)."""

from __future__ import annotations

from .router import schedules_router

__all__ = ["schedules_router"]
