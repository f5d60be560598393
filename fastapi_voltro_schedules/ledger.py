"""The engine's hot-path writes, group-committed (see :mod:`batching`).

Claims, ``running`` rows and terminal writes from concurrent firings share round trips; the
per-row guarantees are the store's (a claim is still a primary-key insert, a terminal write
still a compare-and-set per row).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from .batching import GroupCommit
from .clock import Clock
from .store import RunOutcome, RunRecord, Store


class Ledger:
    """Batched writes for one replica."""

    def __init__(self, store: Store, clock: Clock, replica_id: str) -> None:
        self.store = store
        self.clock = clock
        self.replica_id = replica_id
        self._claims: GroupCommit[str, bool] = GroupCommit(self._claim_many)
        self._inserts: GroupCommit[RunRecord, None] = GroupCommit(self._insert_many)
        self._finishes: GroupCommit[RunOutcome, None] = GroupCommit(self._finish_many)

    async def claim(self, key: str) -> bool:
        """Whether this replica won ``key`` (raises ``StoreUnavailableError``: fail closed)."""
        return await self._claims.submit(key)

    async def insert(self, run: RunRecord) -> None:
        await self._inserts.submit(run)

    async def finish(self, outcome: RunOutcome) -> None:
        await self._finishes.submit(outcome)

    async def _claim_many(self, keys: list[str]) -> Sequence[bool]:
        won = await self.store.claim_many(keys, self.replica_id, self._now())
        # Two callers in one batch may ask for the same key (two arrivals of one external
        # slot): the first asker wins it, the second is a duplicate like any other loser.
        answers = []
        for key in keys:
            answers.append(key in won)
            won.discard(key)
        return answers

    async def _insert_many(self, runs: list[RunRecord]) -> Sequence[None]:
        await self.store.insert_runs(runs)
        return [None] * len(runs)

    async def _finish_many(self, outcomes: list[RunOutcome]) -> Sequence[None]:
        await self.store.finish_runs(outcomes, self.replica_id)
        return [None] * len(outcomes)

    def _now(self) -> datetime:
        return self.clock.now()
