"""A ``RetryPolicy`` on run-time schedules (SPEC §7): ``put_schedule(..., retry=...)``, the
HTTP PUT body's ``"retry": {"attempts", "backoffMs", "maxBackoffMs"}`` (422 naming the
field), ``voltro schedule put --retry-attempts …``, a handler's own policy
(``define_handler(retry=...)``), stored with the definition version so every replica retries
alike — and such a schedule really retrying, on the manual clock."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from support.running import runs_of, served
from support.waiting import wait_until
from test_cli_operate import APP, cli, env, in_process  # noqa: F401

from fastapi_voltro_schedules import (
    InvalidScheduleError,
    RetryPolicy,
    RunStatus,
    ScheduleContext,
    Scheduling,
    SchedulingConfig,
    define_handler,
)
from fastapi_voltro_schedules.records import DefinitionRecord
from fastapi_voltro_schedules.runtime_schedules import schedule_from_record
from fastapi_voltro_schedules.testing import ManualClock

OPERATOR = "operator-token-for-retry-tests"
AS_OPERATOR = {"Authorization": f"Bearer {OPERATOR}"}
T0 = datetime(2026, 6, 1, 10, 0, 30, tzinfo=UTC)
URL = "/_voltro/inspect/schedules/report.acme"
BODY: dict[str, Any] = {"cron": "* * * * *", "timezone": "UTC", "handler": "tenantReport"}

calls: list[tuple[datetime, int]] = []


@define_handler(name="tenantReport")
async def tenant_report(ctx: ScheduleContext) -> None:
    calls.append((ctx.scheduled_at, ctx.attempt))
    if ctx.attempt == 1:
        raise TimeoutError("the tenant's API timed out")


@define_handler(name="patient", retry=RetryPolicy(attempts=4, backoff_ms=250))
async def patient(ctx: ScheduleContext) -> None:
    return None


def scheduling_on(url: str, clock: ManualClock) -> Scheduling:
    config = SchedulingConfig(database_url=url, replica_id="pod-1", inspect_token=OPERATOR)
    return Scheduling([], config=config, clock=clock, handlers=[tenant_report, patient])


async def test_put_with_a_retry_stores_it_and_the_schedule_retries(sqlite_url: str) -> None:
    calls.clear()
    clock = ManualClock(T0)
    scheduling = scheduling_on(sqlite_url, clock)
    async with served(scheduling) as http:
        retry = {"attempts": 2, "backoffMs": 1500, "maxBackoffMs": 3000}
        # JSON Schema's integer is a number with no fraction: 2.0 is taken as 2
        r = await http.put(
            URL, json={**BODY, "retry": {**retry, "attempts": 2.0}}, headers=AS_OPERATOR
        )
        assert r.status_code == 201, r.text
        assert r.json()["retry"] == retry
        listing = (await http.get("/_voltro/inspect/schedules", headers=AS_OPERATOR)).json()
        (shown,) = [s for s in listing["schedules"] if s["name"] == "report.acme"]
        assert shown["retry"] == retry
        assert scheduling.store is not None
        (version,) = (await scheduling.store.definitions(["report.acme"]))["report.acme"]
        assert (version.retry_attempts, version.retry_backoff_ms) == (2, 1500)
        assert version.retry_max_backoff_ms == 3000
        # another replica builds the same policy from the stored version
        rebuilt = schedule_from_record(version, {"tenantReport": tenant_report})
        assert rebuilt.retry == RetryPolicy(attempts=2, backoff_ms=1500, max_backoff_ms=3000)

        await clock.advance(30)  # 10:01 fires, attempt 1 fails

        async def row() -> Any:
            rows = await runs_of(scheduling, "report.acme")
            return rows[0] if rows else None

        pending = await wait_until(
            lambda: _when(row, lambda x: x.retry_at is not None), what="retry pending"
        )
        runs = await http.get(
            "/_voltro/inspect/schedules/runs", params={"name": "report.acme"}, headers=AS_OPERATOR
        )
        (body,) = runs.json()["runs"]
        assert body["runId"] == pending.id
        assert (body["status"], body["terminal"], body["attempt"]) == ("running", False, 1)
        assert body["retryAt"] == "2026-06-01T10:01:01.500Z"
        assert body["errorTag"] == "TimeoutError"
        await clock.advance(1.5)
        done = await wait_until(lambda: _when(row, lambda x: x.status.terminal), what="final")
    assert (done.status, done.attempt) == (RunStatus.SUCCEEDED, 2)
    assert calls == [(datetime(2026, 6, 1, 10, 1, tzinfo=UTC), 1), (done.scheduled_at, 2)]


async def _when(read: Any, check: Any) -> Any:
    found = await read()
    return found if found is not None and check(found) else None


@pytest.mark.parametrize(
    ("retry", "field"),
    [
        ({"attempts": 0}, "retry.attempts"),
        ({"backoffMs": 10}, "retry.attempts"),
        ({"attempts": 3, "backoffMs": -1}, "retry.backoffMs"),
        ({"attempts": 3, "maxBackoffMs": 604_800_001}, "retry.maxBackoffMs"),
        ({"attempts": 3, "jitter": 1}, "retry.jitter"),
        (3, "retry"),
    ],
)
async def test_a_bad_retry_is_422_naming_the_field(
    sqlite_url: str, retry: object, field: str
) -> None:
    scheduling = scheduling_on(sqlite_url, ManualClock(T0))
    async with served(scheduling) as http:
        r = await http.put(URL, json={**BODY, "retry": retry}, headers=AS_OPERATOR)
        assert r.status_code == 422, r.text
        assert r.json()["field"] == field, r.json()
        assert (await http.get(URL.rsplit("/", 1)[0], headers=AS_OPERATOR)).status_code == 200
        assert scheduling.store is not None
        assert await scheduling.store.definitions(["report.acme"]) == {}


async def test_a_handlers_policy_is_the_default_and_a_put_overrides_it(sqlite_url: str) -> None:
    scheduling = scheduling_on(sqlite_url, ManualClock(T0))
    async with scheduling.run():
        inherited = await scheduling.put_schedule(
            "p1", cron="* * * * *", timezone="UTC", handler="patient"
        )
        assert inherited.schedule.retry == RetryPolicy(attempts=4, backoff_ms=250)
        own = await scheduling.put_schedule(
            "p2",
            cron="* * * * *",
            timezone="UTC",
            handler="patient",
            retry=RetryPolicy(attempts=2),
        )
        assert own.schedule.retry == RetryPolicy(attempts=2)
        none = await scheduling.put_schedule(
            "p3", cron="* * * * *", timezone="UTC", handler="tenantReport"
        )
        assert none.schedule.retry is None
        with pytest.raises(InvalidScheduleError) as refused:
            await scheduling.put_schedule(
                "p4",
                cron="* * * * *",
                timezone="UTC",
                handler="patient",
                retry="3 times",  # type: ignore[arg-type]
            )
        assert refused.value.field == "retry"


def test_a_version_without_a_policy_reads_as_the_versions_before_retries() -> None:
    """Adding no policy makes no new version: the versions written before migration 0009
    (retry columns NULL) and one written now without a policy define the same thing."""
    base = dict(
        name="x", version=1, cron="* * * * *", timezone="UTC", trigger="self",
        on_overlap="skip", backfill="skip", handler="m:f", args="{}", source="code",
        effective_from=T0,
    )  # fmt: skip
    old = DefinitionRecord(**base)  # type: ignore[arg-type]
    assert old.same_definition(DefinitionRecord(**base))  # type: ignore[arg-type]
    retried = DefinitionRecord(**base, retry_attempts=3, retry_backoff_ms=1, retry_max_backoff_ms=2)  # type: ignore[arg-type]
    assert not old.same_definition(retried)


def test_cli_put_takes_retry_options(in_process: None) -> None:  # noqa: F811
    code, out, err = cli(
        "put", "report.acme", "--cron", "0 9 * * *", "--timezone", "UTC",
        "--handler", "tenantReport", "--retry-attempts", "3", "--retry-backoff-ms", "500",
        "--json", "--app", APP,
    )  # fmt: skip
    assert code == 0, (out, err)
    assert json.loads(out)["retry"] == {"attempts": 3, "backoffMs": 500, "maxBackoffMs": 60000}
    code, _, err = cli(
        "put", "report.acme", "--cron", "0 9 * * *", "--timezone", "UTC",
        "--handler", "tenantReport", "--retry-attempts", "0", "--app", APP,
    )  # fmt: skip
    assert code == 2 and "retry.attempts" in err, err
    code, _, err = cli(
        "put", "report.acme", "--cron", "0 9 * * *", "--timezone", "UTC",
        "--handler", "tenantReport", "--retry-backoff-ms", "5", "--app", APP,
    )  # fmt: skip
    assert code == 2 and "need --retry-attempts" in err, err
