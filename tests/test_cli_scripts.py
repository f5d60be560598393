"""``voltro schedule …`` in scripts, as a real process against a real uvicorn server: whole
names through a pipe and on a narrow terminal, the ``--json`` shapes docs/operating.md
promises, and a refused connection retried until the app is up (or reported, naming the URL
and what to do, once the retries are spent)."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.servers import REPO, Server, free_port, uvicorn_server
from support.waiting import HANG, wait_for

from fastapi_voltro_schedules.cli.output import plain_lines
from fastapi_voltro_schedules.cli.retry import retry_delays

OPERATOR = "operator-token-for-cli-script-tests"
APP = "apps.operate_app:app"
LONG = "brokenExportToTheDataWarehouse"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cli-scripts")


@pytest.fixture(scope="module")
def env(home: Path) -> dict[str, str]:
    return {
        "VOLTRO_DATABASE_URL": f"sqlite+aiosqlite:///{home / 'voltro.db'}",
        "VOLTRO_INSPECT_TOKEN": OPERATOR,
        "VOLTRO_DEV": "",
    }


@pytest.fixture(scope="module")
def server(home: Path, env: dict[str, str]) -> Iterator[Server]:
    with uvicorn_server(APP, home, env, name="scripts") as s:
        yield s


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "fastapi_voltro_schedules", "schedule", *args]


def process_env(env: dict[str, str], **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": f"{REPO}:{REPO / 'tests'}",
        **env,
        **extra,
    }


def voltro(env: dict[str, str], *args: str, columns: int = 40) -> subprocess.CompletedProcess[str]:
    """The CLI with stdout and stderr pipes (not a terminal), on ``COLUMNS=columns``."""
    return subprocess.run(
        command(*args),
        capture_output=True,
        text=True,
        env=process_env(env, COLUMNS=str(columns)),
        timeout=HANG,
        check=False,
    )


def on_terminal(env: dict[str, str], *args: str, columns: int) -> tuple[int, str]:
    """The CLI with stdout on a pseudo-terminal ``columns`` wide (and ``COLUMNS`` saying so):
    what a person at a narrow terminal sees, escape codes removed."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    process = subprocess.Popen(
        command(*args),
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=subprocess.DEVNULL,
        env=process_env(env, COLUMNS=str(columns), TERM="xterm"),
    )
    os.close(slave)
    chunks: list[bytes] = []
    try:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(master)
        code = process.wait(HANG)
    return code, ANSI.sub("", b"".join(chunks).decode())


def test_list_through_a_pipe_prints_whole_names_at_any_width(
    server: Server, env: dict[str, str]
) -> None:
    done = voltro(env, "list", "--url", server.url, columns=40)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    # `| grep brokenExport`: the whole name, on one line with the rest of its row
    (row,) = [line for line in lines if "brokenExport" in line]
    assert row.split()[:2] == [LONG, "0"], row
    assert "Europe/Berlin" in done.stdout and "…" not in done.stdout
    assert lines[0].split() == ["name", "cron", "zone", "trigger", "next", "last", "paused"]
    assert not any(c in done.stdout for c in "┃│━─") and "\x1b[" not in done.stdout
    assert len(lines) == 1 + 4  # the header and one line per schedule, nothing wrapped
    assert max(len(line) for line in lines) > 40  # wider than COLUMNS, and not cut to it

    runs = voltro(env, "runs", LONG, "--url", server.url, columns=40)
    assert runs.returncode == 0 and runs.stdout.splitlines()[0].split()[0] == "scheduled"
    nxt = voltro(env, "next", "berlin", "--count", "2", "--url", server.url, columns=40)
    lines = nxt.stdout.splitlines()
    assert nxt.returncode == 0 and lines[0].split() == ["Europe/Berlin", "UTC", "note"]
    assert len(lines) == 3 and all("…" not in line for line in lines)


def test_list_on_a_narrow_terminal_keeps_names_whole(server: Server, env: dict[str, str]) -> None:
    code, out = on_terminal(env, "list", "--url", server.url, columns=40)
    assert code == 0, out
    assert "┃" in out  # a person at a terminal gets the table
    (row,) = [line for line in out.splitlines() if "brokenExport" in line]
    assert LONG in row and "Europe/Berlin" in out and "…" not in out


