"""SchedulingConfig: VOLTRO_* env, SecretStr tokens, coordination derived from the store."""

from __future__ import annotations

import os

import pytest
from pydantic import ValidationError

from fastapi_voltro_schedules import Coordination, SchedulingConfig, TriggerMode
from fastapi_voltro_schedules.config import default_replica_id, resolve_coordination, store_kind
from fastapi_voltro_schedules.enums import ExternalMissedPolicy


def test_defaults() -> None:
    c = SchedulingConfig()
    assert c.database_url == "sqlite+aiosqlite:///./voltro.db"
    assert c.trigger is TriggerMode.SELF
    assert c.coordination is None
    assert c.schedule_heartbeat_ms == 30_000
    assert c.external_trigger_skew_ms == 300_000
    assert c.external_missed_policy is ExternalMissedPolicy.RECORD
    assert c.queue_adoption_window_ms is None
    assert c.schedule_trigger_token is None and c.inspect_token is None
    assert c.replica_id


def test_reads_env_with_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VOLTRO_DATABASE_URL", "postgresql+asyncpg://u@h/db")
    monkeypatch.setenv("VOLTRO_TRIGGER", "external")
    monkeypatch.setenv("VOLTRO_COORDINATION", "single")
    monkeypatch.setenv("VOLTRO_SCHEDULE_HEARTBEAT_MS", "500")
    monkeypatch.setenv("VOLTRO_QUEUE_ADOPTION_WINDOW_MS", "300000")
    monkeypatch.setenv("VOLTRO_EXTERNAL_TRIGGER_SKEW_MS", "60000")
    monkeypatch.setenv("VOLTRO_EXTERNAL_MISSED_POLICY", "record-and-run")
    monkeypatch.setenv("VOLTRO_CHANGE_STRATEGY", "cdc")
    monkeypatch.setenv("VOLTRO_REPLICA_ID", "pod-7f4c")
    monkeypatch.setenv("VOLTRO_SCHEDULE_TRIGGER_TOKEN", "trigger-secret")
    monkeypatch.setenv("VOLTRO_INSPECT_TOKEN", "inspect-secret")
    monkeypatch.setenv("VOLTRO_INSPECT_READ_TOKEN", "viewer-secret")
    c = SchedulingConfig()
    assert c.database_url == "postgresql+asyncpg://u@h/db"
    assert c.trigger is TriggerMode.EXTERNAL
    assert c.coordination is Coordination.SINGLE
    assert c.schedule_heartbeat_ms == 500
    assert c.queue_adoption_window_ms == 300_000
    assert c.external_trigger_skew_ms == 60_000
    assert c.external_missed_policy is ExternalMissedPolicy.RECORD_AND_RUN
    assert c.change_strategy.value == "cdc"
    assert c.replica_id == "pod-7f4c"
    assert c.schedule_trigger_token is not None
    assert c.schedule_trigger_token.get_secret_value() == "trigger-secret"
    assert c.inspect_token is not None and c.inspect_token.get_secret_value() == "inspect-secret"
    assert c.inspect_read_token is not None
    assert c.inspect_read_token.get_secret_value() == "viewer-secret"
    # Tokens never leak through repr/str (which end up in logs and tracebacks).
    assert "trigger-secret" not in repr(c) and "inspect-secret" not in str(c)
    assert "viewer-secret" not in repr(c)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("schedule_heartbeat_ms", 0),
        ("external_trigger_skew_ms", -1),
        ("coordination", "leaderElection"),
        ("external_missed_policy", "sometimes"),
        ("database_url", "oracle://x/y"),
        ("unknown_field", 1),
    ],
)
def test_bad_values_name_the_field(field: str, value: object) -> None:
    with pytest.raises(ValidationError) as info:
        SchedulingConfig(**{field: value})
    assert field in str(info.value)


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("sqlite+aiosqlite:///./voltro.db", "sqlite"),
        ("sqlite+aiosqlite://", "memory"),
        ("sqlite+aiosqlite:///:memory:", "memory"),
        ("postgresql+asyncpg://postgres@127.0.0.1/test", "postgres"),
        ("mysql+asyncmy://root@127.0.0.1/test", "mysql"),
        ("mysql+aiomysql://root@127.0.0.1/test", "mysql"),
        ("mariadb+asyncmy://root@127.0.0.1/test", "mysql"),
        ("postgresql", "postgres"),
        ("mysql", "mysql"),
        ("sqlite", "sqlite"),
    ],
)
def test_store_kind(url: str, kind: str) -> None:
    assert store_kind(url) == kind


@pytest.mark.parametrize(
    ("requested", "kind", "effective", "warning"),
    [
        (None, "memory", "single", None),
        (None, "sqlite", "single", None),
        (None, "postgres", "advisoryLock", None),
        (None, "mysql", "advisoryLock", None),
        ("single", "postgres", "single", None),
        ("advisoryLock", "postgres", "advisoryLock", None),
        ("cluster", "postgres", "cluster", None),
        ("cluster", "mysql", "cluster", None),
        (
            "cluster",
            "sqlite",
            "single",
            "scheduling.coordination=cluster needs a multi-instance SQL store — "
            "falling back to single (sqlite)",
        ),
        (
            "advisoryLock",
            "sqlite",
            "single",
            "scheduling.coordination=advisoryLock needs a multi-instance SQL store — "
            "falling back to single (sqlite)",
        ),
        (
            "cluster",
            "memory",
            "single",
            "scheduling.coordination=cluster needs a multi-instance SQL store — "
            "falling back to single (memory)",
        ),
    ],
)
def test_resolve_coordination(
    requested: str | None, kind: str, effective: str, warning: str | None
) -> None:
    choice = resolve_coordination(
        Coordination(requested) if requested else None,
        kind,  # type: ignore[arg-type]
    )
    assert choice.effective.value == effective
    assert choice.warning == warning


def test_an_empty_variable_is_unset_for_every_field(monkeypatch: pytest.MonkeyPatch) -> None:
    # `VOLTRO_COORDINATION=` left in a manifest stopped the boot ("" is not a coordination).
    for key in [k for k in os.environ if k.startswith("VOLTRO_")]:
        monkeypatch.delenv(key)
    defaults = SchedulingConfig(replica_id="pod-1").model_dump()
    for field in SchedulingConfig.model_fields:
        monkeypatch.setenv(f"VOLTRO_{field.upper()}", "")
    config = SchedulingConfig(replica_id="pod-1")
    assert config.model_dump() == defaults
    # replica_id too: its default is this process's hostname-pid, not "".
    assert SchedulingConfig().replica_id == default_replica_id()
