"""``voltro schedule list|runs|fire|next|pause|resume``, against a live uvicorn server
(``--url``) and in-process (``--app``)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from support.servers import Server, uvicorn_server
from typer.testing import CliRunner

from fastapi_voltro_schedules.cli import app as cli_app
from fastapi_voltro_schedules.cli.operate import dst_note
from fastapi_voltro_schedules.cron import CronSpec

OPERATOR = "operator-token-for-cli-tests"
READ = "viewer-token-for-cli-tests-x"
APP = "apps.operate_app:app"


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    values = {
        "VOLTRO_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'voltro.db'}",
        "VOLTRO_INSPECT_TOKEN": OPERATOR,
        "VOLTRO_INSPECT_READ_TOKEN": READ,
        "VOLTRO_DEV": "",
    }
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    return values


@pytest.fixture
def server(tmp_path: Path, env: dict[str, str]) -> Iterator[Server]:
    with uvicorn_server(APP, tmp_path, env, name="operate") as s:
        yield s


def cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli_app, ["schedule", *args])
    return result.exit_code, result.stdout, result.stderr


def via_url(server: Server, *args: str, token: str = OPERATOR) -> tuple[int, str, str]:
    return cli(*args, "--url", server.url, "--token", token)


@pytest.fixture
def in_process(env: dict[str, str]) -> Iterator[None]:
    sys.modules.pop("apps.operate_app", None)  # re-read the config from this test's env
    yield
    sys.modules.pop("apps.operate_app", None)


def exercise(run: object) -> None:
    """The same script in both modes; ``run(*args)`` → (exit, stdout, stderr)."""
    go = run  # type: ignore[assignment]
    code, out, _ = go("list", "--json")
    assert code == 0, out
    names = {s["name"] for s in json.loads(out)["schedules"]}
    assert names == {"ok", "boom", "berlin", "brokenExportToTheDataWarehouse"}
    code, out, _ = go("list")
    assert code == 0 and "berlin" in out and "Europe/Berlin" in out

    code, out, err = go("fire", "ok")
    assert code == 0, (out, err)
    assert out.startswith("ok: succeeded")
    code, out, err = go("fire", "boom", "--json")
    assert code == 1, (out, err)
    failed = json.loads(out)
    assert failed["status"] == "failed" and "boom on purpose" in failed["error"]
    # the listing's filters, paged through a page at a time (issue 35)
    code, out, _ = go("list", "--status", "failed", "--json")
    assert code == 0 and [s["name"] for s in json.loads(out)["schedules"]] == ["boom"]
    code, out, _ = go("list", "--prefix", "b", "--page-size", "1", "--json")
    paged = json.loads(out)
    assert [s["name"] for s in paged["schedules"]] == [
        "berlin",
        "boom",
        "brokenExportToTheDataWarehouse",
    ]
    assert paged["nextCursor"] is None
    code, out, _ = go("list", "--source", "runtime", "--json")
    assert code == 0 and json.loads(out)["schedules"] == []
    code, out, err = go("list", "--status", "running")
    assert code == 2 and "no outcome" in err, (out, err)

    code, out, _ = go("runs", "boom", "--json")
    assert code == 0 and [r["status"] for r in json.loads(out)["runs"]] == ["failed"]
    code, out, _ = go("runs", "ok", "--status", "failed", "--json")
    assert code == 0 and json.loads(out)["runs"] == []
    code, out, _ = go("runs", "ok")
    assert code == 0 and "succeeded" in out and "manual" in out

    code, out, _ = go("pause", "ok", "--reason", "maintenance")
    assert code == 0 and out.startswith("ok: paused since"), out
    code, out, _ = go("list", "--json")
    (entry,) = [s for s in json.loads(out)["schedules"] if s["name"] == "ok"]
    assert entry["paused"] and entry["pause"]["reason"] == "maintenance"
    code, out, _ = go("list", "--paused", "--json")
    assert [s["name"] for s in json.loads(out)["schedules"]] == ["ok"]
    code, out, err = go("fire", "ok")
    assert code == 1 and "is paused" in err and "voltro schedule resume ok" in err
    code, out, _ = go("resume", "ok")
    assert code == 0 and out.strip() == "ok: resumed"
    code, out, _ = go("resume", "ok")
    assert code == 0 and out.strip() == "ok: was not paused"

    # Every schedule at once: a window with an end, shown above the listing; Run now refused
    # with the remedy; resume --all ends it.
    until = (datetime.now(UTC) + timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    code, out, err = go("pause", "--all", "--until", until, "--reason", "db upgrade")
    assert code == 0 and out.startswith("every schedule: paused since"), (out, err)
    assert f"until {until[:19]}" in out
    code, out, _ = go("list")
    assert code == 0 and "every schedule paused since" in out and "db upgrade" in out
    code, out, _ = go("list", "--json")
    assert json.loads(out)["pauseAll"]["until"].startswith(until[:19])
    assert all(s["paused"] and s["pause"]["everySchedule"] for s in json.loads(out)["schedules"])
    code, out, err = go("fire", "ok")
    assert code == 1 and "paused with every schedule" in err and "resume --all" in err
    code, out, _ = go("resume", "--all")
    assert code == 0 and out.strip() == "every schedule: resumed"
    code, out, _ = go("resume", "--all")
    assert code == 0 and out.strip() == "every schedule: was not paused"
    code, _, err = go("pause", "ok", "--all")
    assert code == 2 and "NAME or --all" in err
    code, _, err = go("pause", "--all", "--until", "2020-01-01T00:00:00Z")
    assert code == 2 and "is not after now" in err

    code, out, _ = go("next", "berlin", "--count", "3", "--json")
    assert code == 0
    body = json.loads(out)
    assert body["timezone"] == "Europe/Berlin" and len(body["occurrences"]) == 3

    code, _, err = go("runs", "nope")
    assert code == 2 and 'no schedule named "nope"' in err


@pytest.mark.slow
def test_operator_verbs_over_http(server: Server) -> None:
    exercise(lambda *args: via_url(server, *args))
    # the read-only token reads but may not fire or pause
    assert via_url(server, "list", token=READ)[0] == 0
    code, _, err = via_url(server, "pause", "ok", token=READ)
    assert code == 1 and "403" in err and "operator role" in err
    code, _, err = via_url(server, "list", token="wrong-token-but-long-enough")
    assert code == 1 and "401" in err
    assert OPERATOR not in server.log() and READ not in server.log()


def test_operator_verbs_in_process(in_process: None) -> None:
    exercise(lambda *args: cli(*args, "--app", APP))


def test_url_or_app_exactly_one() -> None:
    code, _, err = cli("list")
    assert code == 2 and "exactly one of --app" in err


@pytest.mark.parametrize(
    ("utc", "note"),
    [
        # 2026-03-29: 02:30 Berlin does not exist; the fixed-time job fires at 03:00 CEST
        (datetime(2026, 3, 29, 1, 0, tzinfo=UTC), "does not exist"),
        (datetime(2026, 3, 30, 0, 30, tzinfo=UTC), None),
        # 2026-10-25: 02:30 happens twice; a fixed-time job fires on the first pass only
        (datetime(2026, 10, 25, 0, 30, tzinfo=UTC), "fires once, on the first pass"),
    ],
)
def test_dst_notes_follow_the_cron_rules(utc: datetime, note: str | None) -> None:
    spec = CronSpec.parse("30 2 * * *", "Europe/Berlin")
    assert spec.next_occurrence(utc - timedelta(hours=12)) == utc
    found = dst_note(spec, utc)
    assert (found is None) if note is None else (found is not None and note in found)


def test_dst_note_marks_both_passes_of_a_wildcard_job() -> None:
    spec = CronSpec.parse("30 * * * *", "Europe/Berlin")
    first = datetime(2026, 10, 25, 0, 30, tzinfo=UTC)  # 02:30 CEST
    second = datetime(2026, 10, 25, 1, 30, tzinfo=UTC)  # 02:30 CET
    assert spec.next_occurrence(first) == second
    assert dst_note(spec, first) == "DST: repeated hour, pass 1 of 2"
    assert dst_note(spec, second) == "DST: repeated hour, pass 2 of 2"
