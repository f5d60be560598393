"""Every SQL statement the store runs, built with SQLAlchemy Core, in one reviewable package.

The dialect differences live here and nowhere else:

==============  ==========================================  =====================================
statement       PostgreSQL / SQLite (>= 3.38)               MariaDB (>= 10.6) / MySQL (>= 8.0)
==============  ==========================================  =====================================
claim           ``INSERT … ON CONFLICT DO NOTHING           ``INSERT IGNORE … RETURNING key``
                RETURNING key``                             (MariaDB); MySQL has no RETURNING:
                                                            ``INSERT IGNORE`` then
                                                            :func:`claims_won_by` reads back
bounded delete  ``DELETE … WHERE pk IN (SELECT pk FROM (SELECT … ORDER BY … LIMIT n) AS doomed)``
                — the extra derived table is what lets MySQL/MariaDB delete from the table it
                reads (error 1093), and it is harmless elsewhere
last runs       names from ``unnest(:names)``          names from ``JSON_TABLE(:names, …)``
                (PostgreSQL), ``json_each(:names)``    (MariaDB >= 10.6, MySQL >= 8.0); then
                (SQLite); then per name a correlated   the same per-name probe
                ``ORDER BY … LIMIT 1`` probe
==============  ==========================================  =====================================

Never ``ON DUPLICATE KEY UPDATE``: it turns a lost race into a write (and into "2 rows
affected"), which is the very thing a claim must not do.
"""

from __future__ import annotations

from .claims import (
    LINE_SUFFIX,
    bounded_delete,
    claim_by_key,
    claim_insert,
    claim_insert_array,
    claim_release,
    claim_take_over,
    claim_touch,
    claims_between,
    claims_won_by,
    line_lock,
    slots_with_rows,
)
from .definitions import (
    definition_keys_since_select,
    definitions_announce,
    definitions_insert,
    definitions_page,
    definitions_select,
    definitions_since_select,
    newest_effective_since_select,
)
from .dialects import (
    DEFINITIONS_CHANNEL,
    NOTIFY_CHANNEL,
    database_now,
    database_now_sql,
    dialect_family,
    notify,
    ping,
)
from .pauses import (
    fleet_again,
    fleet_extend,
    fleet_resume,
    fleet_row,
    pause_again,
    pause_insert,
    pause_resume,
    pauses_select,
    span_insert,
    span_resume,
    spans_select,
)
from .reads import (
    BY_NAME_INDEX,
    BY_TIME_INDEX,
    last_runs,
    last_runs_params,
    latest_runs,
    list_runs,
    queued_rows,
    run_by_id,
    run_for_slot,
    runs_between,
    runs_in_status,
    select_runs,
    silent_runs,
    succeeded_slots,
)
from .state import names_in_status, note_runs, note_runs_params, noted_finish, states_of
from .writes import (
    FINISH_KEYS,
    UPDATABLE_COLUMNS,
    DriverStatement,
    conditional_update,
    driver_statement,
    finish_update,
    finish_update_array,
    finish_update_array_announced,
    finish_update_array_noted,
    heartbeat_update,
    insert_runs,
    insert_runs_array,
)

# The batch sizes are defined here, not in a submodule: the store reads them as
# ``q.CLAIM_CHUNK`` at call time, so this one binding is the one a test can shrink.
CLAIM_CHUNK = 1000
"""Keys per claim statement (3 parameters each: far below every driver's parameter cap)."""
RUN_CHUNK = 500
"""Rows per run insert (13 parameters each)."""
NAME_CHUNK = 2000
"""Schedule names per ``IN (…)`` list: well under every driver's bind-parameter limit."""
DEFINITIONS_PAGE = 5000
"""Versions per page of a whole-table read of the definitions (each page its own bounded
attempt)."""
DELETE_BATCH = 1000
"""Rows per bounded-delete statement: short transactions that never hold the table for long."""

__all__ = [
    "BY_NAME_INDEX",
    "BY_TIME_INDEX",
    "CLAIM_CHUNK",
    "DEFINITIONS_CHANNEL",
    "DEFINITIONS_PAGE",
    "DELETE_BATCH",
    "FINISH_KEYS",
    "LINE_SUFFIX",
    "NAME_CHUNK",
    "NOTIFY_CHANNEL",
    "RUN_CHUNK",
    "UPDATABLE_COLUMNS",
    "DriverStatement",
    "bounded_delete",
    "claim_by_key",
    "claim_insert",
    "claim_insert_array",
    "claim_release",
    "claim_take_over",
    "claim_touch",
    "claims_between",
    "claims_won_by",
    "conditional_update",
    "database_now",
    "database_now_sql",
    "definition_keys_since_select",
    "definitions_announce",
    "definitions_insert",
    "definitions_page",
    "definitions_select",
    "definitions_since_select",
    "dialect_family",
    "driver_statement",
    "finish_update",
    "finish_update_array",
    "finish_update_array_announced",
    "finish_update_array_noted",
    "fleet_again",
    "fleet_extend",
    "fleet_resume",
    "fleet_row",
    "heartbeat_update",
    "insert_runs",
    "insert_runs_array",
    "last_runs",
    "last_runs_params",
    "latest_runs",
    "line_lock",
    "list_runs",
    "names_in_status",
    "newest_effective_since_select",
    "note_runs",
    "note_runs_params",
    "noted_finish",
    "notify",
    "pause_again",
    "pause_insert",
    "pause_resume",
    "pauses_select",
    "ping",
    "queued_rows",
    "run_by_id",
    "run_for_slot",
    "runs_between",
    "runs_in_status",
    "select_runs",
    "silent_runs",
    "slots_with_rows",
    "span_insert",
    "span_resume",
    "spans_select",
    "states_of",
    "succeeded_slots",
]
