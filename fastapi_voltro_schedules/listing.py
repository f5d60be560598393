"""Which page of schedules the inspect listing shows: paged, filtered, flat in size.

At 100,000 schedules the listing cannot read every schedule's runs (the whole list was 0.34 s
and 4.7 MB at 20,000): a page is chosen first, and only its schedules' runs are read.

Three walks, each in an order that stays put between two requests:

* **No name prefix, no status filter**: the schedules in the order the app lists them (declared
  ones as declared, then the run-time ones as written) — the order the listing always had. The
  cursor holds the last name and its position (where to go on if that name was deleted
  meanwhile).
* **A name prefix** (no status filter): the names sorted (code point order), the prefix a
  ``bisect`` range of them (:class:`NameIndex` keeps both orders, rebuilt only when the set
  changes).
* **A status filter** (the schedule's newest outcome, ``_voltro_schedule_state``): names from
  the store in the database's name order, one bounded read at a time; a name no schedule
  holds any more (a deleted run-time one) is passed over.

``source`` and ``paused`` are looked up per name in memory on every walk. A status page
examines at most :data:`SCAN_BUDGET` state rows: a filter that matches little answers a short
page — possibly empty — with a cursor, so no request reads everything. The walk ends when the
cursor is ``None``.

The cursor is opaque: ``m<position>.``, ``p`` or ``s`` (the walk), then the UTF-8 hex of the
last name examined. Any text of that shape is a position, so a client can never make it fail;
any other text is refused with 422.
"""

from __future__ import annotations

import enum
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
CURSOR_PATTERN = r"^(?:(?:m[0-9]{1,9}\.|[ps])(?:[0-9a-f]{2}){1,800})?$"
"""A listing cursor: the walk (``m<position>.``, ``p``, ``s``) and the hex UTF-8 of the last
name examined (see the module docstring). Every text of this shape is a page."""
MAX_CURSOR_CHARS = 11 + 2 * _MAX_NAME_BYTES
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


class Walk(enum.Enum):
    """Which order a page walks (and its cursor names)."""

    LISTED = "m"
    """The app's own order of its schedules."""
    SORTED = "p"
    """Names in code point order (a prefix search)."""
    STATE = "s"
    """The state table's name order (a status filter)."""


@dataclass(frozen=True, slots=True)
class Cursor:
    after: str
    walk: Walk
    position: int = 0
    """``Walk.LISTED``: where ``after`` stood (the next page starts after it if it is gone)."""


@dataclass(frozen=True, slots=True)
class Page:
    names: list[str]
    next_cursor: str | None


def encode_cursor(after: str, walk: Walk, position: int = 0) -> str:
    head = f"m{position}." if walk is Walk.LISTED else walk.value
    return head + after.encode("utf-8", "surrogatepass").hex()


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
    head, dot, tail = text.partition(".")
    if not dot:
        head, tail = text[0], text[1:]
    # any bytes are a position: text that is no name sorts where it sorts
    after = bytes.fromhex(tail).decode("utf-8", "replace")
    walk = Walk(head[0])
    return Cursor(after=after, walk=walk, position=int(head[1:]) if walk is Walk.LISTED else 0)


class NameIndex:
    """The schedules by name, in their listed order and sorted, rebuilt only when ``stamp``
    changes (the set's identity, size and change count): a page is then a slice or a
    ``bisect``, and a lookup by name a dict's. The sorted copy (~50 ms at 100,000 names) is
    made on the first prefix search after a change, not at every change."""

    def __init__(self) -> None:
        self._stamp: object = None
        self.listed: list[str] = []
        self.position: dict[str, int] = {}
        self.by_name: dict[str, Schedule] = {}
        self._sorted: list[str] | None = None

    def refresh(self, schedules: Sequence[Schedule], stamp: object) -> None:
        if stamp == self._stamp and self._stamp is not None:
            return
        by_name: dict[str, Schedule] = {}
        for s in schedules:
            by_name.setdefault(s.name, s)  # the first of a name, as a scan would find it
        self.by_name = by_name
        self.listed = list(by_name)
        self.position = {name: i for i, name in enumerate(self.listed)}
        self._sorted = None
        self._stamp = stamp

    @property
    def sorted(self) -> list[str]:
        if self._sorted is None:
            self._sorted = sorted(self.listed)
        return self._sorted


def walk_listed(
    names: Sequence[str],
    start: int,
    accept: Callable[[str], bool],
    limit: int,
) -> Page:
    """Up to ``limit`` accepted names of ``names`` from index ``start`` on (pure)."""
    page: list[str] = []
    i, end = max(start, 0), len(names)
    while i < end and len(page) < limit:
        if accept(names[i]):
            page.append(names[i])
        i += 1
    # more names remain: a cursor, even if none of them is accepted (the next page is then
    # empty and ends the walk) — a page never looks further than it has to
    return Page(page, encode_cursor(names[i - 1], Walk.LISTED, i - 1) if i < end else None)


def walk_sorted(
    names: Sequence[str],
    after: str | None,
    prefix: str,
    accept: Callable[[str], bool],
    limit: int,
) -> Page:
    """Up to ``limit`` accepted names of the sorted ``names`` starting with ``prefix``, after
    ``after`` (pure)."""
    lo = bisect_left(names, prefix)
    hi = bisect_right(names, prefix + "\U0010ffff", lo)  # the last code point
    if after is not None:
        lo = max(lo, bisect_right(names, after))
    page: list[str] = []
    i = lo
    while i < hi and len(page) < limit:
        if accept(names[i]):
            page.append(names[i])
        i += 1
    return Page(page, encode_cursor(names[i - 1], Walk.SORTED) if i < hi else None)


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
        if prefix is not None:
            after = cursor.after if cursor is not None and cursor.walk is Walk.SORTED else None
            return walk_sorted(index.sorted, after, prefix, accept, limit)
        start = 0
        if cursor is not None and cursor.walk is Walk.LISTED:
            at = index.position.get(cursor.after)
            start = (at if at is not None else cursor.position) + 1
        return walk_listed(index.listed, start, accept, limit)
    if store is None:
        return Page([], None)  # no ledger: no schedule has an outcome
    after = cursor.after if cursor is not None and cursor.walk is Walk.STATE else None
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
                    return Page(page, encode_cursor(name, Walk.STATE))
        scanned += len(names)
        if len(names) < want:
            return Page(page, None)  # the state table has no more
    assert after is not None
    return Page(page, encode_cursor(after, Walk.STATE))  # budget spent: a short page


__all__ = [
    "CURSOR_PATTERN",
    "FILTER_STATUSES",
    "MAX_CURSOR_CHARS",
    "MAX_PAGE",
    "Cursor",
    "ListingFilter",
    "NameIndex",
    "Page",
    "Walk",
    "decode_cursor",
    "encode_cursor",
    "select_page",
    "walk_listed",
    "walk_sorted",
]
