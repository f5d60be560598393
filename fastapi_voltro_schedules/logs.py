"""The package logger, visible under a plain ``uvicorn app:app``.

Uvicorn configures its own loggers only, so without help our boot line and warnings would be
swallowed by the root logger's default WARNING level. We add a stderr handler at INFO — but
only when the application configured no logging of its own.
"""

from __future__ import annotations

import logging
import sys

logger = logging.getLogger("fastapi_voltro_schedules")

_FORMAT = "%(levelname)s:     %(message)s"


def ensure_visible() -> None:
    """Give the package logger a stderr handler at INFO if the app configured none."""
    if logger.handlers or logging.getLogger().handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(_FORMAT))
    logger.addHandler(handler)
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)
    # Our handler prints; a root handler added later must not print the same line twice.
    logger.propagate = False
