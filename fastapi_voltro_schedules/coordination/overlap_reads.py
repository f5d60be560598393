"""The overlap read, shared by the firings that ask for it at once.

A ``skip`` schedule whose runs may live in another process (:mod:`.sharing`) reads its
``running`` rows before it is admitted — one statement per herd. Arrivals come one request at a
time, though: a thousand external arrivals due at one second were a thousand reads of the same
table, each waiting for the pool, and on a SQLite file that capped the trigger path at about a
third of the rate it kept before the read existed. Every firing that asks while a read is still
to be sent joins it: the reads asked in one turn of the loop go as one statement (the store
chunks the names), and each asker gets its own schedules' rows.

Freshness is unchanged: the statement is sent after every asker asked.

Not :class:`..batching.GroupCommit`: there one of the askers sends the batch, and its
cancellation cancels every answer in it (right for writes at shutdown). An arrival's request
may be cancelled on its own (a client gone); the read here is a task of its own, so the others
still get their rows.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..store import RunRecord

Read = Callable[[list[str]], Awaitable[Sequence["RunRecord"]]]


class OverlapReads:
    """``await reads(names)``: the ``running`` rows of ``names``, read together with whatever
    other names are asked in the same turn of the loop."""

    def __init__(self, read: Read) -> None:
        self._read = read
        self._asked: list[tuple[Collection[str], asyncio.Future[list[RunRecord]]]] = []
        self._sending: set[asyncio.Task[None]] = set()

    async def __call__(self, names: Collection[str]) -> list[RunRecord]:
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[list[RunRecord]] = loop.create_future()
        self._asked.append((names, answer))
        if len(self._asked) == 1:
            # sent once this turn's askers have asked (a task: the read must not belong to
            # the first asker, whose cancellation would fail everyone else's)
            task = loop.create_task(self._send())
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)
        return await answer

    async def _send(self) -> None:
        asked, self._asked = self._asked, []
        # alone (a herd's one read), its names go as asked: no set, sort or filter of 10,000
        alone = len(asked) == 1
        every = list(asked[0][0]) if alone else sorted({n for names, _ in asked for n in names})
        try:
            rows = await self._read(every)
        except Exception as exc:  # each asker fails as its own read would have
            for _, answer in asked:
                if not answer.done():
                    answer.set_exception(exc)
            return
        except BaseException:  # the read itself cancelled (the loop closing): nobody waits on
            for _, answer in asked:  # an answer that will never come
                answer.cancel()
            raise
        if alone:
            if not asked[0][1].done():
                asked[0][1].set_result(list(rows))
            return
        for names, answer in asked:
            if not answer.done():
                wanted = set(names)
                answer.set_result([row for row in rows if row.name in wanted])
