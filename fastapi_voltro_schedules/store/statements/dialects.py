"""The dialect family every builder branches on, and the statements that read no table.

The database's clock is spelled here once: the heartbeat write and the liveness reads compare
instants, so they must take them from the same expression.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from sqlalchemy import Select, literal_column, select, text
from sqlalchemy.sql.elements import TextClause

from ...models import UTCDateTime


def dialect_family(dialect_name: str) -> str:
    """``"postgresql"``, ``"sqlite"`` or ``"mysql"`` (MariaDB included)."""
    return "mysql" if dialect_name in ("mysql", "mariadb") else dialect_name


def database_now_sql(dialect_name: str) -> str:
    """The database's clock as SQL, in the form ``UTCDateTime`` stores on that dialect:
    ``timestamptz`` on Postgres, naive UTC ``DATETIME(6)`` on MariaDB/MySQL (``UTC_TIMESTAMP``
    ignores the session's time zone), ISO-8601 text on SQLite (``%f`` is milliseconds: padded
    to the stored microseconds so the text still sorts like time)."""
    family = dialect_family(dialect_name)
    if family == "postgresql":
        return "statement_timestamp()"
    if family == "mysql":
        return "UTC_TIMESTAMP(6)"
    if family == "sqlite":
        return "(strftime('%Y-%m-%dT%H:%M:%f', 'now') || '000+00:00')"
    raise ValueError(f"no clock for dialect {dialect_name!r}")


def database_now(dialect_name: str) -> Select[Any]:
    return select(literal_column(database_now_sql(dialect_name), type_=UTCDateTime()))


NOTIFY_CHANNEL = "voltro_schedule_runs"
"""Postgres ``LISTEN``/``NOTIFY`` channel of ``change_strategy="cdc"``; the payload is a
schedule name."""
DEFINITIONS_CHANNEL = "voltro_schedule_definitions"
"""…and the channel of definition versions written at run time (payload: the schedule's
name). A channel of its own, not a marked payload on :data:`NOTIFY_CHANNEL`: every payload
there is a schedule name the line's waiters key on, and any marker would be a name a schedule
could take; a second ``LISTEN`` on the same session costs no connection."""


def notify(names: Collection[str]) -> TextClause:
    """Postgres: one ``pg_notify`` per name, in one statement."""
    return text(
        "SELECT pg_notify(:channel, n) FROM unnest(CAST(:names AS VARCHAR[])) AS n"
    ).bindparams(channel=NOTIFY_CHANNEL, names=sorted(set(names)))


def ping() -> Select[Any]:
    return select(1)
