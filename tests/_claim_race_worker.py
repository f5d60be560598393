"""One contender in the multi-process claim race (run by ``test_store_contract.py``).

Usage: ``python _claim_race_worker.py URL REPLICA_ID N_KEYS SEED``. Prints ``ready`` once its
engine is connected, waits for a line on stdin (the starting gun), claims every key — in
shuffled batches of 1..40, single keys through ``claim`` and the rest through ``claim_many``,
a few batches at a time — and prints one JSON line: ``{"won": [...], "seconds": ...}``.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
from datetime import UTC, datetime

from fastapi_voltro_schedules.store import create_store


async def main(url: str, replica_id: str, n_keys: int, seed: int) -> None:
    store = create_store(url, pool_size=4, max_overflow=0)
    try:
        await store.ping()
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        rng = random.Random(seed)
        keys = [f"race@2026-01-01T00:{i // 60:02d}:{i % 60:02d}" for i in range(n_keys)]
        rng.shuffle(keys)
        batches: list[list[str]] = []
        while keys:
            size = rng.randint(1, 40)
            batches.append(keys[:size])
            keys = keys[size:]
        gate = asyncio.Semaphore(4)
        won: set[str] = set()

        async def run(batch: list[str]) -> None:
            async with gate:
                at = datetime.now(UTC)
                if len(batch) == 1:
                    if await store.claim(batch[0], replica_id, at):
                        won.add(batch[0])
                else:
                    won.update(await store.claim_many(batch, replica_id, at))

        started = time.perf_counter()
        await asyncio.gather(*(run(b) for b in batches))
        seconds = time.perf_counter() - started
        print(json.dumps({"won": sorted(won), "seconds": seconds}), flush=True)
    finally:
        await store.dispose()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
