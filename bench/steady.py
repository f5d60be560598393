"""Steady load: N six-field every-second schedules with no-op handlers, ledger on SQLite.

    python -m bench.steady --n 1000 --seconds 20

Prints achieved/expected (slots that ran ÷ slots that fell in the window), firing lag
(fired_at − scheduled_at) p50/p99/max, and CPU seconds per 1,000 firings.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import sqlite3
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from fastapi_voltro_schedules import (
    ScheduleContext,
    Scheduling,
    SchedulingConfig,
    define_schedule,
)


async def _noop(ctx: ScheduleContext) -> None:
    return None


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def run_ours(n: int, seconds: float, url: str) -> dict[str, float]:
    schedules = [
        define_schedule(name=f"s{i}", cron="* * * * * *", timezone="UTC", handler=_noop)
        for i in range(n)
    ]
    config = SchedulingConfig(database_url=url, run_retention_ms=None)
    scheduling = Scheduling(schedules, config=config)
    async with scheduling.run():
        start = datetime.now(UTC)
        cpu0 = time.process_time()
        await asyncio.sleep(seconds)
        end = datetime.now(UTC)
        cpu = time.process_time() - cpu0
    # Slots fully inside the window: (start, end - 1 s] so every slot had time to finish.
    first = start.replace(microsecond=0) + timedelta(seconds=1)
    last = end.replace(microsecond=0) - timedelta(seconds=1)
    return _measure(url, n, first, last, cpu)


def _measure(url: str, n: int, first: datetime, last: datetime, cpu: float) -> dict[str, float]:
    path = url.split("///", 1)[1]
    slots = int((last - first).total_seconds()) + 1
    with sqlite3.connect(path) as conn:
        rows = conn.execute(
            "SELECT scheduled_at, fired_at, status FROM _voltro_schedule_runs "
            "WHERE scheduled_at >= ? AND scheduled_at <= ?",
            (first.isoformat(timespec="microseconds"), last.isoformat(timespec="microseconds")),
        ).fetchall()
    lags = [
        (datetime.fromisoformat(f) - datetime.fromisoformat(s)).total_seconds() * 1000
        for s, f, st in rows
        if f is not None and st in ("succeeded", "running")
    ]
    ran = sum(1 for _, _, st in rows if st == "succeeded")
    return {
        "expected": n * slots,
        "achieved": ran,
        "ratio": ran / (n * slots) if slots > 0 else float("nan"),
        "lag_p50_ms": percentile(lags, 0.50),
        "lag_p99_ms": percentile(lags, 0.99),
        "lag_max_ms": max(lags) if lags else float("nan"),
        "cpu_s_per_1000": cpu / max(1, len(rows)) * 1000,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "statuses": len({st for _, _, st in rows}),
        "mean_lag_ms": statistics.fmean(lags) if lags else float("nan"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite+aiosqlite:///{Path(tmp) / 'bench.db'}"
        result = asyncio.run(run_ours(args.n, args.seconds, url))
    print(f"steady n={args.n} window={args.seconds}s ledger=sqlite")
    for key, value in result.items():
        print(f"  {key:>16}: {value:,.3f}")


if __name__ == "__main__":
    main()
