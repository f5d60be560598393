"""Token parsing and checks at boot, role lookup, and the dashboard session cookie."""

from __future__ import annotations

import logging

import pytest
from fastapi import FastAPI

from fastapi_voltro_schedules import Scheduling, SchedulingConfig, define_schedule, devtokens
from fastapi_voltro_schedules.api.session import (
    make_session_cookie_value,
    verify_session,
)
from fastapi_voltro_schedules.errors import ConfigurationError
from fastapi_voltro_schedules.tokens import (
    MIN_TOKEN_LENGTH,
    Role,
    Tokens,
    load_tokens,
    parse_token_list,
)

OP_NEW = "operator-new-0123456789"
OP_OLD = "operator-old-0123456789"
READ_NEW = "viewer-new-0123456789ab"
READ_OLD = "viewer-old-0123456789ab"
TRIG = "trigger-0123456789abcdef"


def tokens(**kw: str) -> Tokens:
    return load_tokens(SchedulingConfig(**kw))  # type: ignore[arg-type]


def test_lists_rotate_and_roles_resolve() -> None:
    t = tokens(
        schedule_trigger_token=TRIG,
        inspect_token=f"{OP_NEW},{OP_OLD}",
        inspect_read_token=f"{READ_NEW}, {READ_OLD}",
    )
    assert t.inspect_role(OP_NEW) is Role.OPERATOR and t.inspect_role(OP_OLD) is Role.OPERATOR
    assert t.inspect_role(READ_NEW) is Role.READ and t.inspect_role(READ_OLD) is Role.READ
    assert t.inspect_role(TRIG) is None  # the trigger token never opens the inspect routes
    assert t.inspect_role(OP_NEW + "x") is None and t.inspect_role("") is None
    assert t.is_trigger(TRIG) and not t.is_trigger(OP_NEW)
    assert OP_NEW not in repr(t) and repr(t) == "Tokens(trigger=1, operator=2, read=2)"


def test_whitespace_is_stripped_with_a_warning_naming_the_variable() -> None:
    t = tokens(inspect_token=f"  {OP_NEW}\n", schedule_trigger_token=TRIG)
    assert t.inspect_role(OP_NEW) is Role.OPERATOR
    assert len(t.warnings) == 1
    (warning,) = t.warnings
    assert warning.startswith("VOLTRO_INSPECT_TOKEN: surrounding whitespace stripped")
    assert OP_NEW not in warning


def test_empty_means_unset() -> None:
    t = tokens(inspect_token="  \n", schedule_trigger_token="")
    assert not t.inspect_configured and not t.trigger_configured


@pytest.mark.parametrize(
    "variable", ["schedule_trigger_token", "inspect_token", "inspect_read_token"]
)
def test_a_short_token_is_refused_naming_the_variable(variable: str) -> None:
    short = "x" * (MIN_TOKEN_LENGTH - 1)
    with pytest.raises(ConfigurationError) as err:
        tokens(**{variable: f"{OP_NEW if variable != 'inspect_token' else READ_NEW},{short}"})
    message = str(err.value)
    assert (
        f"VOLTRO_{variable.upper()}: value 2 of 2 is {MIN_TOKEN_LENGTH - 1} characters" in message
    )
    assert short not in message
    # exactly the minimum is fine
    assert parse_token_list("V", "y" * MIN_TOKEN_LENGTH).values == (b"y" * MIN_TOKEN_LENGTH,)


@pytest.mark.parametrize(
    ("kw", "first", "second"),
    [
        (
            {"schedule_trigger_token": TRIG, "inspect_token": f"{OP_NEW},{TRIG}"},
            "VOLTRO_SCHEDULE_TRIGGER_TOKEN",
            "VOLTRO_INSPECT_TOKEN",
        ),
        (
            {"inspect_token": OP_NEW, "inspect_read_token": f" {OP_NEW}\n"},
            "VOLTRO_INSPECT_TOKEN",
            "VOLTRO_INSPECT_READ_TOKEN",
        ),
        (
            {"schedule_trigger_token": READ_OLD, "inspect_read_token": f"{READ_NEW},{READ_OLD}"},
            "VOLTRO_SCHEDULE_TRIGGER_TOKEN",
            "VOLTRO_INSPECT_READ_TOKEN",
        ),
    ],
)
def test_one_value_under_two_variables_is_refused_naming_both(
    kw: dict[str, str], first: str, second: str
) -> None:
    with pytest.raises(ConfigurationError) as err:
        tokens(**kw)
    message = str(err.value)
    assert message.startswith(f"{first} and {second} hold the same token")
    for value in (TRIG, OP_NEW, READ_OLD):
        assert value not in message


