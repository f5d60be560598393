"""Admission and coordination: who fires a slot, and whether it may start now.

Rooms, side by side: :mod:`.single` and :mod:`.claim` (gates: who fires), :mod:`.skip`,
:mod:`.queue` (the durable line) and :mod:`.chain` (the in-process line) — overlap rules —
composed by :mod:`.admission`. The interface is in :mod:`.base`.
"""

from .admission import Admitter
from .base import Admission, Gate, Step, Turn, Verdict
from .chain import Chain
from .claim import ClaimGate
from .cluster import ClusterGate, Membership
from .inflight import InFlight, Wakeups
from .queue import DurableLine
from .single import SingleGate
from .skip import SkipRule

__all__ = [
    "Admission",
    "Admitter",
    "Chain",
    "ClaimGate",
    "ClusterGate",
    "DurableLine",
    "Gate",
    "InFlight",
    "Membership",
    "SingleGate",
    "SkipRule",
    "Step",
    "Turn",
    "Verdict",
    "Wakeups",
]
