"""The app's own logging: one stderr handler on the root logger, uvicorn's format.

With a root handler configured, the package adds none of its own (``ensure_visible``), so its
lines (``scheduler: ...``, ``schedule: run failed ...`` with the traceback) come out here, beside
the app's. Raise ``fastapi_voltro_schedules`` to WARNING to keep only failures.
"""

from __future__ import annotations

import logging.config
import os


def configure_logging() -> None:
    level = os.environ.get("EXAMPLE_LOG_LEVEL", "INFO")
    logging.config.dictConfig(
        {
            "version": 1,
            # uvicorn configured its own loggers before importing the app: keep them.
            "disable_existing_loggers": False,
            "formatters": {"plain": {"format": "%(levelname)s:     %(message)s"}},
            "handlers": {
                "stderr": {
                    "class": "logging.StreamHandler",
                    "formatter": "plain",
                    "stream": "ext://sys.stderr",
                }
            },
            "root": {"handlers": ["stderr"], "level": "WARNING"},
            "loggers": {
                "fastapi_voltro_schedules": {"level": level},
                "example_app": {"level": level},
            },
        }
    )