async def test_boot_refuses_bad_tokens_and_logs_the_strip_warning(
    sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    job = define_schedule(name="job", cron="0 3 * * *", timezone="UTC", handler=lambda ctx: None)
    bad = Scheduling([job], config=SchedulingConfig(database_url=sqlite_url, inspect_token="short"))
    with pytest.raises(ConfigurationError, match="VOLTRO_INSPECT_TOKEN: its value is 5"):
        async with bad.run(FastAPI()):
            pass
    good = Scheduling(
        [job], config=SchedulingConfig(database_url=sqlite_url, inspect_token=OP_NEW + "\n")
    )
    with caplog.at_level(logging.WARNING, logger="fastapi_voltro_schedules"):
        async with good.run(FastAPI(), arm=False):
            assert good.tokens.inspect_role(OP_NEW) is Role.OPERATOR
    lines = [r.getMessage() for r in caplog.records if "whitespace stripped" in r.getMessage()]
    assert len(lines) == 1 and "VOLTRO_INSPECT_TOKEN" in lines[0]
    assert all(OP_NEW not in r.getMessage() for r in caplog.records)


def test_dev_minted_tokens_pass_the_boot_check(tmp_path: object) -> None:
    minted = devtokens.load_or_mint(str(tmp_path))
    t = tokens(schedule_trigger_token=minted.trigger, inspect_token=minted.inspect)
    assert t.is_trigger(minted.trigger) and t.inspect_role(minted.inspect) is Role.OPERATOR


def test_a_hand_edited_dev_file_with_a_short_token_is_replaced(tmp_path: object) -> None:
    first = devtokens.load_or_mint(str(tmp_path))
    first.path.write_text('{"schedule_trigger_token": "abc", "inspect_token": "defghijk"}')
    again = devtokens.load_or_mint(str(tmp_path))
    assert again.minted and len(again.trigger) >= MIN_TOKEN_LENGTH
    assert len(again.inspect) >= MIN_TOKEN_LENGTH


# ------------------------------------------------------------------------ session cookie


def test_session_cookie_roundtrip_rotation_and_no_promotion() -> None:
    t = tokens(inspect_token=f"{OP_NEW},{OP_OLD}", inspect_read_token=READ_NEW)
    until, now = 2_000_000_000, 1_999_999_000.0
    op = make_session_cookie_value(Role.OPERATOR, OP_OLD, until)
    read = make_session_cookie_value(Role.READ, READ_NEW, until)
    assert op.startswith(f"operator.{until}.") and OP_OLD not in op
    assert verify_session(op, t, now) is Role.OPERATOR
    assert verify_session(read, t, now) is Role.READ
    # A read token's MAC relabelled as operator is no operator session.
    assert verify_session("operator." + read.partition(".")[2], t, now) is None
    # Signed with a token of the other role, or a token no longer configured: refused.
    forged = make_session_cookie_value(Role.OPERATOR, READ_NEW, until)
    assert verify_session(forged, t, now) is None
    rotated = tokens(inspect_token=OP_NEW, inspect_read_token=READ_NEW)
    assert verify_session(op, rotated, now) is None  # OP_OLD rotated out: signed out
    for junk in ("", "operator", "admin.00", "operator.zz", "read." + "0" * 64, "read.1.00"):
        assert verify_session(junk, t, now) is None


def test_session_cookie_expires_and_cannot_be_extended() -> None:
    t = tokens(inspect_token=OP_NEW, inspect_read_token=READ_NEW)
    until = 2_000_000_000
    op = make_session_cookie_value(Role.OPERATOR, OP_NEW, until)
    assert verify_session(op, t, until - 1) is Role.OPERATOR
    assert verify_session(op, t, until) is None  # expired: the server refuses it
    # a later expiry written over the signed one breaks the MAC
    mac = op.split(".", 2)[2]
    assert verify_session(f"operator.{until + 3600}.{mac}", t, until) is None
