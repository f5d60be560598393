"""``@value``: the records made once or more per firing — a run's row, the handler's context,
the run's outcome — immutable to the type checker and cheap to build.

A ``@dataclass(frozen=True)`` refuses attribute assignment in its ``__setattr__``, so its own
``__init__`` sets every field through ``object.__setattr__``: 5.0 µs for ``RunRecord``'s 13
fields, 3.6 for ``ScheduleContext``'s 8, against 1.3–1.4 µs as a plain slots dataclass. A
firing builds three of them: ~8 µs of the loop's time per firing, 80 ms of a 10,000 herd. So a
``@value`` class is declared frozen to type checkers (``dataclass_transform``: mypy and pyright
reject an assignment to a field, as for ``frozen=True``) and built as a plain slots dataclass,
hashed by its fields as a frozen one is. Nothing of ours assigns to one; a copy with a change
is ``dataclasses.replace``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from typing_extensions import dataclass_transform

__all__ = ["value"]

T = TypeVar("T")


@dataclass_transform(frozen_default=True)
def value(cls: type[T]) -> type[T]:
    """``@dataclass(frozen=True, slots=True)`` to the type checker; see the module docstring."""
    return dataclass(slots=True, unsafe_hash=True)(cls)
