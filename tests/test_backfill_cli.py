"""``voltro schedule backfill``: against a running app (``--url``) and in-process (``--app``).

Exit status: 0 every slot succeeded, 5 ran with failed slots, 3 needs confirmation, 4 over the
limit / another range running, 2 bad input or unknown schedule, 1 anything else.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from conftest import clean_server, run_async
from support.backfill import (
    FROM,
    INSPECT_TOKEN,
    NAME,
    TRIGGER_TOKEN,
    App,
    handler_log,
    hours,
    ledger,
    slot,
    start_app,
)
from support.servers import REPO, free_port
from typer.testing import CliRunner, Result

from fastapi_voltro_schedules import Scheduling, cli
from fastapi_voltro_schedules.backfill import RangePlan
from fastapi_voltro_schedules.cli import app as cli_app
from fastapi_voltro_schedules.enums import RunStatus, Trigger
from fastapi_voltro_schedules.migrations import upgrade_to_head

pytestmark = pytest.mark.slow

APP_SPEC = "apps.backfill_app:app"
APP_MODULE = "apps.backfill_app"


def summary_line(fired: int, succeeded: int, failed: int, already: int) -> str:
    return (
        f'voltro schedule backfill: "{NAME}" fired={fired} succeeded={succeeded} '
        f"failed={failed} (alreadySucceeded={already})"
    )


def invoke(*args: str, input: str | None = None, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(
        cli_app, ["schedule", "backfill", *args], input=input, env=env, catch_exceptions=False
    )


def via(
    app: App, *args: str, token: str | None = INSPECT_TOKEN, input: str | None = None
) -> Result:
    extra = ["--token", token] if token is not None else []
    return invoke(NAME, "--url", app.server.url, *extra, *args, input=input)


@pytest.fixture(autouse=True)
def _no_ambient_config(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("VOLTRO_INSPECT_TOKEN", "VOLTRO_APP"):
        monkeypatch.setenv(name, "x")
        monkeypatch.delenv(name)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[App]:
    with start_app(tmp_path, f"sqlite+aiosqlite:///{tmp_path / 'voltro.db'}") as app:
        yield app


# --- over HTTP (--url) ----------------------------------------------------------------------


def test_url_mode_confirmation_summary_and_already_succeeded(served: App) -> None:
    app = served
    # 26 without --yes, stdin not a terminal: the server's own words, exit 3, nothing fired.
    refused = via(app, "--from", FROM, "--to", hours(26))
    assert refused.exit_code == 3, refused.output
    detail = app.post({"from": FROM, "to": hours(26)}).json()["detail"]
    assert detail in refused.stderr
    assert "26 occurrences (0 of them already succeeded" in refused.stderr
    assert ledger(app.url) == [] and handler_log(app.log) == []

    # 25: runs without --yes; plain progress lines (no terminal), then the summary on stdout.
    ran = via(app, "--from", FROM, "--to", hours(25))
    assert ran.exit_code == 0, ran.output
    assert '"hourly-sync" — 25 occurrences' in ran.stderr and "0 already succeeded" in ran.stderr
    assert "25/25  succeeded=25 failed=0" in ran.stderr
    assert ran.stdout.strip() == summary_line(25, 25, 0, 0)

    # 26 by default: only the one with nothing recorded runs (no confirmation needed); the 25
    # that already succeeded are counted, not run again.
    gap = via(app, "--from", FROM, "--to", hours(26))
    assert gap.exit_code == 0, gap.output
    assert "25 already succeeded (not run again)" in gap.stderr and "firing 1 in" in gap.stderr
    assert gap.stdout.strip() == summary_line(1, 1, 0, 25)

    # 26 with --yes --reprocess all: the 26 that already succeeded are counted, and run again.
    confirmed = via(app, "--from", FROM, "--to", hours(26), "--yes", "--reprocess", "all")
    assert confirmed.exit_code == 0, confirmed.output
    assert "26 occurrences" in confirmed.stderr and "26 already succeeded" in confirmed.stderr
    assert confirmed.stdout.strip() == summary_line(26, 26, 0, 26)
    seen = [datetime.fromisoformat(s["scheduledAt"]) for s in handler_log(app.log)]
    assert seen == [slot(n) for n in range(1, 27)] + [slot(n) for n in range(1, 27)]
    assert {s["trigger"] for s in handler_log(app.log)} == {"manual"}


def test_url_mode_dry_run_lists_the_slots_and_fires_nothing(served: App) -> None:
    app = served
    assert via(app, "--from", FROM, "--to", hours(2)).exit_code == 0
    dry = via(app, "--from", FROM, "--to", hours(30), "--dry-run", "--reprocess", "all")
    assert dry.exit_code == 0, dry.output  # 30 slots, no --yes: a dry run asks nothing
    lines = dry.stdout.strip().splitlines()
    assert "30 occurrences, 30 would run, 0 kept (alreadySucceeded=2)" in lines[0]
    assert "dry run, nothing fired" in lines[0]
    assert lines[1].split() == ["2026-08-10T01:00:00.000Z", "succeeded", "rerun"]
    assert lines[3].split() == ["2026-08-10T03:00:00.000Z", "-", "run"]
    assert len(lines) == 31
    assert len(ledger(app.url)) == 2 and len(handler_log(app.log)) == 2

    bad = via(app, "--from", FROM, "--to", hours(2), "--reprocess", "some")
    assert bad.exit_code == 2 and "--reprocess 'some' is not one of none, failed, all" in (
        bad.stderr
    )


def test_url_mode_refusals_bad_input_and_tokens(served: App) -> None:
    app = served
    over = via(app, "--from", FROM, "--to", hours(30), "--yes", "--limit", "28")
    assert over.exit_code == 4, over.output
    assert "30 occurrences, above the limit of 28" in over.stderr
    assert "0 already succeeded" in over.stderr and "nothing fired" in over.stderr

    ceiling = via(app, "--from", FROM, "--to", hours(5), "--limit", "10001")
    assert ceiling.exit_code == 2 and "hard ceiling of 10,000" in ceiling.stderr
    backwards = via(app, "--from", hours(5), "--to", hours(5))
    assert backwards.exit_code == 2 and "is not before" in backwards.stderr
    zoneless = via(app, "--from", "2026-08-10T00:00:00", "--to", hours(5))
    assert zoneless.exit_code == 2 and "has no zone" in zoneless.stderr
    unknown = invoke("nope", "--url", app.server.url, "--token", INSPECT_TOKEN,
                     "--from", FROM, "--to", hours(1))  # fmt: skip
    assert unknown.exit_code == 2 and 'no schedule named "nope"' in unknown.stderr

    no_token = via(app, "--from", FROM, "--to", hours(1), token=None)
    assert no_token.exit_code == 1 and "no bearer token was sent" in no_token.stderr
    trigger = via(app, "--from", FROM, "--to", hours(1), token=TRIGGER_TOKEN)
    assert trigger.exit_code == 1 and "is not VOLTRO_INSPECT_TOKEN" in trigger.stderr
    assert ledger(app.url) == [] and handler_log(app.log) == []

    # The token from the environment.
    by_env = invoke(NAME, "--url", app.server.url, "--from", FROM, "--to", hours(1),
                    env={"VOLTRO_INSPECT_TOKEN": INSPECT_TOKEN})  # fmt: skip
    assert by_env.exit_code == 0 and by_env.stdout.strip() == summary_line(1, 1, 0, 0)

    closed = invoke(NAME, "--url", f"http://127.0.0.1:{free_port()}", "--token", "t",
                    "--from", FROM, "--to", hours(1), "--retry-for", "0")  # fmt: skip
    assert closed.exit_code == 1 and "connection refused (1 attempt" in closed.stderr


def test_url_mode_asks_on_a_terminal(served: App, monkeypatch: pytest.MonkeyPatch) -> None:
    app = served
    monkeypatch.setattr(cli.backfill, "_interactive", lambda: True)
    declined = via(app, "--from", FROM, "--to", hours(26), input="n\n")
    assert declined.exit_code == 3, declined.output
    assert "26 occurrences" in declined.output
    assert "0 of them already succeeded and are not run again" in declined.output
    assert "not confirmed — nothing fired" in declined.stderr
    assert ledger(app.url) == []

    accepted = via(app, "--from", FROM, "--to", hours(26), input="y\n")
    assert accepted.exit_code == 0, accepted.output
    assert accepted.stdout.strip().endswith(summary_line(26, 26, 0, 0))
    assert len(ledger(app.url)) == 26

    # Over the limit is never a question.
    over = via(app, "--from", FROM, "--to", hours(30), "--limit", "28", input="y\n")
    assert over.exit_code == 4 and "Fire all" not in over.output


def test_url_mode_failed_slot_exits_5_and_a_progress_bar_on_a_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'voltro.db'}"
    with start_app(tmp_path, url, BACKFILL_FAIL_AT=slot(3).isoformat()) as app:
        ran = via(app, "--from", FROM, "--to", hours(5))
        assert ran.exit_code == 5, ran.output
        assert "slot 3/5 failed" in ran.stderr and "1 of 5 slots failed" in ran.stderr
        assert ran.stdout.strip() == summary_line(5, 4, 1, 0)

        monkeypatch.setattr(cli.backfill, "_progress_bar_wanted", lambda: True)
        bar = via(app, "--from", FROM, "--to", hours(5), "--reprocess", "all")
        assert bar.exit_code == 5, bar.output
        assert "5/5" in bar.stderr and "succeeded=8" not in bar.stderr
        assert "slot 3/5 failed" in bar.stderr
        assert bar.stdout.strip() == summary_line(5, 4, 1, 4)
        assert "  succeeded=" not in bar.stderr  # no plain per-slot lines under the bar


# --- in this process (--app) ----------------------------------------------------------------


def run_cli(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """The real entry point in a subprocess (the app module reads its env at import)."""
    full_env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("VOLTRO_", "BACKFILL_"))},
        "PYTHONPATH": f"{REPO}:{REPO / 'tests'}",
        **env,
    }
    return subprocess.run(
        [sys.executable, "-m", "fastapi_voltro_schedules", "schedule", "backfill", *args],
        cwd=tmp_path,
        env=full_env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def direct_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'voltro.db'}"
        return
    with clean_server("postgres") as url:
        run_async(upgrade_to_head(url))
        yield url


def test_app_mode_runs_against_the_apps_database(tmp_path: Path, direct_db: str) -> None:
    log = tmp_path / "handler.jsonl"
    env = {
        "VOLTRO_DATABASE_URL": direct_db,
        "VOLTRO_REPLICA_ID": "ops-laptop",
        "BACKFILL_LOG": str(log),
        "BACKFILL_FAIL_AT": slot(3).isoformat(),
    }
    refused = run_cli(tmp_path, env, NAME, "--app", APP_SPEC, "--from", FROM, "--to", hours(26))
    assert refused.returncode == 3, refused.stderr
    assert "needs confirmation" in refused.stderr
    assert "26 occurrences (0 of them already succeeded" in refused.stderr
    assert ledger(direct_db) == [] and handler_log(log) == []

    # VOLTRO_APP names the app; slot 3 fails, the rest run: exit 5 and the summary.
    ran = run_cli(tmp_path, {**env, "VOLTRO_APP": APP_SPEC}, NAME, "--from", FROM,
                  "--to", hours(5))  # fmt: skip
    assert ran.returncode == 5, ran.stderr
    assert ran.stdout.strip() == summary_line(5, 4, 1, 0)
    assert "slot 3/5 (2026-08-10T03:00:00.000Z) failed" in ran.stderr
    runs = sorted(ledger(direct_db), key=lambda r: r.scheduled_at)
    assert [(r.scheduled_at, r.status) for r in runs] == [
        (slot(n), RunStatus.FAILED if n == 3 else RunStatus.SUCCEEDED) for n in range(1, 6)
    ]
    assert {(r.trigger, r.replica_id) for r in runs} == {(Trigger.MANUAL, "ops-laptop")}
    seen = handler_log(log)
    assert [datetime.fromisoformat(s["scheduledAt"]) for s in seen] == [
        slot(n) for n in range(1, 6)
    ]
    assert [s["runId"] for s in seen] == [r.id for r in runs]

    # --reprocess failed: the failed slot 3 runs again beside the 21 slots with nothing
    # recorded; the 4 that succeeded are not run again. Slot 3 keeps its failed row.
    again = run_cli(tmp_path, {**env, "BACKFILL_FAIL_AT": ""}, NAME, "--app", APP_SPEC,
                    "--from", FROM, "--to", hours(26), "--reprocess", "failed")  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert "26 occurrences" in again.stderr and "4 already succeeded" in again.stderr
    assert again.stdout.strip() == summary_line(22, 22, 0, 4)
    runs = ledger(direct_db)
    assert len(runs) == 27
    assert sorted(r.status for r in runs if r.scheduled_at == slot(3)) == [
        RunStatus.FAILED,
        RunStatus.SUCCEEDED,
    ]
    assert [datetime.fromisoformat(s["scheduledAt"]) for s in handler_log(log)[5:]] == [
        slot(n) for n in range(3, 27) if n not in (4, 5)
    ]


def test_app_mode_bad_input(tmp_path: Path) -> None:
    env = {"VOLTRO_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'voltro.db'}"}
    cases = [
        (("nope", "--app", APP_SPEC, "--from", FROM, "--to", hours(1)), 'no schedule named "nope"'),
        ((NAME, "--app", APP_SPEC, "--from", "yesterday", "--to", hours(1)), "ISO-8601"),
        ((NAME, "--app", APP_SPEC, "--from", FROM, "--to", hours(30), "--limit", "28"),
         "above the limit of 28"),
        ((NAME, "--from", FROM, "--to", hours(1)), "give --url"),
        ((NAME, "--app", "support.servers:REPO", "--from", FROM, "--to", hours(1)),
         "no Scheduling in module 'support.servers'"),
        # Year 10000 in UTC: an OverflowError traceback before the range was checked.
        ((NAME, "--app", APP_SPEC, "--from", FROM, "--to", "9999-12-31T23:59:59-01:00"),
         "to=9999-12-31T23:59:59-01:00 is outside"),
    ]  # fmt: skip
    codes = []
    for args, words in cases:
        result = run_cli(tmp_path, env, *args)
        assert words in result.stderr, result.stderr
        codes.append(result.returncode)
    assert codes == [2, 2, 4, 2, 2, 2]


def test_app_mode_asks_on_a_terminal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'voltro.db'}"
    monkeypatch.setenv("VOLTRO_DATABASE_URL", url)
    monkeypatch.setenv("BACKFILL_LOG", str(tmp_path / "handler.jsonl"))
    monkeypatch.delitem(sys.modules, APP_MODULE, raising=False)
    monkeypatch.setattr(cli.backfill, "_interactive", lambda: True)
    declined = invoke(NAME, "--app", APP_SPEC, "--from", FROM, "--to", hours(26), input="n\n")
    assert declined.exit_code == 3, declined.output
    assert "26 occurrences" in declined.output and "0 of them already succeeded" in declined.output
    accepted = invoke(NAME, "--app", APP_SPEC, "--from", FROM, "--to", hours(26), input="y\n")
    assert accepted.exit_code == 0, accepted.output
    assert accepted.stdout.strip().endswith(summary_line(26, 26, 0, 0))
    assert len(handler_log(tmp_path / "handler.jsonl")) == 26
    monkeypatch.delitem(sys.modules, APP_MODULE, raising=False)


def test_app_mode_plans_the_range_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The range counted and shown is the one fired: planned once, then run — not planned
    again inside the run (on a terminal, a declined or answered confirmation plans again)."""
    monkeypatch.setenv("VOLTRO_DATABASE_URL", f"sqlite+aiosqlite:///{tmp_path / 'voltro.db'}")
    monkeypatch.setenv("BACKFILL_LOG", str(tmp_path / "handler.jsonl"))
    monkeypatch.delitem(sys.modules, APP_MODULE, raising=False)
    plan_backfill = Scheduling.plan_backfill
    plans: list[str] = []

    async def counted(self: Scheduling, name: str, *args: Any, **kwargs: Any) -> RangePlan:
        plans.append(name)
        return await plan_backfill(self, name, *args, **kwargs)

    monkeypatch.setattr(Scheduling, "plan_backfill", counted)
    ran = invoke(NAME, "--app", APP_SPEC, "--from", FROM, "--to", hours(3), "--yes")
    assert ran.exit_code == 0, ran.output
    assert ran.stdout.strip().endswith(summary_line(3, 3, 0, 0))
    assert plans == [NAME]
    monkeypatch.delitem(sys.modules, APP_MODULE, raising=False)


def test_find_scheduling(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "voltro_test_pkg_two.py").write_text(
        "from fastapi_voltro_schedules import Scheduling\n"
        "a = Scheduling([])\nb = Scheduling([])\napp = object()\n"
    )
    (tmp_path / "voltro_test_pkg_state.py").write_text(
        "from fastapi import FastAPI\nfrom fastapi_voltro_schedules import Scheduling\n"
        "app = FastAPI()\napp.state.scheduling = Scheduling([])\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(cli.CliError, match="holds 2 Scheduling objects"):
        cli.find_scheduling("voltro_test_pkg_two:app")
    two = importlib.import_module("voltro_test_pkg_two")
    state = importlib.import_module("voltro_test_pkg_state")

    assert cli.find_scheduling("voltro_test_pkg_two:b") == (two.b, None)
    assert cli.find_scheduling("voltro_test_pkg_state:app") == (
        state.app.state.scheduling,
        state.app,
    )
    for name in ("voltro_test_pkg_two", "voltro_test_pkg_state"):
        monkeypatch.delitem(sys.modules, name)
