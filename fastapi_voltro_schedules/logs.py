"""The package logger, visible under a plain ``uvicorn app:app``, and its structured fields.

Uvicorn configures its own loggers only, so without help our boot line and warnings would be
swallowed by the root logger's default WARNING level. We add a stderr handler at INFO — a
fallback that prints only while nobody else would: as soon as the app gives the root logger (or
ours) a handler of its own, even after boot, the fallback falls silent and the records reach
that handler instead. The logger keeps ``propagate = True`` throughout: cutting it off would
hide our records from a JSON formatter or an OpenTelemetry handler installed later.

Records about one run carry their fields in ``extra=`` (see :func:`run_fields`), so a
structured handler reads ``record.schedule``, ``record.run_id``, ``record.slot``,
``record.outcome`` instead of parsing the message.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

logger = logging.getLogger("fastapi_voltro_schedules")

_FORMAT = "%(levelname)s:     %(message)s"

__all__ = ["ensure_visible", "logger", "run_fields"]


def run_fields(
    schedule: str,
    run_id: str | None = None,
    slot: str | None = None,
    outcome: str | None = None,
    **more: Any,
) -> dict[str, Any]:
    """The ``extra=`` of a record about one run: ``schedule`` (its name), ``run_id``, ``slot``
    (the scheduled instant, ISO-8601 Z), ``outcome`` (the run's status), plus ``more``
    (``trigger``, ``error_tag``…). Fields that are not known are left out."""
    fields: dict[str, Any] = {"schedule": schedule, "run_id": run_id, "slot": slot}
    fields["outcome"] = outcome
    fields.update(more)
    return {k: v for k, v in fields.items() if v is not None}


class _FallbackHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Prints while it is the only handler a record would reach."""

    def handle(self, record: logging.LogRecord) -> bool:
        if logging.getLogger().handlers or any(h is not self for h in logger.handlers):
            return False  # the app has its own handler now: it gets the record, once
        return super().handle(record)


def ensure_visible() -> None:
    """Give the package logger a fallback stderr handler at INFO if the app configured none."""
    if logger.handlers or logging.getLogger().handlers:
        return
    handler = _FallbackHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(_FORMAT))
    logger.addHandler(handler)
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)
