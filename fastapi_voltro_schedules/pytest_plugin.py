"""The pytest plugin (entry point ``pytest11: voltro``): fixtures for testing schedules.

Installed with the package; nothing to configure. Fixtures:

* ``voltro_clock`` — a :class:`~fastapi_voltro_schedules.testing.ManualClock` at 2026-01-01 UTC;
* ``voltro_scheduling`` — a factory: ``async with voltro_scheduling([my_schedule]) as s:`` is
  a running scheduler on ``voltro_clock`` and an in-memory SQLite ledger
  (:func:`~fastapi_voltro_schedules.testing.scheduling_for`, which takes the same arguments).

The factory is a plain (sync) fixture returning an async context manager, so it works under
pytest-asyncio and anyio's plugin alike.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

import pytest

from .testing import ManualClock, scheduling_for

if TYPE_CHECKING:
    from .definition import Schedule
    from .scheduling import Scheduling

SchedulingFactory = Callable[..., AbstractAsyncContextManager["Scheduling"]]


@pytest.fixture
def voltro_clock() -> ManualClock:
    """A manual clock at 2026-01-01T00:00:00Z; move it with ``await clock.advance(seconds)``."""
    return ManualClock()


@pytest.fixture
def voltro_scheduling(voltro_clock: ManualClock) -> SchedulingFactory:
    """``async with voltro_scheduling(schedules, **config) as scheduling:`` on ``voltro_clock``."""

    def factory(
        schedules: Iterable[Schedule], **kwargs: Any
    ) -> AbstractAsyncContextManager[Scheduling]:
        kwargs.setdefault("clock", voltro_clock)
        return scheduling_for(schedules, **kwargs)

    return factory
