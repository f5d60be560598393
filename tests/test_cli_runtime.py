"""``voltro schedule put|delete`` (SPEC §7): run-time schedules from the command line, over
HTTP (``--url``) and in-process (``--app``), with the API's refusals as exit codes (2 a bad
field or an unknown name, 1 a name declared in code)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from support.servers import Server
from test_cli_operate import APP, OPERATOR, READ, cli, env, in_process, server, via_url  # noqa: F401

Run = Callable[..., tuple[int, str, str]]


def exercise(go: Run) -> None:
    code, out, err = go(
        "put", "report.acme", "--cron", "0 9 * * *", "--timezone", "Europe/Berlin",
        "--handler", "tenantReport", "--args", '{"tenant": "acme"}', "--json",
    )  # fmt: skip
    assert code == 0, (out, err)
    view = json.loads(out)
    assert (view["name"], view["source"], view["timezone"]) == (
        "report.acme",
        "runtime",
        "Europe/Berlin",
    )
    code, out, err = go(
        "put", "report.acme", "--cron", "30 9 * * *", "--timezone", "Europe/Berlin",
        "--handler", "tenantReport", "--on-overlap", "queue",
    )  # fmt: skip
    assert code == 0 and out.startswith("report.acme: 30 9 * * * (Europe/Berlin)"), (out, err)

    code, out, _ = go("list", "--json")
    schedules = {s["name"]: s for s in json.loads(out)["schedules"]}
    assert schedules["report.acme"]["source"] == "runtime"
    assert schedules["report.acme"]["onOverlap"] == "queue"
    assert schedules["ok"]["source"] == "code"

    code, _, err = go(
        "put", "report.acme", "--cron", "0 25 * * *", "--timezone", "UTC", "--handler",
        "tenantReport",
    )  # fmt: skip
    assert code == 2 and "cron" in err, err
    code, _, err = go(
        "put", "report.acme", "--cron", "0 9 * * *", "--timezone", "UTC", "--handler", "nope"
    )
    assert code == 2 and "handler" in err and "tenantReport" in err, err
    code, _, err = go(
        "put", "report.acme", "--cron", "0 9 * * *", "--timezone", "UTC", "--handler",
        "tenantReport", "--args", "{not json",
    )  # fmt: skip
    assert code == 2 and "--args is not JSON" in err, err
    code, _, err = go(
        "put", "ok", "--cron", "0 9 * * *", "--timezone", "UTC", "--handler", "tenantReport"
    )
    assert code == 1 and "declared in code" in err, err

    code, out, err = go("delete", "report.acme")
    assert code == 0 and out.strip() == "report.acme: deleted", (out, err)
    code, _, err = go("delete", "report.acme")
    assert code == 2 and 'no schedule named "report.acme"' in err, err
    code, out, _ = go("list", "--json")
    assert "report.acme" not in {s["name"] for s in json.loads(out)["schedules"]}


@pytest.mark.slow
def test_put_and_delete_over_http(server: Server) -> None:  # noqa: F811
    exercise(lambda *args: via_url(server, *args))
    code, _, err = via_url(
        server, "put", "x", "--cron", "0 9 * * *", "--timezone", "UTC", "--handler",
        "tenantReport", token=READ,
    )  # fmt: skip
    assert code == 1 and "403" in err


def test_put_and_delete_in_process(in_process: None) -> None:  # noqa: F811
    exercise(lambda *args: cli(*args, "--app", APP))
