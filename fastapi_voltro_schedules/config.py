"""``SchedulingConfig``: app-wide settings, from code or ``VOLTRO_*`` environment variables."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from sqlalchemy.engine import make_url

from .enums import ChangeStrategy, Coordination, ExternalMissedPolicy, TriggerMode
from .errors import ConfigurationError
from .external import FUTURE_TOLERANCE
from .urls import normalize_database_url

DEFAULT_DATABASE_URL = "sqlite+aiosqlite:///./voltro.db"
DEFAULT_CLAIM_RETENTION_MS = 7 * 24 * 3600 * 1000
"""Seven days: far past what any path needs (see :func:`claim_retention_floor_ms`), so a
replica frozen for days (a suspended VM, SIGSTOP) that resumes still finds the claims of the
slots its timer then walks over."""

DEFAULT_DASHBOARD_SESSION_MS = 12 * 3600 * 1000
"""Twelve hours: a working day signed in, not a cookie that opens the dashboard for ever."""

StoreKind = Literal["memory", "sqlite", "postgres", "mysql"]


def default_replica_id() -> str:
    """``<hostname>-<pid>``: distinct per process, readable in the ledger."""
    return f"{socket.gethostname()}-{os.getpid()}"


class SchedulingConfig(BaseSettings):
    """App-wide scheduling settings. Every field reads ``VOLTRO_<FIELD>`` from the environment.

    Tokens are ``SecretStr``: their value never appears in a repr, a log line or an error. An
    empty variable (``VOLTRO_COORDINATION=`` left in a manifest) counts as unset, for every field.
    """

    # hide_input_in_errors: a refused database URL (or token) must not be echoed, password and
    # all, into the ValidationError a boot log prints. env_ignore_empty: an empty VOLTRO_*
    # variable is unset, not a value to refuse.
    model_config = SettingsConfigDict(
        env_prefix="VOLTRO_",
        extra="forbid",
        frozen=True,
        env_ignore_empty=True,
        hide_input_in_errors=True,
    )

    scheduler_enabled: bool = Field(
        default=True,
        description="false: the lifespan arms nothing and opens no database (no SQLite file "
        "is created), and the package's routes answer 503 scheduler_disabled — for test "
        "suites (TestClient(app) then fires nothing) and for a replica that must not fire.",
    )
    database_url: str = Field(
        default=DEFAULT_DATABASE_URL,
        description="SQLAlchemy URL of the ledger (sqlite+aiosqlite, postgresql+asyncpg, "
        "mysql+asyncmy; postgres://, mysql://, mariadb:// and sqlite:/// get those drivers). "
        "Ignored when Scheduling(engine=...) shares the app's engine.",
    )
    trigger: TriggerMode = Field(
        default=TriggerMode.SELF, description="App-wide default trigger for schedules."
    )
    coordination: Coordination | None = Field(
        default=None,
        description="single | advisoryLock | cluster; unset derives it from the store "
        "(memory/sqlite → single, postgres/mariadb/mysql → advisoryLock).",
    )
    schedule_heartbeat_ms: int = Field(
        default=30_000,
        gt=0,
        description="How often a running row's heartbeat_at is bumped; under "
        "coordination=cluster also how often a replica beats its member row and renews its "
        "leases (a silent owner's schedules move within 3 beats).",
    )
    queue_adoption_window_ms: int | None = Field(
        default=None,
        gt=0,
        description="Bound for adopting a dead waiter's queued firing; unset = 2 × the "
        "schedule's period from the waiter's last beat.",
    )
    external_trigger_skew_ms: int = Field(
        default=300_000,
        ge=0,
        description="How late an external arrival may be and still snap back to its "
        "occurrence (never past the previous occurrence).",
    )
    external_missed_policy: ExternalMissedPolicy = Field(default=ExternalMissedPolicy.RECORD)
    change_strategy: ChangeStrategy = Field(default=ChangeStrategy.POLL)
    replica_id: str = Field(default_factory=default_replica_id, min_length=1, max_length=200)
    schedule_trigger_token: SecretStr | None = Field(
        default=None,
        description="Bearer token(s) of the trigger routes (CronJob-facing). A "
        "comma-separated list rotates.",
    )
    inspect_token: SecretStr | None = Field(
        default=None,
        description="Operator bearer token(s) of the inspect routes and the dashboard: reads, "
        "Run now, backfill, pause/resume. A comma-separated list rotates.",
    )
    inspect_read_token: SecretStr | None = Field(
        default=None,
        description="Read-only bearer token(s) of the inspect routes and the dashboard: lists "
        "and runs; 403 on anything that fires or changes state. A comma-separated list rotates.",
    )
    dashboard_session_ms: int = Field(
        default=DEFAULT_DASHBOARD_SESSION_MS,
        ge=60_000,
        description="How long a dashboard sign-in lasts: the session cookie's Max-Age, and the "
        "expiry signed into it (the server refuses the cookie after it, whatever the browser "
        "kept). Then the page asks for the token again.",
    )
    shutdown_grace_ms: int = Field(
        default=10_000,
        ge=0,
        description="How long in-flight runs may finish at shutdown before they are cancelled "
        "and recorded failed/shutdown.",
    )
    run_retention_ms: int | None = Field(
        default=30 * 24 * 3600 * 1000,
        gt=0,
        description="Finished run rows older than this are swept; None keeps them forever. "
        "Queued rows are never swept.",
    )
    claim_retention_ms: int = Field(
        default=DEFAULT_CLAIM_RETENTION_MS,
        gt=0,
        description="Claims rows (one per slot claimed: advisoryLock firings, external "
        "arrivals, recorded missed slots) older than this are pruned. At least "
        "2 × external_trigger_skew_ms + 2 s and 3 × schedule_heartbeat_ms; a replica frozen "
        "longer than this may claim a slot of that age again when it resumes.",
    )

    @field_validator("database_url")
    @classmethod
    def _normalized_url(cls, value: str) -> str:
        # The one normaliser (urls.py): boot and the CLI see the URL exactly as stored here.
        try:
            url = normalize_database_url(value)
        except ConfigurationError as exc:
            raise ValueError(str(exc)) from None
        if isinstance(value, str) and value.partition("://")[0] == url.drivername:
            return value  # already async: kept verbatim (rendering would quote `:memory:`)
        return url.render_as_string(hide_password=False)

    @model_validator(mode="after")
    def _claims_outlive_their_slots(self) -> SchedulingConfig:
        floor = claim_retention_floor_ms(self.external_trigger_skew_ms, self.schedule_heartbeat_ms)
        if self.claim_retention_ms < floor:
            raise ValueError(
                f"claim_retention_ms (VOLTRO_CLAIM_RETENTION_MS) is {self.claim_retention_ms} "
                f"ms, under the {floor} ms a claim must outlive: 2 × external_trigger_skew_ms "
                f"+ {int(FUTURE_TOLERANCE.total_seconds() * 1000)} ms (a platform's retry of an "
                "arrival can come that late, and only the claim answers it duplicate) and "
                "3 × schedule_heartbeat_ms (a range backfill's lock is refreshed once a beat). "
                f"Set it to at least {floor}, or lower those two"
            )
        return self

    def heartbeat_seconds(self) -> float:
        return self.schedule_heartbeat_ms / 1000


def claim_retention_floor_ms(external_trigger_skew_ms: int, schedule_heartbeat_ms: int) -> int:
    """The shortest claim retention that never lets a slot be claimed twice while anything
    can still ask for it:

    * an external arrival is answered ``duplicate`` by its slot's claim alone; a retry can
      state the slot's time up to the skew budget late and arrive up to the skew after what
      it states (``too_late`` beyond), and a claim can be written up to
      ``FUTURE_TOLERANCE`` before its slot — so ``2 × skew + FUTURE_TOLERANCE``;
    * a range backfill's lock (a claims row) is refreshed once a heartbeat and taken over
      after 3 silent ones: it must never be pruned sooner.

    Boot catch-up, the external missed watcher and cluster takeovers walk from the newest run
    row, not from claims; the herd's claims are consulted within its second. What the floor
    cannot cover is a replica frozen (SIGSTOP, a suspended VM) for longer than the retention:
    when it resumes, its timer walks the slots it slept through (the newest 1,000) — under
    ``backfill="all"`` it fires any whose claim is gone again, under the other policies it
    records them ``missed`` beside the run that took place."""
    tolerance_ms = int(FUTURE_TOLERANCE.total_seconds() * 1000)
    return max(2 * external_trigger_skew_ms + tolerance_ms, 3 * schedule_heartbeat_ms)


def store_kind(url_or_dialect: str) -> StoreKind:
    """Which kind of store a URL (or a SQLAlchemy dialect name) points at."""
    if "://" not in url_or_dialect and ":" not in url_or_dialect:
        backend, database = url_or_dialect, "x"
    else:
        try:
            url = make_url(url_or_dialect)
        except Exception as exc:
            raise ConfigurationError(
                f"VOLTRO_DATABASE_URL is not a database URL ({exc}) — use e.g. "
                "sqlite+aiosqlite:///./voltro.db or postgresql+asyncpg://user@host/db"
            ) from None
        backend, database = url.get_backend_name(), url.database or ""
    if backend == "sqlite":
        return "memory" if database in ("", ":memory:") else "sqlite"
    if backend in ("postgresql", "postgres"):
        return "postgres"
    if backend in ("mysql", "mariadb"):
        return "mysql"
    raise ConfigurationError(
        f'database backend "{backend}" is not supported — use sqlite+aiosqlite, '
        "postgresql+asyncpg or mysql+asyncmy"
    )


@dataclass(frozen=True, slots=True)
class CoordinationChoice:
    """The coordination a store can serve, and the boot warning when it differs from the ask."""

    effective: Coordination
    warning: str | None = None


def resolve_coordination(requested: Coordination | None, kind: StoreKind) -> CoordinationChoice:
    """Derive or check the coordination against the store (SPEC §2)."""
    multi_instance = kind in ("postgres", "mysql")
    if requested is None:
        return CoordinationChoice(
            Coordination.ADVISORY_LOCK if multi_instance else Coordination.SINGLE
        )
    if requested is Coordination.SINGLE:
        return CoordinationChoice(requested)
    if not multi_instance:
        return CoordinationChoice(
            Coordination.SINGLE,
            f"scheduling.coordination={requested.value} needs a multi-instance SQL store — "
            f"falling back to single ({kind})",
        )
    return CoordinationChoice(requested)
