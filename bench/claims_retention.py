"""Claims retention at 1,000 firings a second: does the claims table level off?

    python -m bench.claims_retention [--seconds 600] [--n 1000] [--retention-s 60]
        [--sample-s 10] [--no-sqlite] [--postgres-url URL] [--json FILE]

Each store runs in a worker process of its own (``python -m bench.claims_retention worker
'<json>'``): our engine, ``n`` schedules firing every second, claim and run retention both
``--retention-s`` (the config's floor needs a short skew and heartbeat for that: 20 s and 10 s),
for ``--seconds``. Every ``--sample-s`` a separate connection counts the claims and runs rows;
the worker also follows every retention sweep (rows deleted, time taken, whether it fell behind).

- **Postgres** (``--postgres-url``): ``n`` ``self`` schedules under ``advisoryLock``, the default
  there — every firing claims its slot, the case issue 29 item 10 is about.
- **SQLite** (a fresh file; ``--sqlite-mode timer``: ``n`` ``self`` schedules, the ledger's
  retention alone): coordination is ``single``, where the timer claims nothing; an
  external arrival is claimed on every store, so the ``n`` schedules are ``trigger="external"``
  and a driver delivers one arrival per schedule at every whole second through the engine's
  external admission (``Engine.fire(FireRequest(schedule, slot, Why.ARRIVAL))``: the claim, the run
  row, the handler — what the trigger route calls once it has snapped an arrival; HTTP and the
  snap are left out). External crons are minute-granular, so those arrivals are off-cadence:
  admission does not look, and 1,000 a second is what 60,000 minutely schedules would send.

The verdict compares the claims table after the first retention window (the samples from
``retention + 2 × sweep interval`` on, when the first expired rows have been pruned) with its
size at the end and its peak: flat when those samples stay within 25% of their median and the
last is no more than 15% above the first. Also printed: firings per second achieved, lag
(handler start − slot) p50/p99/max, the worker's CPU (and the Postgres server's, read from
``/proc``), and the sweeps.

**``--postgres-url`` drops nothing but empties our tables there** (migrated to head first, and
left empty at the end): point it at a database of its own (``…/voltro_bench``), never at one a
test run is using.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common import RESULT_PREFIX, Firings, cpu_seconds, emit, percentile, sleep_until

SKEW_MS = 20_000
HEARTBEAT_MS = 10_000
WARM_UP_S = 10
"""Lag is also given without the first seconds after arming (boot's own work lands there)."""
"""With these the config's floor for the claim retention is max(2 × 20 s + 2 s, 3 × 10 s) = 42 s,
under the 60 s the bench uses."""


# -- the worker ------------------------------------------------------------------------------


def _server_cpu_seconds() -> float | None:
    """User + system CPU of every ``postgres`` process on this machine (None: no /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return None
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                raw = stat.read()
        except OSError:
            continue
        name = raw[raw.index("(") + 1 : raw.rindex(")")]
        if name != "postgres":
            continue
        fields = raw[raw.rindex(")") + 2 :].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / tick


async def _count(url: str) -> tuple[int, dict[str, int]]:
    """Claims rows, and run rows per status."""
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine
    from sqlalchemy.pool import NullPool

    from fastapi_voltro_schedules.models import CLAIMS_TABLE, RUNS_TABLE

    engine = create_async_engine(url, poolclass=NullPool)
    try:
        async with engine.connect() as conn:
            claims = (await conn.execute(text(f"SELECT count(*) FROM {CLAIMS_TABLE}"))).scalar()
            runs = (
                await conn.execute(text(f"SELECT status, count(*) FROM {RUNS_TABLE} GROUP BY 1"))
            ).all()
    finally:
        await engine.dispose()
    return int(claims or 0), {str(status): int(count) for status, count in runs}


async def _prepare(url: str) -> None:
    """Our tables at head, every one of them empty (the definitions and pauses too: a
    schedule's recorded definition would make boot catch up on the slots since the last run)."""
    from sqlalchemy import delete
    from sqlalchemy.ext.asyncio import create_async_engine
    from sqlalchemy.pool import NullPool

    from fastapi_voltro_schedules.migrations import upgrade_to_head
    from fastapi_voltro_schedules.models import voltro_metadata

    engine = create_async_engine(url, poolclass=NullPool)
    try:
        await upgrade_to_head(engine)
        async with engine.begin() as conn:
            for table in reversed(voltro_metadata.sorted_tables):
                await conn.execute(delete(table))
    finally:
        await engine.dispose()


async def worker(p: dict[str, Any]) -> dict[str, Any]:
    from fastapi_voltro_schedules import (
        ScheduleContext,
        Scheduling,
        SchedulingConfig,
        define_schedule,
    )
    from fastapi_voltro_schedules.fire_requests import FireRequest, Why

    n, seconds, url = p["n"], p["seconds"], p["url"]
    retention_ms = int(p["retention_s"] * 1000)
    external = p["mode"] == "external"
    firings = Firings()

    async def handler(ctx: ScheduleContext) -> None:
        firings.record(ctx.name, ctx.scheduled_at.timestamp())

    schedules = [
        define_schedule(
            name=f"c{i}",
            # external schedules are minute-granular (platform schedulers are); the driver
            # below delivers one arrival a second regardless
            cron="* * * * *" if external else "* * * * * *",
            timezone="UTC",
            handler=handler,
            trigger="external" if external else "self",
        )
        for i in range(n)
    ]
    config = SchedulingConfig(
        database_url=url,
        claim_retention_ms=retention_ms,
        run_retention_ms=retention_ms,
        external_trigger_skew_ms=SKEW_MS,
        schedule_heartbeat_ms=HEARTBEAT_MS,
        external_missed_policy="off",
        shutdown_grace_ms=2000,
        replica_id="bench",
    )
    await _prepare(url)
    scheduling = Scheduling(schedules, config=config)
    async with scheduling.run():
        assert scheduling.engine is not None
        maintenance = scheduling.engine.maintenance
        armed = time.time()
        end = armed + seconds
        cpu0, server0 = cpu_seconds(), _server_cpu_seconds() if p["postgres"] else None
        samples: list[dict[str, Any]] = []
        sweeps: list[Any] = []
        arrivals = {"sent": 0, "failed": 0}

        async def sample() -> None:
            next_at = armed + p["sample_s"]
            while next_at <= end + 0.001:
                await sleep_until(next_at)
                claims, runs = await _count(url)
                row = {
                    "t": round(time.time() - armed, 1),
                    "claims": claims,
                    "runs": sum(runs.values()),
                    "runs_by_status": runs,
                    "fired": len(firings.starts),
                }
                samples.append(row)
                print(f"[{p['label']}] {json.dumps(row)}", file=sys.stderr, flush=True)
                next_at += p["sample_s"]

        async def follow_sweeps() -> None:
            seen = maintenance.last_sweep
            while time.time() < end:
                await asyncio.sleep(0.2)
                if maintenance.last_sweep is not seen:
                    seen = maintenance.last_sweep
                    sweeps.append(seen)

        async def drive() -> None:
            """One arrival per schedule at every whole second, through the engine's external
            admission (what the trigger route calls once it has snapped the arrival)."""

            engine = scheduling.engine
            assert engine is not None

            async def one(schedule: Any, slot: datetime) -> None:
                try:
                    await engine.fire(FireRequest(schedule, slot, Why.ARRIVAL))
                except Exception as exc:  # counted; the first few printed
                    arrivals["failed"] += 1
                    if arrivals["failed"] <= 3:
                        print(f"arrival failed: {exc!r}", file=sys.stderr, flush=True)

            second = float(int(time.time()) + 1)
            while second < end:
                await sleep_until(second)
                slot = datetime.fromtimestamp(second, UTC)
                arrivals["sent"] += n
                await asyncio.gather(*(one(s, slot) for s in schedules))
                second = max(second + 1, float(int(time.time()) + 1))

        tasks = [asyncio.create_task(sample()), asyncio.create_task(follow_sweeps())]
        if external:
            tasks.append(asyncio.create_task(drive()))
        await sleep_until(end + 0.5)
        cpu = cpu_seconds() - cpu0
        server = _server_cpu_seconds()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        first = float(int(armed) + 1)
        last = float(int(end) - 1)
        inside = firings.window(first, last)
        lags = [(start - slot) * 1000 for _, slot, start in inside]
        # each sample also gets the lag of the slots since the one before (a sweep that held
        # up a herd would show there)
        before = armed
        for row in samples:
            at = armed + row["t"]
            near = [(st - sl) * 1000 for _, sl, st in firings.window(before, at - 1)]
            row["lag_p99_ms"] = round(percentile(near, 0.99) or 0.0)
            row["lag_max_ms"] = round(max(near, default=0.0))
            before = at
        warm = first + WARM_UP_S
        steady_lags = [(st - sl) * 1000 for _, sl, st in firings.window(warm, last)]
        # before the first rows expire nothing is pruned: the same run's own baseline
        expiry = armed + p["retention_s"]
        unpruned = [(st - sl) * 1000 for _, sl, st in firings.window(warm, expiry)]
        pruning = [(st - sl) * 1000 for _, sl, st in firings.window(expiry + 1, last)]
        result = {
            "label": p["label"],
            "mode": p["mode"],
            "n": n,
            "seconds": seconds,
            "retention_s": p["retention_s"],
            "sweep_interval_s": maintenance.sweep_interval(),
            "claim_retention_s": maintenance.claim_retention.total_seconds(),
            "samples": samples,
            "expected": n * int(last - first + 1),
            "fired": len(inside),
            "rate": len(inside) / (last - first + 1),
            "lag_p50_ms": percentile(lags, 0.50),
            "lag_p99_ms": percentile(lags, 0.99),
            "lag_max_ms": max(lags) if lags else None,
            "steady_lag_p99_ms": percentile(steady_lags, 0.99),
            "steady_lag_max_ms": max(steady_lags) if steady_lags else None,
            "lag_before_pruning_ms": [percentile(unpruned, 0.5), percentile(unpruned, 0.99)],
            "lag_while_pruning_ms": [percentile(pruning, 0.5), percentile(pruning, 0.99)],
            "cpu_s": cpu,
            "server_cpu_s": None if server is None or server0 is None else server - server0,
            "arrivals": arrivals if external else None,
            "sweeps": [
                {"runs": s.runs, "claims": s.claims, "s": round(s.seconds, 3), "behind": s.behind}
                for s in sweeps
            ],
        }
        emit(result)
        sys.stderr.flush()
        # A backlog of pending writes would be cancelled one shielded UPDATE at a time at
        # shutdown; the figures are taken, so leave without the drain (as bench.ours does).
        os._exit(0)
    return result  # pragma: no cover


# -- the report ------------------------------------------------------------------------------


def verdict(result: dict[str, Any]) -> dict[str, Any]:
    """The claims table after the first retention window against its end and its peak."""
    settle = result["retention_s"] + 2 * result["sweep_interval_s"]
    steady = [s for s in result["samples"] if s["t"] >= settle]
    if len(steady) < 2:
        return {"flat": None, "why": f"no two samples after {settle:g} s: run longer"}
    counts = [s["claims"] for s in steady]
    median = statistics.median(counts)
    spread = (max(counts) - min(counts)) / median if median else 0.0
    growth = counts[-1] / counts[0] - 1 if counts[0] else 0.0
    return {
        "flat": spread <= 0.25 and growth <= 0.15,
        "after_first_window": counts[0],
        "at_end": counts[-1],
        "max": max(s["claims"] for s in result["samples"]),
        "steady_median": median,
        "steady_min": min(counts),
        "steady_max": max(counts),
        "spread": spread,
        "growth": growth,
        "expected_level": result["rate"] * result["claim_retention_s"],
    }


def report(result: dict[str, Any]) -> None:
    v = verdict(result)
    label = result["label"]
    window = result["seconds"]
    print(
        f"\n== {label}: {result['mode']}, n={result['n']}, {window:g} s, "
        f"retention {result['claim_retention_s']:g} s, sweep every "
        f"{result['sweep_interval_s']:g} s"
    )
    print("   t(s)    claims      runs     fired  lag p99/max (ms)")
    for s in result["samples"]:
        print(
            f"  {s['t']:5.0f} {s['claims']:9,d} {s['runs']:9,d} {s['fired']:9,d}"
            f"  {s['lag_p99_ms']:6,d} / {s['lag_max_ms']:,d}"
        )

    def ms(value: float | None) -> str:
        return "–" if value is None else f"{value:,.0f}"

    print(
        f"  firings: {result['fired']:,} of {result['expected']:,} "
        f"({result['rate']:.0f}/s); lag p50 {ms(result['lag_p50_ms'])} ms, "
        f"p99 {ms(result['lag_p99_ms'])} ms, max {ms(result['lag_max_ms'])} ms; after the "
        f"first {WARM_UP_S} s p99 {ms(result['steady_lag_p99_ms'])} ms, "
        f"max {ms(result['steady_lag_max_ms'])} ms"
    )
    before, during = result["lag_before_pruning_ms"], result["lag_while_pruning_ms"]
    if during[0] is not None and before[0] is not None:
        print(
            f"  lag p50/p99 before the first rows expire {ms(before[0])}/{ms(before[1])} ms, "
            f"while pruning {ms(during[0])}/{ms(during[1])} ms"
        )
    cpu = f"  CPU: worker {result['cpu_s']:.0f} s ({result['cpu_s'] / window * 100:.0f}% of a core)"
    if result.get("server_cpu_s") is not None:
        server = result["server_cpu_s"]
        cpu += f", postgres {server:.0f} s ({server / window * 100:.0f}% of a core)"
    print(cpu)
    if result.get("arrivals"):
        print(f"  arrivals: {result['arrivals']}")
    sweeps = result["sweeps"]
    if sweeps:
        pruned = sum(s["claims"] for s in sweeps)
        runs = sum(s["runs"] for s in sweeps)
        longest = max(s["s"] for s in sweeps)
        behind = sum(s["behind"] for s in sweeps)
        print(
            f"  sweeps: {len(sweeps)}, claims pruned {pruned:,}, runs {runs:,}; "
            f"longest {longest:.2f} s; behind {behind}"
        )
    if v["flat"] is None:
        print(f"  verdict: {v['why']}")
        return
    print(
        f"  claims after the first window {v['after_first_window']:,}, at the end {v['at_end']:,}, "
        f"max {v['max']:,} (steady {v['steady_min']:,}–{v['steady_max']:,}, rate × retention "
        f"{v['expected_level']:,.0f}): spread {v['spread']:.0%}, growth {v['growth']:+.0%} — "
        f"{'FLAT' if v['flat'] else 'NOT FLAT'}"
    )


def run_worker(params: dict[str, Any]) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "bench.claims_retention", "worker", json.dumps(params)],
        stdout=subprocess.PIPE,
        text=True,
        check=False,
    )
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT_PREFIX):
            result: dict[str, Any] = json.loads(line[len(RESULT_PREFIX) :])
            return result
    raise RuntimeError(f"{params['label']}: the worker gave no result (exit {proc.returncode})")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.claims_retention", description=__doc__)
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--n", type=int, default=1000, help="schedules firing every second")
    parser.add_argument("--retention-s", type=float, default=60.0)
    parser.add_argument("--sample-s", type=float, default=10.0)
    parser.add_argument("--no-sqlite", action="store_true")
    parser.add_argument(
        "--sqlite-mode",
        choices=["external", "timer"],
        default="external",
        help="SQLite: arrivals through the external admission (claims) or the timer's own "
        "self firings (no claim under single: the ledger's retention alone)",
    )
    parser.add_argument(
        "--postgres-url", help="e.g. postgresql+asyncpg://postgres@127.0.0.1/voltro_bench"
    )
    parser.add_argument("--json", help="also write every result to this file")
    args = parser.parse_args(argv)
    common = {
        "n": args.n,
        "seconds": args.seconds,
        "retention_s": args.retention_s,
        "sample_s": args.sample_s,
    }
    print(
        f"cpus={os.cpu_count()} load={os.getloadavg()} at {datetime.now(UTC):%Y-%m-%d %H:%M}Z",
        flush=True,
    )
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        if not args.no_sqlite:
            url = f"sqlite+aiosqlite:///{Path(tmp) / 'bench.db'}"
            params = common | {
                "label": "sqlite",
                "mode": args.sqlite_mode,
                "url": url,
                "postgres": False,
            }
            results.append(run_worker(params))
            report(results[-1])
    if args.postgres_url:
        params = common | {
            "label": "postgres",
            "mode": "timer",
            "url": args.postgres_url,
            "postgres": True,
        }
        try:
            results.append(run_worker(params))
        finally:
            asyncio.run(_prepare(args.postgres_url))  # leave our tables there empty
        report(results[-1])
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        asyncio.run(worker(json.loads(sys.argv[2])))
    else:
        main()
