"""Group commit: concurrent writes of one kind share a round trip.

When 1,000 schedules fire in the same second, 1,000 tasks each want to insert a ``running``
row. One at a time, the ledger is the bottleneck (every statement pays a driver round trip and
a transaction). Here the first caller flushes alone; everyone who arrives while that flush is
in the database waits and is flushed together next, in one statement. An idle system pays no
added latency; a busy one batches by itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class GroupCommit(Generic[T, R]):
    """Coalesce concurrent :meth:`submit` calls into calls of ``flush(items) -> results``
    (``results[i]`` answers ``items[i]``). A failed flush fails every item in it."""

    def __init__(
        self, flush: Callable[[list[T]], Awaitable[Sequence[R]]], max_batch: int = 5000
    ) -> None:
        self._flush = flush
        self._max_batch = max_batch
        self._pending: list[tuple[T, asyncio.Future[R]]] = []
        self._lock = asyncio.Lock()

    async def submit(self, item: T) -> R:
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        entry = (item, future)
        self._pending.append(entry)
        # FIFO lock: whoever holds it flushes everything pending; later holders usually find
        # their own future already answered and leave at once.
        try:
            await self._lock.acquire()
        except BaseException:
            # Cancelled before any flush took our item: it must not be written after all (a
            # claim written for a firing that gave up would swallow the slot).
            self._pending = [e for e in self._pending if e is not entry]
            raise
        try:
            while not future.done():
                batch = self._pending[: self._max_batch]
                del self._pending[: len(batch)]
                try:
                    await self._run(batch)
                except BaseException:
                    if future.done() and not future.cancelled():
                        future.exception()  # ours: raised right here instead of awaited
                    raise
        finally:
            self._lock.release()
        return await future

    async def _run(self, batch: list[tuple[T, asyncio.Future[R]]]) -> None:
        try:
            results = await self._flush([item for item, _ in batch])
        except Exception as exc:
            # The store failed: every item in the batch failed with it.
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            raise
        except BaseException:
            # Cancelled mid-flush (shutdown): nobody in the batch may hang waiting for an
            # answer that will never come.
            for _, future in batch:
                future.cancel()
            raise
        for (_, future), result in zip(batch, results, strict=True):
            if not future.done():
                future.set_result(result)
