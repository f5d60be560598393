"""Lines of ``on_overlap="queue"`` firings, observed.

The ``line`` schedule of ``apps.cluster_app`` across replicas: each replica's environment, and
the spans its handlers write (``CLUSTER_LINE_LOG``) read back. A span is one run's own
wall-clock start and end, written by the handler as it ends; from the spans alone: no two runs
at once, no occurrence twice, in ``scheduled_at`` order.

In one process, :class:`Line` is a handler that records its runs and can hold them open.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

import anyio

from fastapi_voltro_schedules import ScheduleContext

INSPECT = "queue-cluster-inspect-token-0123456789"
"""The inspect token every replica of :func:`line_env` accepts."""


def line_env(url: str, replica_id: str, log: Path, **extra: str) -> dict[str, str]:
    """A replica running ``line`` only, appending its spans to ``log``."""
    return {
        "VOLTRO_DATABASE_URL": url,
        "VOLTRO_REPLICA_ID": replica_id,
        "VOLTRO_SHUTDOWN_GRACE_MS": "200",
        "VOLTRO_SCHEDULE_HEARTBEAT_MS": "500",
        "VOLTRO_INSPECT_TOKEN": INSPECT,
        "CLUSTER_SCHEDULES": "line",
        "CLUSTER_LINE_LOG": str(log),
        **extra,
    }


def read_spans(log: Path) -> list[dict[str, object]]:
    """Every span written so far, by start."""
    if not log.exists():
        return []
    spans = [json.loads(line) for line in log.read_text().splitlines() if line]
    return sorted(spans, key=lambda s: float(s["start"]))  # type: ignore[arg-type]


def assert_one_at_a_time_in_order(spans: list[dict[str, object]]) -> None:
    slots = [str(s["slot"]) for s in spans]
    twice = {slot: n for slot, n in Counter(slots).items() if n > 1}
    assert not twice, f"occurrences run twice: {twice}"
    for before, after in zip(spans, spans[1:], strict=False):
        assert float(before["end"]) <= float(after["start"]), (  # type: ignore[arg-type]
            f"two runs at once: {before} and {after}"
        )
    assert [datetime.fromisoformat(s) for s in slots] == sorted(
        datetime.fromisoformat(s) for s in slots
    ), f"not in scheduled_at order: {slots}"


class Line:
    """A handler that records when each of its runs started and ended (real time), and lets
    the test hold a run open."""

    def __init__(self) -> None:
        self.spans: list[tuple[datetime, float, float | None]] = []
        self.gates: dict[datetime, anyio.Event] = {}
        self.hold = False

    async def __call__(self, ctx: ScheduleContext) -> None:
        index = len(self.spans)
        self.spans.append((ctx.scheduled_at, time.monotonic(), None))
        if self.hold:
            gate = self.gates.setdefault(ctx.scheduled_at, anyio.Event())
            await gate.wait()
        else:
            await anyio.sleep(0.05)  # why this sleep is safe: it is the run's work, any length
        slot, start, _ = self.spans[index]
        self.spans[index] = (slot, start, time.monotonic())

    def release(self, slot: datetime) -> None:
        self.gates.setdefault(slot, anyio.Event()).set()

    def assert_serial_in_order(self) -> None:
        for (_, _, end), (_, start, _) in zip(self.spans, self.spans[1:], strict=False):
            assert end is not None and end <= start, f"two runs at once: {self.spans}"
        slots = [slot for slot, _, _ in self.spans]
        assert slots == sorted(slots), f"out of scheduled_at order: {slots}"
