"""define_schedule: both call forms, and every definition-time error names the schedule, the
field, the bad value and the fix."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from fastapi_voltro_schedules import (
    BackfillPolicy,
    InvalidCronError,
    OverlapPolicy,
    Schedule,
    ScheduleContext,
    ScheduleDefinitionError,
    TriggerMode,
    WorkflowTarget,
    define_schedule,
)


async def noop(ctx: ScheduleContext) -> None:
    return None


def base(**overrides: Any) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"name": "dailyDigest", "cron": "0 9 * * *", "timezone": "UTC"}
    kwargs.update(overrides)
    return kwargs


def test_keyword_form_returns_schedule_with_defaults() -> None:
    s = define_schedule(**base(handler=noop))
    assert isinstance(s, Schedule)
    assert s.handler is noop
    assert s.on_overlap is OverlapPolicy.SKIP
    assert s.backfill is BackfillPolicy.SKIP
    assert s.max_runtime_ms == 1_800_000
    assert s.trigger is None
    assert s.module == __name__
    assert s.effective_trigger("external") is TriggerMode.EXTERNAL


def test_decorator_form_wraps_the_function() -> None:
    @define_schedule(name="rollup", cron="0 2 * * *", timezone="UTC", backfill="all")
    async def daily_rollup(ctx: ScheduleContext) -> None:
        return None

    assert isinstance(daily_rollup, Schedule)
    assert daily_rollup.name == "rollup"
    assert daily_rollup.backfill is BackfillPolicy.ALL
    assert daily_rollup.handler is not None
    assert daily_rollup.handler.__name__ == "daily_rollup"  # type: ignore[union-attr]


def test_sync_handler_and_workflow_target_accepted() -> None:
    def sync_handler(ctx: ScheduleContext) -> None:
        return None

    assert define_schedule(**base(handler=sync_handler)).handler is sync_handler
    target = WorkflowTarget(name="billing.dailyRollup", payload=lambda ctx: {"day": 1})
    s = define_schedule(**base(workflow=target))
    assert s.workflow is target and s.handler is None


def test_schedule_time_functions_delegate_to_the_cron_spec() -> None:
    s = define_schedule(**base(handler=noop, cron="0 9 * * *", timezone="Europe/Berlin"))
    after = datetime(2026, 7, 1, 12, tzinfo=UTC)
    assert s.next_occurrence(after) == datetime(2026, 7, 2, 7, tzinfo=UTC)
    assert s.previous_occurrence(after) == datetime(2026, 7, 1, 7, tzinfo=UTC)
    assert s.occurrences(after, after + timedelta(days=2)) == [
        datetime(2026, 7, 2, 7, tzinfo=UTC),
        datetime(2026, 7, 3, 7, tzinfo=UTC),
    ]
    assert s.period_at(after) == timedelta(days=1)


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        pytest.param(
            {"cron": "0 25 * * *"},
            r'define_schedule\("dailyDigest"\): invalid cron expression "0 25 \* \* \*" '
            r'\(tz="UTC"\) — .*hour.*25',
            id="hour-out-of-range",
        ),
        pytest.param(
            {"cron": "61 * * * *"},
            r'define_schedule\("dailyDigest"\): invalid cron expression "61 \* \* \* \*" '
            r'\(tz="UTC"\) — .*minute.*61',
            id="minute-out-of-range",
        ),
        pytest.param(
            {"cron": "0 0 32 * *"},
            r'invalid cron expression "0 0 32 \* \*" .*day.*32',
            id="day-out-of-range",
        ),
        pytest.param(
            {"cron": "0 0 1 13 *"},
            r'invalid cron expression "0 0 1 13 \*" .*month.*13',
            id="month-out-of-range",
        ),
        pytest.param(
            {"cron": "* * * *"},
            r'define_schedule\("dailyDigest"\): invalid cron expression "\* \* \* \*" '
            r'\(tz="UTC"\) — .*5 fields.*6.*got 4',
            id="four-fields",
        ),
        pytest.param(
            {"cron": "0 0 9 * * * 2026"},
            r'invalid cron expression "0 0 9 \* \* \* 2026" .*got 7',
            id="seven-fields",
        ),
        pytest.param(
            {"cron": "0 9 * * banana"},
            r'invalid cron expression "0 9 \* \* banana" .*banana',
            id="garbage-token",
        ),
    ],
)
def test_bad_cron_message_shape(overrides: dict[str, Any], expected: str) -> None:
    with pytest.raises(InvalidCronError) as info:
        define_schedule(**base(handler=noop, **overrides))
    assert re.search(expected, str(info.value)), str(info.value)
    assert str(info.value).startswith('define_schedule("dailyDigest"): invalid cron expression')


@pytest.mark.parametrize("cron", ["0 9 * * *", "*/30 * * * * *", "0 0 9 * * 1-5"])
def test_five_and_six_fields_accepted(cron: str) -> None:
    s = define_schedule(**base(handler=noop, cron=cron))
    assert s.has_seconds is (len(cron.split()) == 6)


def test_missing_timezone_names_schedule_and_fix() -> None:
    with pytest.raises(ScheduleDefinitionError) as info:
        define_schedule(name="dailyDigest", cron="0 9 * * *", handler=noop)  # type: ignore[call-overload]
    msg = str(info.value)
    assert msg.startswith('define_schedule("dailyDigest"): timezone is required')
    assert 'timezone="Europe/Berlin"' in msg


def test_unknown_timezone() -> None:
    with pytest.raises(ScheduleDefinitionError) as info:
        define_schedule(**base(handler=noop, timezone="Mars/Olympus"))
    msg = str(info.value)
    assert 'define_schedule("dailyDigest"): unknown timezone "Mars/Olympus"' in msg
    assert "IANA" in msg


def test_six_fields_with_external_trigger_rejected() -> None:
    with pytest.raises(ScheduleDefinitionError) as info:
        define_schedule(**base(handler=noop, cron="*/10 * * * * *", trigger="external"))
    msg = str(info.value)
    assert 'define_schedule("dailyDigest")' in msg
    assert '"*/10 * * * * *"' in msg and 'trigger="external"' in msg
    assert 'trigger="self"' in msg  # the fix


def test_handler_and_workflow_together_rejected() -> None:
    with pytest.raises(ScheduleDefinitionError, match=r'define_schedule\("dailyDigest"\): both '
                       r"handler and workflow are set"):
        define_schedule(**base(handler=noop, workflow=WorkflowTarget(name="x")))


def test_decorator_on_non_callable_rejected() -> None:
    decorator = define_schedule(**base())
    with pytest.raises(ScheduleDefinitionError) as info:
        decorator(42)  # type: ignore[arg-type]
    msg = str(info.value)
    assert 'define_schedule("dailyDigest")' in msg and "42" in msg and "not a handler" in msg


def test_non_callable_handler_rejected() -> None:
    with pytest.raises(ScheduleDefinitionError, match=r"handler='nope' is not callable"):
        define_schedule(**base(handler="nope"))


@pytest.mark.parametrize(
    ("field", "value", "allowed"),
    [
        ("on_overlap", "sometimes", '"skip" | "queue" | "parallel"'),
        ("backfill", "everything", '"skip" | "latest" | "all"'),
        ("trigger", "cron", '"self" | "external"'),
    ],
)
def test_bad_policy_values(field: str, value: str, allowed: str) -> None:
    with pytest.raises(ScheduleDefinitionError) as info:
        define_schedule(**base(handler=noop, **{field: value}))
    msg = str(info.value)
    assert msg.startswith('define_schedule("dailyDigest"): ')
    assert f"{field}={value!r}" in msg and allowed in msg


@pytest.mark.parametrize("value", [0, -5, 1.5, True, "100"])
def test_non_positive_or_non_int_max_runtime(value: object) -> None:
    with pytest.raises(ScheduleDefinitionError) as info:
        define_schedule(**base(handler=noop, max_runtime_ms=value))
    msg = str(info.value)
    assert f"max_runtime_ms={value!r}" in msg and "positive integer" in msg


@pytest.mark.parametrize("name", ["", "has space", "a/b", "x" * 201, None])
def test_bad_names(name: object) -> None:
    with pytest.raises(ScheduleDefinitionError, match="is not a valid schedule name"):
        define_schedule(name=name, cron="0 9 * * *", timezone="UTC", handler=noop)  # type: ignore[call-overload]


def test_missing_cron() -> None:
    with pytest.raises(ScheduleDefinitionError, match=r'define_schedule\("dailyDigest"\): '
                       r"cron=None is required"):
        define_schedule(name="dailyDigest", timezone="UTC", handler=noop)  # type: ignore[call-overload]


def test_workflow_must_be_a_target() -> None:
    with pytest.raises(ScheduleDefinitionError, match="must be a WorkflowTarget"):
        define_schedule(**base(workflow={"name": "x"}))


def test_workflow_payload_forms() -> None:
    ctx: Any = object()
    assert WorkflowTarget(name="w").build_payload(ctx) == {}
    assert WorkflowTarget(name="w", payload={"a": 1}).build_payload(ctx) == {"a": 1}
    assert WorkflowTarget(name="w", payload=lambda c: {"c": c is ctx}).build_payload(ctx) == {
        "c": True
    }


@pytest.mark.parametrize("zone", ["localtime", "posixrules", "Factory"])
def test_zones_that_are_no_place_are_refused(zone: str) -> None:
    # ZoneInfo loads all three; "localtime" is the server's own zone, which the seed forbids.
    with pytest.raises(ScheduleDefinitionError) as info:
        define_schedule(**base(handler=noop, timezone=zone))
    msg = str(info.value)
    assert msg.startswith(f'define_schedule("dailyDigest"): timezone "{zone}" is not an IANA')
    assert '"Europe/Berlin"' in msg


@pytest.mark.parametrize(
    ("zone", "suggestion"),
    [
        ("Europe/berlin", "Europe/Berlin"),
        ("america/new_york", "America/New_York"),
        ("posix/Europe/Berlin", "Europe/Berlin"),
        ("right/UTC", "UTC"),
    ],
)
def test_wrong_zone_spelling_gets_the_did_you_mean_from_define_schedule(
    zone: str, suggestion: str
) -> None:
    with pytest.raises(ScheduleDefinitionError) as info:
        define_schedule(**base(handler=noop, timezone=zone))
    assert str(info.value) == (
        f'define_schedule("dailyDigest"): unknown timezone "{zone}" — did you mean '
        f'"{suggestion}"?'
    )


@pytest.mark.parametrize("zone", ["UTC", "Etc/UTC", "America/Argentina/Buenos_Aires", "US/Eastern"])
def test_iana_names_and_links_are_accepted(zone: str) -> None:
    assert define_schedule(**base(handler=noop, timezone=zone)).timezone == zone


async def _two(ctx: object, extra: object) -> None:
    return None


async def _none() -> None:
    return None


async def _keyword_only(*, ctx: object) -> None:
    return None


@pytest.mark.parametrize(
    ("handler", "signature"),
    [
        (_two, "(ctx: 'object', extra: 'object')"),
        (_none, "()"),
        (_keyword_only, "(*, ctx: 'object')"),
    ],
)
def test_a_handler_that_cannot_take_one_argument_is_refused_at_definition(
    handler: Any, signature: str
) -> None:
    for define in (
        lambda: define_schedule(**base(handler=handler)),
        lambda: define_schedule(name="dailyDigest", cron="0 9 * * *", timezone="UTC")(handler),
    ):
        with pytest.raises(ScheduleDefinitionError) as info:
            define()
        msg = str(info.value)
        assert msg.startswith('define_schedule("dailyDigest"): handler')
        assert f"its signature is {signature}" in msg
        assert "async def handler(ctx: ScheduleContext) -> None" in msg  # the fix


def test_handlers_that_take_one_argument_are_accepted() -> None:
    async def optional_extra(ctx: object, extra: int = 1) -> None:
        return None

    class Job:
        async def run(self, ctx: object) -> None:
            return None

        def __call__(self, ctx: object) -> None:
            return None

    def sync(ctx: object) -> None:
        return None

    for handler in (optional_extra, Job().run, Job(), sync, noop):
        assert define_schedule(**base(handler=handler)).handler is handler


def test_what_each_firing_reads_is_worked_out_once_per_definition() -> None:
    """``awaits_handler`` and ``max_runtime`` are fields set at definition: the runner reads
    them per firing (async on the loop, anything else in a worker thread)."""

    class AsyncCall:
        async def __call__(self, ctx: object) -> None:
            return None

    class SyncCall:
        def __call__(self, ctx: object) -> None:
            return None

    def sync(ctx: object) -> None:
        return None

    awaited = {
        noop: True,
        AsyncCall(): True,
        AsyncCall().__call__: True,
        sync: False,
        SyncCall(): False,
    }
    for handler, expected in awaited.items():
        schedule = define_schedule(**base(handler=handler, max_runtime_ms=1500))
        assert schedule.awaits_handler is expected, handler
        assert schedule.max_runtime == timedelta(milliseconds=1500)
    target = WorkflowTarget(name="billing.dailyRollup")
    assert define_schedule(**base(workflow=target)).awaits_handler  # started, never threaded
