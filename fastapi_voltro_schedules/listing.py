"""Which page of schedules the inspect listing shows: paged by name, filtered, flat in size.

At 100,000 schedules the listing cannot read every schedule's runs (the whole list was 0.34 s
and 4.7 MB at 20,000): a page is chosen first, and only its schedules' runs are read.

* **Without a status filter** the page is walked from the schedules themselves, sorted by name
  (code point order) once per change of the set (:class:`NameIndex`); ``prefix`` is a
  ``bisect`` range; ``source`` and ``paused`` are looked up per name in memory.
* **With a status filter** (the schedule's newest outcome, ``_voltro_schedule_state``) the
  names come from the store in the database's name order, one bounded read at a time, and the
  other filters are applied to them; a name no schedule holds any more (a deleted run-time
  one) is passed over.

Each page examines a bounded number of candidates (:data:`SCAN_BUDGET` from the state table):
a filter that matches little answers a short page — possibly empty — with a cursor, so no
request reads everything. The walk ends when the cursor is ``None``.

The cursor is opaque: ``m`` (memory order) or ``s`` (state order), then the UTF-8 hex of the
last name examined. Any text of that shape is a position ("after this text"), so a client can
never make it fail; any other text is refused with 422.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .enums import RunStatus
from .errors import InvalidQueryError

if TYPE_CHECKING:
    from .definition import Schedule
    from .store import Store

MAX_PAGE = 1000
"""The largest page (and the default: a client that never pages sees up to this many)."""
SCAN_BUDGET = 5000
"""State rows one page may examine before it answers short with a cursor."""
MAX_PREFIX = 200
"""A schedule name's longest (``definition.NAME_RE``): a longer prefix matches nothing."""

_MAX_NAME_BYTES = 800  # 200 characters of up to 4 UTF-8 bytes
CURSOR_PATTERN = r"^(?:[ms](?:[0-9a-f]{2}){1,800})?$"
"""A listing cursor: ``m``/``s`` and the hex UTF-8 of the last name examined (see the module
docstring). Every text of this shape is a page."""
MAX_CURSOR_CHARS = 1 + 2 * _MAX_NAME_BYTES
_CURSOR_RE = re.compile(CURSOR_PATTERN.replace("^", r"\A").replace("$", r"\Z"))
FILTER_STATUSES = tuple(s for s in RunStatus if s.terminal)
"""What ``status`` may name: an outcome (a schedule's newest terminal run)."""


@dataclass(frozen=True, slots=True)
class ListingFilter:
    """What a page must hold (every given filter at once)."""

    prefix: str | None = None
    statuses: frozenset[RunStatus] | None = None
    """The newest outcome is one of these (``None``: any, or none yet)."""
    paused: bool | None = None
    source: str | None = None
    """``code`` | ``runtime``."""


@dataclass(frozen=True, slots=True)
class Cursor:
    after: str
    by_state: bool


@dataclass(frozen=True, slots=True)
class Page:
    names: list[str]
    next_cursor: str | None


def encode_cursor(after: str, *, by_state: bool) -> str:
    return ("s" if by_state else "m") + after.encode("utf-8", "surrogatepass").hex()


def decode_cursor(text: str) -> Cursor | None:
    """The position ``text`` names; ``None`` for an empty one (the first page); 422 for text
    this API never hands out."""
    if not text:
        return None
    if _CURSOR_RE.match(text) is None:
        raise InvalidQueryError(
            "cursor is not a cursor of the schedules listing — pass the nextCursor of the "
            "previous page unchanged, or omit it for the first page"
        )
    # any bytes are a position: text that is no name sorts where it sorts
    after = bytes.fromhex(text[1:]).decode("utf-8", "replace")
    return Cursor(after=after, by_state=text[0] == "s")


class NameIndex:
    """The schedules sorted by name, rebuilt only when ``stamp`` changes (the set's identity,
    size and change count): a sort of 100,000 names is ~50 ms, a page is a ``bisect``."""

    def __init__(self) -> None:
        self._stamp: object = None
        self.names: list[str] = []
        self.by_name: dict[str, Schedule] = {}

    def refresh(self, schedules: Sequence[Schedule], stamp: object) -> None:
        if stamp == self._stamp and self.names:
            return
        self.by_name = {s.name: s for s in schedules}
        self.names = sorted(self.by_name)
        self._stamp = stamp


def walk(
    names: Sequence[str],
    after: str | None,
    prefix: str | None,
    accept: Callable[[str], bool],
    limit: int,
) -> Page:
    """Up to ``limit`` accepted names of the sorted ``names``, after ``after``, starting with
    ``prefix`` (pure: the page of the memory order)."""
    lo, hi = 0, len(names)
    if prefix:
        lo = bisect_left(names, prefix)
        hi = bisect_right(names, prefix + "\U0010ffff", lo)  # the last code point
    if after is not None:
        lo = max(lo, bisect_right(names, after))
    page: list[str] = []
    i = lo
    while i < hi and len(page) < limit:
        name = names[i]
        if accept(name):
            page.append(name)
        i += 1
    # more names remain in range: a cursor, even if none of them is accepted (the next page
    # is then empty and ends the walk) — a page never looks further than it has to
    return Page(page, encode_cursor(names[i - 1], by_state=False) if i < hi else None)


async def select_page(
    store: Store | None,
    index: NameIndex,
    filters: ListingFilter,
    cursor: Cursor | None,
    limit: int,
    is_paused: Callable[[str], bool],
) -> Page:
    """The names of one page of the listing and the cursor of the next (``None``: done)."""
    limit = max(1, min(limit, MAX_PAGE))
    prefix = filters.prefix or None
    if prefix is not None and len(prefix) > MAX_PREFIX:
        return Page([], None)

    def accept(name: str) -> bool:
        schedule = index.by_name.get(name)
        if schedule is None:
            return False  # a state row of a schedule that no longer exists
        if filters.source is not None and schedule.source != filters.source:
            return False
        return filters.paused is None or is_paused(name) is filters.paused

    if not filters.statuses:
        after = cursor.after if cursor is not None and not cursor.by_state else None
        return walk(index.names, after, prefix, accept, limit)
    if store is None:
        return Page([], None)  # no ledger: no schedule has an outcome
    after = cursor.after if cursor is not None and cursor.by_state else None
    page: list[str] = []
    scanned = 0
    chunk = max(limit, 200)
    while scanned < SCAN_BUDGET:
        want = min(chunk, SCAN_BUDGET - scanned)
        names = await store.names_in_status(
            filters.statuses, after=after, prefix=prefix, limit=want
        )
        for name in names:
            after = name
            if accept(name):
                page.append(name)
                if len(page) == limit:
                    # more may follow: the next page says (an empty last page at worst)
                    return Page(page, encode_cursor(name, by_state=True))
        scanned += len(names)
        if len(names) < want:
            return Page(page, None)  # the state table has no more
    assert after is not None
    return Page(page, encode_cursor(after, by_state=True))  # budget spent: a short page


__all__ = [
    "CURSOR_PATTERN",
    "FILTER_STATUSES",
    "MAX_CURSOR_CHARS",
    "MAX_PAGE",
    "Cursor",
    "ListingFilter",
    "NameIndex",
    "Page",
    "decode_cursor",
    "encode_cursor",
    "select_page",
    "walk",
]
