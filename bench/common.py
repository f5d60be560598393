"""What every worker shares: the worker protocol, the clock arithmetic and the measurements.

Standard library only: the APScheduler workers import this module from their own venvs, where
our package is not installed.

A worker is ``python -m bench.<system> <workload> '<json params>'``. It prints exactly one line
``BENCH_RESULT {json}`` on stdout; everything else it says goes to stderr.
"""

from __future__ import annotations

import json
import math
import os
import resource
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

RESULT_PREFIX = "BENCH_RESULT "
GRACE_SECONDS = 2.0
"""After a steady window closes the scheduler keeps running this long, so slots from the last
second of the window get the same chance as the others; slots after the window are ignored."""


def params_from_argv() -> tuple[str, dict[str, Any]]:
    workload, raw = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "{}"
    return workload, json.loads(raw)


def emit(result: dict[str, Any]) -> None:
    sys.stdout.write(RESULT_PREFIX + json.dumps(result) + "\n")
    sys.stdout.flush()


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile; None when there is nothing to rank."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def cpu_seconds() -> float:
    """User + system CPU of this process, every thread included (aiosqlite's too)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def current_rss_mb() -> float:
    try:
        with open(f"/proc/{os.getpid()}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return peak_rss_mb()


async def sleep_until(epoch: float) -> None:
    import asyncio

    while (remaining := epoch - time.time()) > 0:
        await asyncio.sleep(min(remaining, 1.0))


def ceil_second(epoch: float) -> float:
    return float(math.floor(epoch) + 1)


@dataclass
class Firings:
    """Handler starts, as ``(schedule key, slot epoch, start epoch)``: the one record every
    system keeps the same way, so achieved and lag mean the same thing in every column."""

    starts: list[tuple[str, float, float]] = field(default_factory=list)

    def record(self, key: str, slot: float) -> None:
        self.starts.append((key, slot, time.time()))

    def window(self, first: float, last: float) -> list[tuple[str, float, float]]:
        # slots are whole seconds; a 1 ms tolerance absorbs float rounding of the datetimes
        return [s for s in self.starts if first - 0.001 <= s[1] <= last + 0.001]


def steady_figures(
    firings: Firings, n: int, first: float, last: float, cpu: float, fired_total: int
) -> dict[str, Any]:
    """Achieved, lag and CPU for slots ``first..last`` (whole seconds, inclusive)."""
    slots = round(last - first) + 1
    inside = firings.window(first, last)
    per_slot = Counter((key, round(slot)) for key, slot, _ in inside)
    lags = [(start - slot) * 1000 for _, slot, start in inside]
    expected = n * max(slots, 0)
    return {
        "expected": expected,
        "achieved": len(per_slot),
        "achieved_ratio": len(per_slot) / expected if expected else None,
        "duplicates": sum(c - 1 for c in per_slot.values()),
        "lag_p50_ms": percentile(lags, 0.50),
        "lag_p99_ms": percentile(lags, 0.99),
        "lag_max_ms": max(lags) if lags else None,
        "cpu_s": cpu,
        "fired_total": fired_total,
        "cpu_s_per_1000": cpu / fired_total * 1000 if fired_total else None,
        "peak_rss_mb": peak_rss_mb(),
    }


async def steady_window(armed: float, seconds: float) -> tuple[float, float, float]:
    """Wait out a steady window: slots are the ``seconds`` whole seconds after ``armed``, and
    the scheduler keeps running ``GRACE_SECONDS`` past the last. Returns the first and last
    slot and the process CPU spent from now to the end."""
    cpu0 = cpu_seconds()
    first = ceil_second(armed)
    last = first + seconds - 1
    await sleep_until(last + GRACE_SECONDS)
    return first, last, cpu_seconds() - cpu0


async def wait_herd(firings: Firings, at: float, n: int, p: dict[str, Any]) -> None:
    """Until all ``n`` schedules started here, or nothing new started for ``p["quiet_s"]``
    (other replicas may hold the rest), or ``p["deadline_s"]`` after the instant."""
    import asyncio

    deadline_s, quiet_s = p.get("deadline_s", 60.0), p.get("quiet_s", 3.0)
    await sleep_until(at + 0.5)
    seen, quiet_since = -1, time.time()
    while time.time() < at + deadline_s and len(firings.starts) < n:
        if len(firings.starts) != seen:
            seen, quiet_since = len(firings.starts), time.time()
        elif time.time() - quiet_since > quiet_s:
            break
        await asyncio.sleep(0.2)


def herd_figures(firings: Firings, n: int, instant: float) -> dict[str, Any]:
    inside = firings.window(instant, instant)
    per_key = Counter(key for key, _, _ in inside)
    lags = [(start - instant) * 1000 for _, _, start in inside]
    return {
        "n": n,
        "started": len(per_key),
        "missed": n - len(per_key),
        "duplicates": sum(c - 1 for c in per_key.values()),
        "lags_ms": lags,
        "keys": list(per_key),
        "peak_rss_mb": peak_rss_mb(),
    }


def idle_window(armed: float, next_fire: float, seconds: float) -> tuple[float, float]:
    """A stretch of ``seconds`` after arming that no firing falls in (shortened if one would)."""
    start = armed + 1.0
    return start, min(start + seconds, next_fire - 0.5)


async def measure_idle(start: float, end: float) -> dict[str, Any]:
    await sleep_until(start)
    cpu0, t0 = cpu_seconds(), time.time()
    await sleep_until(end)
    cpu, wall = cpu_seconds() - cpu0, time.time() - t0
    return {
        "window_s": wall,
        "cpu_pct": cpu / wall * 100 if wall > 0 else None,
        "rss_mb": current_rss_mb(),
        "peak_rss_mb": peak_rss_mb(),
    }


def next_minute_slot(second: int, after: float) -> float:
    """The first ``second`` of a minute strictly after ``after``."""
    base = math.floor(after / 60) * 60 + second
    while base <= after:
        base += 60
    return float(base)


def boot_figures(
    launch: float, imported: float, schedules_start: float, defined: float, armed: float
) -> dict[str, Any]:
    """The boot workload's figures, the same split for every system."""
    return {
        "boot_s": armed - launch,
        "interpreter_and_imports_s": schedules_start - launch,
        "imports_s": schedules_start - imported,
        "define_s": defined - schedules_start,
        "arm_s": armed - defined,
        "rss_mb": current_rss_mb(),
    }


def worker_main(workloads: dict[str, Any]) -> None:
    """A worker's entry point: run the workload named on the command line, print its JSON."""
    import asyncio

    workload, params = params_from_argv()
    emit(asyncio.run(workloads[workload](params)))
