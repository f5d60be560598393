"""Waiting on real work: poll a condition until it holds, with a deadline only a hang reaches.

The suite runs on a busy two-core machine (CI's load is about 4), where a database write, a
subprocess's boot or a handler's turn can take seconds instead of milliseconds. A test that
waits on real work therefore never sleeps a fixed time and then asserts, and never gives the
work a deadline it could miss by being slow: it polls the condition it needs, and fails only
after :data:`HANG` seconds — long enough that reaching it means the work is stuck, not late.

Time-dependent *logic* belongs on the injected clock (``ManualClock``); these helpers are for
the real time that I/O, processes and the event loop take underneath it.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio

T = TypeVar("T")

HANG = 60.0
"""Seconds after which a wait on real work is taken for a hang. A verdict never depends on
work finishing sooner than this; it only bounds how long a broken run takes to fail."""


async def wait_until(
    check: Callable[[], Awaitable[Any]] | Callable[[], Any],
    timeout: float = HANG,
    what: str = "",
    interval: float = 0.01,
) -> Any:
    """Call ``check()`` (awaiting it if it returns an awaitable) until it gives something
    truthy, and return that value. Between calls the loop yields in real time: the clock under
    test may be manual, but database I/O and the event loop still take real time.

    Fails with an ``AssertionError`` naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or check}")
        await anyio.sleep(interval)


def wait_for(
    predicate: Callable[[], T],
    timeout: float = HANG,
    interval: float = 0.1,
    what: str = "",
) -> T:
    """Call ``predicate()`` until it returns something truthy, and return that value.

    For sync tests that watch subprocesses, servers and the ledger from outside. Fails with an
    ``AssertionError`` naming ``what`` (and the last value seen) after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {timeout}s waiting for {what or predicate} (last: {value!r})"
            )
        time.sleep(interval)
