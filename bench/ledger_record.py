"""A ledger that stays small: rows left and cost per firing, ``record="all"`` against
``record="failures"`` (issue 35).

    python -m bench.ledger_record [--schedules 100] [--slots 30] [--runs 3]
        [--postgres-url URL] [--mariadb-url URL] [--json FILE]

The store's side of a firing, as the engine's herd writes it: each slot of ``--schedules``
every-second schedules is claimed with its ``running`` row in one transaction
(``claim_and_insert``), then every run's outcome is written in one batch (``finish_runs``) —
under ``failures`` with ``roll_up`` set, so the batch also folds each schedule's previous
success into its hour's rollup (a locked read, a delete, a claims update and the rollup
upsert, in the same transaction). A *lone* firing is the same with one schedule, slot after
slot: where the fold's statements weigh most. Handlers, the timer and admission are left
out: they do the same work under both policies.

The modes alternate run by run (all, failures, all, …) on a fresh ledger each time, so a
busy box slows both alike; the table gives each mode's median of ``--runs`` and the rows left.

**``--postgres-url`` / ``--mariadb-url`` empty our tables there** (migrated to head first):
point them at databases of their own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

T0 = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
MODES = ("all", "failures")


async def _fresh(url: str) -> Any:
    from sqlalchemy import delete

    from fastapi_voltro_schedules.migrations import upgrade_to_head
    from fastapi_voltro_schedules.models import voltro_metadata
    from fastapi_voltro_schedules.store import create_store

    await upgrade_to_head(url)
    store = create_store(url)
    async with store.engine.begin() as conn:  # type: ignore[attr-defined]
        for table in reversed(voltro_metadata.sorted_tables):
            await conn.execute(delete(table))
    return store


async def _count(store: Any) -> tuple[int, int, int]:
    from sqlalchemy import func, select

    from fastapi_voltro_schedules.models import claims_table, rollups_table, runs_table

    async with store.engine.connect() as conn:
        counts = [
            int((await conn.execute(select(func.count()).select_from(t))).scalar_one())
            for t in (runs_table, rollups_table, claims_table)
        ]
    return counts[0], counts[1], counts[2]


async def one_run(url: str, mode: str, schedules: int, slots: int) -> dict[str, Any]:
    """``slots`` herds of ``schedules`` firings; seconds spent in the store per firing."""
    from fastapi_voltro_schedules.enums import CoordinationOutcome, RunStatus, Trigger
    from fastapi_voltro_schedules.store import RunOutcome, RunRecord, new_run_id

    store = await _fresh(url)
    took = 0.0
    try:
        for s in range(slots):
            at = T0 + timedelta(seconds=s)
            runs = [
                RunRecord(
                    id=new_run_id(), name=f"s{i}", scheduled_at=at, status=RunStatus.RUNNING,
                    trigger=Trigger.SELF, coordination_outcome=CoordinationOutcome.WON_LOCK,
                    fired_at=at, replica_id="bench",
                )
                for i in range(schedules)
            ]  # fmt: skip
            outcomes = [
                RunOutcome(
                    run_id=r.id, status=RunStatus.SUCCEEDED,
                    finished_at=at + timedelta(milliseconds=5), name=r.name, trigger=r.trigger,
                    scheduled_at=at, fired_at=at, roll_up=mode == "failures",
                )
                for r in runs
            ]  # fmt: skip
            began = time.perf_counter()
            won = await store.claim_and_insert(runs, "bench", at)
            await store.finish_runs(outcomes, "bench")
            took += time.perf_counter() - began
            assert len(won) == schedules
        rows, rollups, claims = await _count(store)
    finally:
        await store.dispose()
    return {
        "mode": mode,
        "firings": schedules * slots,
        "us_per_firing": took / (schedules * slots) * 1e6,
        "rows": rows,
        "rollup_rows": rollups,
        "claims": claims,
    }


async def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.ledger_record")
    parser.add_argument("--schedules", type=int, default=100)
    parser.add_argument("--slots", type=int, default=30)
    parser.add_argument("--lone-slots", type=int, default=300)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--postgres-url")
    parser.add_argument("--mariadb-url")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        stores = {"sqlite": f"sqlite+aiosqlite:///{tmp}/bench.db"}
        if args.postgres_url:
            stores["postgres"] = args.postgres_url
        if args.mariadb_url:
            stores["mariadb"] = args.mariadb_url
        shapes = {
            f"herd of {args.schedules}": (args.schedules, args.slots),
            "lone firing": (1, args.lone_slots),
        }
        raw: list[dict[str, Any]] = []
        for store, url in stores.items():
            for shape, (schedules, slots) in shapes.items():
                for _ in range(args.runs):
                    for mode in MODES:  # interleaved: a busy moment slows both alike
                        result = await one_run(url, mode, schedules, slots)
                        raw.append({"store": store, "shape": shape, **result})
                        print(json.dumps(raw[-1]), file=sys.stderr, flush=True)
    print(
        f"{'store':<9} {'shape':<14} {'mode':<9} {'firings':>8} {'µs/firing (median)':>19} "
        f"{'all runs':>24} {'rows':>6} {'rollups':>8} {'claims':>7}"
    )
    for store in stores:
        for shape in shapes:
            for mode in MODES:
                mine = [
                    r for r in raw if (r["store"], r["shape"], r["mode"]) == (store, shape, mode)
                ]
                each = [r["us_per_firing"] for r in mine]
                last = mine[-1]
                print(
                    f"{store:<9} {shape:<14} {mode:<9} {last['firings']:>8} "
                    f"{statistics.median(each):>19.0f} {', '.join(f'{v:.0f}' for v in each):>24} "
                    f"{last['rows']:>6} {last['rollup_rows']:>8} {last['claims']:>7}"
                )
    if args.json:
        args.json.write_text(json.dumps(raw, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