def test_json_shapes_are_the_documented_ones(
    server: Server, env: dict[str, str], home: Path
) -> None:
    listed = voltro(env, "list", "--json", "--url", server.url)
    assert listed.returncode == 0, listed.stderr
    body = json.loads(listed.stdout)
    assert set(body) == {
        "coordination", "replicaId", "firesHere", "now", "pauseAll", "schedules", "nextCursor",
    }  # fmt: skip
    assert body["nextCursor"] is None  # every page walked: the CLI prints one object
    (entry,) = [s for s in body["schedules"] if s["name"] == LONG]
    assert {
        "name", "cron", "timezone", "trigger", "onOverlap", "backfill", "maxRuntimeMs",
        "description", "nextFiring", "lastRun", "newestRun", "paused", "pause", "source",
        "lastStatus",
    } <= set(entry)  # fmt: skip

    fired = voltro(env, "fire", LONG, "--json", "--url", server.url)
    assert fired.returncode == 1, fired.stderr  # the handler raises: exit 1, the run on stdout
    run = json.loads(fired.stdout)
    assert run["status"] == "failed" and run["trigger"] == "manual"
    runs = voltro(env, "runs", LONG, "--json", "--url", server.url)
    page = json.loads(runs.stdout)
    assert set(page) == {"runs", "nextCursor"} and [r["runId"] for r in page["runs"]] == [
        run["runId"]
    ]
    assert {
        "runId", "name", "scheduledAt", "firedAt", "finishedAt", "status", "errorTag", "error",
        "terminal", "trigger", "coordinationOutcome", "replicaId", "heartbeatAt", "durationMs",
    } <= set(page["runs"][0])  # fmt: skip

    nxt = voltro(env, "next", "berlin", "--count", "2", "--json", "--url", server.url)
    shape = json.loads(nxt.stdout)
    assert set(shape) == {"name", "cron", "timezone", "occurrences"}
    assert [set(o) for o in shape["occurrences"]] == [{"utc", "local", "dst", "excluded"}] * 2

    # the ledger the CLI just wrote to audits clean: exit 0 with --json as without
    audited = voltro(env, "audit", "--json", "--database-url", env["VOLTRO_DATABASE_URL"])
    assert audited.returncode == 0, audited.stdout + audited.stderr
    report = json.loads(audited.stdout)
    assert set(report) == {
        "from", "to", "now", "rows", "gapChecked", "clean", "counts", "findings", "excluded",
        "rolledUp",
    }  # fmt: skip
    assert report["clean"] is True and report["rows"] >= 1 and report["excluded"] == 0


LATE = {
    # verb and arguments, then what its output must hold once the late app answered
    "list": (["list", "--json"], LONG),
    "backfill": (
        ["backfill", "ok", "--from", "2025-12-31T00:00:00Z", "--to", "2026-01-02T00:00:00Z"],
        "fired=1 succeeded=1",
    ),
}


@pytest.mark.parametrize("verb", sorted(LATE))
def test_a_refused_connection_is_retried_until_the_app_is_up(
    tmp_path: Path, env: dict[str, str], verb: str
) -> None:
    args, expected = LATE[verb]
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    errors = tmp_path / "cli.err"
    with errors.open("w") as err:
        cli = subprocess.Popen(
            command(*args, "--url", url, "--retry-for", str(HANG)),
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=process_env(env),
        )
    try:
        # nothing listens yet: the CLI is refused, says it retries, and keeps going
        wait_for(lambda: "refused the connection" in errors.read_text(), what="a refusal")
        assert cli.poll() is None, errors.read_text()
        home = tmp_path / "late"
        home.mkdir()
        late_env = {**env, "VOLTRO_DATABASE_URL": f"sqlite+aiosqlite:///{home / 'v.db'}"}
        with uvicorn_server(APP, home, late_env, name="late", port=port):
            out, _ = cli.communicate(timeout=HANG)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
    said = errors.read_text()
    assert cli.returncode == 0, said
    assert expected in out + said
    assert f"{url} refused the connection — retrying for up to {HANG:g} s" in said
    assert said.count("refused the connection") == 1  # said once, not per attempt


def test_a_closed_port_is_reported_with_the_url_and_the_remedy(env: dict[str, str]) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    done = voltro(env, "runs", "ok", "--url", url, "--retry-for", "0.5")
    assert done.returncode == 1 and done.stdout == ""
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"voltro schedule: cannot connect to {url}: connection refused"), last
    assert "(3 attempts over 0.5 s)" in last and "--retry-for" in last and "--url" in last
    assert "Traceback" not in done.stderr

    once = voltro(env, "list", "--url", url, "--retry-for", "0")
    assert once.returncode == 1 and "(1 attempt over 0 s)" in once.stderr
    assert "retrying" not in once.stderr and "Traceback" not in once.stderr

    backfill = voltro(
        env, "backfill", "ok", "--from", "2025-12-31T00:00:00Z", "--to", "2026-01-02T00:00:00Z",
        "--url", url, "--retry-for", "0.5",
    )  # fmt: skip
    assert backfill.returncode == 1 and "Traceback" not in backfill.stderr
    assert (
        f"voltro schedule backfill: cannot connect to {url}: connection refused (3 attempts"
        in backfill.stderr
    ), backfill.stderr


@pytest.mark.parametrize(
    ("budget", "delays"),
    [
        (0, []),
        (0.5, [0.25, 0.25]),
        (1.0, [0.25, 0.5, 0.25]),
        (10.0, [0.25, 0.5, 1.0, 2.0, 2.0, 2.0, 2.0, 0.25]),
    ],
)
def test_retry_delays_back_off_within_the_budget(budget: float, delays: list[float]) -> None:
    assert retry_delays(budget) == pytest.approx(delays)
    assert sum(retry_delays(budget)) == pytest.approx(budget)


def test_plain_lines_pad_columns_and_keep_one_row_a_line() -> None:
    lines = plain_lines(("name", "error"), [("a-long-name", "x\ny\tz"), ("b", "")])
    assert lines == ["name         error", "a-long-name  x y z", "b"]


def test_json_of_in_process_list_is_clean_stdout(tmp_path: Path, env: dict[str, str]) -> None:
    """``--app`` boots the app in this process: its log lines go to stderr, never into the
    JSON a script parses."""
    local = {**env, "VOLTRO_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'v.db'}"}
    done = subprocess.run(
        command("list", "--json", "--app", APP),
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=process_env(local),
        timeout=HANG,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    body: dict[str, Any] = json.loads(done.stdout)
    assert LONG in {s["name"] for s in body["schedules"]}
