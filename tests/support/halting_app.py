"""``apps.cluster_app`` with a halt that the test ends: ``uvicorn support.halting_app:app``.

``CLUSTER_HALT_FLAG`` (a path): once a file appears there, this replica's next lease beat stops
*inside its transaction* (after its statements, before the commit) with a blocking wait — the
whole process halts with its lease rows locked, as a SIGSTOP or a VM pause at that moment would
leave them — and writes ``<flag>.frozen`` (the instant, epoch seconds). It stays halted until
the test deletes the flag: the halt lasts until the test has seen what the other replicas did
meanwhile, not a fixed time that a slow machine could outrun (``CLUSTER_FREEZE_FLAG`` of
``apps.cluster_app`` halts for a fixed time).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from apps.cluster_app import app

from fastapi_voltro_schedules.store.sql import SQLStore

__all__ = ["app"]


def _halt_inside_beats(flag: Path) -> None:
    attempt = SQLStore._attempt

    async def halting(self: SQLStore, op: str, work: Any, **kw: Any) -> Any:
        if op != "cluster_leases" or not flag.exists():  # noqa: ASYNC240 - a stat, test-only
            return await attempt(self, op, work, **kw)

        async def then_halt(conn: Any) -> Any:
            out = await work(conn)
            Path(f"{flag}.frozen").write_text(str(time.time()))  # noqa: ASYNC240
            while flag.exists():  # noqa: ASYNC240 - the halt blocks the whole process
                time.sleep(0.01)  # noqa: ASYNC251
            return out

        return await attempt(self, op, then_halt, **kw)

    SQLStore._attempt = halting  # type: ignore[method-assign]


if os.environ.get("CLUSTER_HALT_FLAG"):
    _halt_inside_beats(Path(os.environ["CLUSTER_HALT_FLAG"]))
