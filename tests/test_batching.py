"""GroupCommit: concurrent submits share flushes; failures reach every waiter."""

from __future__ import annotations

import asyncio

import pytest
from support.waiting import wait_until

from fastapi_voltro_schedules.batching import GroupCommit
from fastapi_voltro_schedules.errors import StoreUnavailableError


async def test_concurrent_submits_are_coalesced_and_answered_in_order() -> None:
    batches: list[list[int]] = []

    async def flush(items: list[int]) -> list[int]:
        batches.append(items)
        # the database round trip. Why this sleep is safe: the other 99 submit in the loop
        # pass that started the first, before any timer can fire
        await asyncio.sleep(0.01)
        return [i * 10 for i in items]

    gc: GroupCommit[int, int] = GroupCommit(flush)
    results = await asyncio.gather(*(gc.submit(i) for i in range(100)))
    assert results == [i * 10 for i in range(100)]
    # The first caller flushes alone; the 99 who arrived meanwhile share one flush.
    assert batches[0] == [0]
    assert len(batches) == 2 and sorted(batches[1]) == list(range(1, 100))


async def test_idle_submit_flushes_at_once() -> None:
    async def flush(items: list[str]) -> list[str]:
        return [s.upper() for s in items]

    gc: GroupCommit[str, str] = GroupCommit(flush)
    assert await gc.submit("a") == "A"
    assert await gc.submit("b") == "B"


async def test_max_batch_splits_large_bursts() -> None:
    sizes: list[int] = []

    async def flush(items: list[int]) -> list[None]:
        sizes.append(len(items))
        await asyncio.sleep(0)
        return [None] * len(items)

    gc: GroupCommit[int, None] = GroupCommit(flush, max_batch=10)
    await asyncio.gather(*(gc.submit(i) for i in range(35)))
    assert sum(sizes) == 35 and max(sizes) <= 10


async def test_a_failed_flush_fails_every_item_in_it() -> None:
    calls = 0

    async def flush(items: list[int]) -> list[int]:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.01)  # why this sleep is safe: see the round trip above
        if calls == 2:
            raise StoreUnavailableError("database down")
        return items

    gc: GroupCommit[int, int] = GroupCommit(flush)
    results = await asyncio.gather(*(gc.submit(i) for i in range(5)), return_exceptions=True)
    assert results[0] == 0
    assert all(isinstance(r, StoreUnavailableError) for r in results[1:])
    assert await gc.submit(7) == 7  # and the next flush works again


async def test_cancelling_the_flusher_does_not_strand_the_others() -> None:
    started, never = asyncio.Event(), asyncio.Event()
    flushed: list[list[int]] = []

    async def flush(items: list[int]) -> list[int]:
        flushed.append(items)
        started.set()
        await never.wait()  # a round trip that only ends by cancellation
        return items

    gc: GroupCommit[int, int] = GroupCommit(flush)
    leader = asyncio.ensure_future(gc.submit(1))
    await started.wait()
    followers = [asyncio.ensure_future(gc.submit(i)) for i in (2, 3)]
    await asyncio.sleep(0)
    leader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await leader
    # The followers were not in the cancelled batch: the next holder flushes them.
    await wait_until(lambda: len(flushed) == 2, what="the followers' own flush")
    assert flushed == [[1], [2, 3]]  # their own flush is under way…
    assert not any(f.done() for f in followers)  # …and answers nobody until it is over
    followers[0].cancel()  # cancel the one flushing: its whole batch is cancelled, no hang
    results = await asyncio.gather(*followers, return_exceptions=True)
    assert all(isinstance(r, asyncio.CancelledError) for r in results)

