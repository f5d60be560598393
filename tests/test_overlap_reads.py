"""The overlap read shared by the firings asking at once (coordination/overlap_reads.py)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from fastapi_voltro_schedules.coordination.overlap_reads import OverlapReads
from fastapi_voltro_schedules.enums import CoordinationOutcome, RunStatus, Trigger
from fastapi_voltro_schedules.errors import StoreUnavailableError
from fastapi_voltro_schedules.ledger import new_row
from fastapi_voltro_schedules.store import RunRecord

SLOT = datetime(2026, 12, 8, 9, 0, tzinfo=UTC)


def _running(name: str) -> RunRecord:
    return new_row(
        name, SLOT, RunStatus.RUNNING, Trigger.EXTERNAL, CoordinationOutcome.EXTERNAL, SLOT, "r"
    )


class Table:
    """The ``running`` rows a read finds, and every read sent."""

    def __init__(self, *names: str) -> None:
        self.rows = [_running(n) for n in names]
        self.sent: list[list[str]] = []
        self.fail: Exception | None = None

    async def read(self, names: list[str]) -> list[RunRecord]:
        self.sent.append(list(names))
        await asyncio.sleep(0)  # a round trip
        if self.fail is not None:
            raise self.fail
        return [r for r in self.rows if r.name in names]


async def test_the_reads_asked_in_one_turn_go_as_one_and_each_gets_its_own_rows() -> None:
    table = Table("a", "c")
    reads = OverlapReads(table.read)
    a, b, ac = await asyncio.gather(reads(["a"]), reads(["b"]), reads(["a", "c"]))
    assert table.sent == [["a", "b", "c"]]
    assert [r.name for r in a] == ["a"] and b == [] and sorted(r.name for r in ac) == ["a", "c"]
    # a later turn sends its own read: nothing is kept between turns
    table.rows = []
    assert await reads(["a"]) == []
    assert table.sent[1:] == [["a"]]


async def test_a_failed_read_fails_every_asker_and_the_next_turn_reads_again() -> None:
    table = Table("a")
    table.fail = StoreUnavailableError("store live_runs: down")
    reads = OverlapReads(table.read)
    answers = await asyncio.gather(reads(["a"]), reads(["b"]), return_exceptions=True)
    assert all(isinstance(a, StoreUnavailableError) for a in answers)
    table.fail = None
    assert [r.name for r in await reads(["a"])] == ["a"]


async def test_an_asker_cancelled_meanwhile_leaves_the_others_their_answer() -> None:
    table = Table("a", "b")
    reads = OverlapReads(table.read)
    first = asyncio.ensure_future(reads(["a"]))
    second = asyncio.ensure_future(reads(["b"]))
    await asyncio.sleep(0)  # both asked; the read is on its way
    first.cancel()
    assert [r.name for r in await second] == ["b"]
    with pytest.raises(asyncio.CancelledError):
        await first
    assert table.sent == [["a", "b"]]


async def test_a_read_cancelled_itself_cancels_every_answer_instead_of_leaving_it() -> None:
    inside, never = asyncio.Event(), asyncio.Event()

    async def stuck(names: list[str]) -> list[RunRecord]:
        inside.set()
        await never.wait()
        return []

    reads = OverlapReads(stuck)
    askers = [asyncio.ensure_future(reads([name])) for name in ("a", "b")]
    await inside.wait()
    for task in list(reads._sending):
        task.cancel()  # what the loop's close does to a task still running
    for asker in askers:  # a deadline only a hang reaches: the answers left pending
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(asker, timeout=60)
