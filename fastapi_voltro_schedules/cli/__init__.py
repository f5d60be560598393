"""The ``voltro`` command line: one Typer app, one module per verb group.

:mod:`.common` holds the apps and what every command shares; :mod:`.migrate`, :mod:`.serve`,
:mod:`.backfill`, :mod:`.operate`, :mod:`.runtime`, :mod:`.manifest` and :mod:`.audit` register
their commands on import. A new verb group is a new module here, imported below.
"""

from __future__ import annotations

from . import audit, backfill, manifest, migrate, operate, runtime, serve
from .audit import schedule_audit
from .backfill import schedule_backfill
from .common import (
    CliError,
    app,
    find_scheduling,
    import_app,
    resolve_database_url,
    schedule_app,
)
from .migrate import migrate as migrate_command
from .serve import APP_SPEC_HELP, dev_environment, serve_note, validate_app_spec

__all__ = [
    "APP_SPEC_HELP",
    "CliError",
    "app",
    "audit",
    "backfill",
    "dev_environment",
    "find_scheduling",
    "import_app",
    "main",
    "manifest",
    "migrate",
    "migrate_command",
    "operate",
    "resolve_database_url",
    "runtime",
    "schedule_app",
    "schedule_audit",
    "schedule_backfill",
    "serve",
    "serve_note",
    "validate_app_spec",
]


def main() -> None:
    """The ``voltro`` console script."""
    app(prog_name="voltro")
