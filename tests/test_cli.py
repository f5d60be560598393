"""``voltro dev`` / ``voltro serve`` / ``voltro start``, and the dev-token file behind ``dev``.

Unit tests drive the token module and the Typer app in-process (uvicorn replaced by a recorder);
the real tests run the ``voltro`` console script as a subprocess and talk to it over HTTP.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.servers import REPO, Server, free_port
from support.waiting import HANG
from typer.testing import CliRunner

from fastapi_voltro_schedules import cli, devtokens
from fastapi_voltro_schedules.cli import app as cli_app

TRIGGER = devtokens.TRIGGER_TOKEN_ENV
INSPECT = devtokens.INSPECT_TOKEN_ENV
DEV = devtokens.DEV_ENV
TOKEN_RE = re.compile(r"^[A-Za-z0-9_-]{43}$")  # token_urlsafe(32)


def plain(text: str) -> str:
    """CLI output with Rich's box drawing and line wrapping flattened to single spaces."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No token / dev / app variables in this process, restored after the test.

    ``setenv`` first so that monkeypatch remembers the original state: the code under test
    writes these variables into ``os.environ``, and they must not leak into other tests.
    """
    for name in (TRIGGER, INSPECT, DEV, "VOLTRO_APP"):
        monkeypatch.setenv(name, "x")
        monkeypatch.delenv(name)


@pytest.fixture
def uvicorn_calls(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Replace the uvicorn launch with a recorder; each call also snapshots the env."""
    calls: list[dict[str, Any]] = []

    def record(
        spec: str,
        host: str,
        port: int,
        app_dir: Path,
        *,
        reload: bool,
        server: cli.serve.ServerOptions | None = None,
    ) -> None:
        calls.append(
            {
                "spec": spec,
                "host": host,
                "port": port,
                "app_dir": app_dir,
                "reload": reload,
                "server": server,
                "env": {k: os.environ.get(k) for k in (TRIGGER, INSPECT, DEV)},
            }
        )

    monkeypatch.setattr(cli.serve, "_run_uvicorn", record)
    return calls


# --- the token file -------------------------------------------------------------------------


def test_tokens_are_minted_0600_in_a_gitignored_dir(tmp_path: Path) -> None:
    tokens = devtokens.load_or_mint(tmp_path)
    path = tmp_path / ".voltro" / "dev-tokens.json"
    assert tokens.path == path.resolve()
    assert tokens.minted
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert (path.parent / ".gitignore").read_text() == "*\n"
    assert TOKEN_RE.match(tokens.trigger) and TOKEN_RE.match(tokens.inspect)
    assert tokens.trigger != tokens.inspect
    stored = json.loads(path.read_text())
    assert stored == {"schedule_trigger_token": tokens.trigger, "inspect_token": tokens.inspect}
    # no temp file left beside it
    assert sorted(p.name for p in path.parent.iterdir()) == [".gitignore", "dev-tokens.json"]
    # the values never show in a repr (a log line, a traceback)
    assert tokens.trigger not in repr(tokens) and tokens.inspect not in repr(tokens)


def test_tokens_are_reused_on_a_second_call(tmp_path: Path) -> None:
    first = devtokens.load_or_mint(tmp_path)
    second = devtokens.load_or_mint(tmp_path)
    assert not second.minted
    assert (second.trigger, second.inspect) == (first.trigger, first.inspect)


def test_mint_is_stable_under_a_restrictive_umask(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        tokens = devtokens.load_or_mint(tmp_path)
    finally:
        os.umask(old)
    assert stat.S_IMODE(tokens.path.stat().st_mode) == 0o600


def test_a_widened_file_is_narrowed_back_to_0600(tmp_path: Path) -> None:
    first = devtokens.load_or_mint(tmp_path)
    first.path.chmod(0o644)
    again = devtokens.load_or_mint(tmp_path)
    assert again.trigger == first.trigger
    assert stat.S_IMODE(first.path.stat().st_mode) == 0o600


@pytest.mark.parametrize(
    "content",
    ["", "not json", "[]", '{"schedule_trigger_token": "a"}', '{"a": 1}',
     '{"schedule_trigger_token": "same", "inspect_token": "same"}'],
)  # fmt: skip
def test_an_unusable_file_is_replaced_by_fresh_tokens(tmp_path: Path, content: str) -> None:
    path = devtokens.tokens_path(tmp_path)
    path.parent.mkdir()
    path.write_text(content)
    tokens = devtokens.load_or_mint(tmp_path)
    assert tokens.minted
    assert TOKEN_RE.match(tokens.trigger)
    assert json.loads(path.read_text())["inspect_token"] == tokens.inspect
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_gitignore_that_ignores_nothing_is_rewritten(tmp_path: Path) -> None:
    (tmp_path / ".voltro").mkdir()
    (tmp_path / ".voltro" / ".gitignore").write_text("# hello\n")
    devtokens.load_or_mint(tmp_path)
    assert (tmp_path / ".voltro" / ".gitignore").read_text() == "*\n"


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_git_really_ignores_the_token_file(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("__pycache__/\n")  # the project's own, unaware of us
    tokens = devtokens.load_or_mint(tmp_path)
    ignored = subprocess.run(
        ["git", "-C", str(tmp_path), "check-ignore", "-q", str(tokens.path)], check=False
    )
    assert ignored.returncode == 0
    status = subprocess.run(
        ["git", "-C", str(tmp_path), "status", "--porcelain", "--untracked-files=all"],
        check=True,
        capture_output=True,
        text=True,
    )
    assert ".voltro" not in status.stdout


def test_is_dev_mode_reads_voltro_dev() -> None:
    assert devtokens.is_dev_mode({DEV: "1"})
    assert devtokens.is_dev_mode({DEV: "true"})
    assert not devtokens.is_dev_mode({DEV: "0"})
    assert not devtokens.is_dev_mode({})


# --- the dev environment ----------------------------------------------------------------------


def test_dev_environment_exports_the_file_tokens_and_dev_mode(tmp_path: Path) -> None:
    env: dict[str, str] = {}
    lines = cli.dev_environment(tmp_path, env)
    tokens = devtokens.load_or_mint(tmp_path)
    assert env == {DEV: "1", TRIGGER: tokens.trigger, INSPECT: tokens.inspect}
    banner = "\n".join(lines)
    assert f"trigger token  ({TRIGGER}) = {tokens.trigger}" in banner
    assert f"inspect token  ({INSPECT}) " in banner and banner.count(tokens.inspect) == 1
    assert str(tokens.path) in banner and "minted" in banner
    # second boot: same tokens, said to be kept, not minted
    again = cli.dev_environment(tmp_path, {})
    assert tokens.trigger in "\n".join(again) and "minted" not in "\n".join(again)


def test_a_user_set_token_wins_and_is_not_printed(tmp_path: Path) -> None:
    env = {TRIGGER: "my-own-trigger-token"}
    lines = cli.dev_environment(tmp_path, env)
    banner = "\n".join(lines)
    tokens = devtokens.load_or_mint(tmp_path)
    assert env[TRIGGER] == "my-own-trigger-token"
    assert env[INSPECT] == tokens.inspect
    assert "my-own-trigger-token" not in banner
    assert tokens.trigger not in banner  # the file's trigger token is not in use: not shown
    assert f"({TRIGGER}) = set in the environment (not shown)" in banner
    assert tokens.inspect in banner


def test_both_tokens_user_set_touch_no_file(tmp_path: Path) -> None:
    env = {TRIGGER: "t-mine", INSPECT: "i-mine"}
    lines = cli.dev_environment(tmp_path, env)
    assert env == {TRIGGER: "t-mine", INSPECT: "i-mine", DEV: "1"}
    assert not (tmp_path / ".voltro").exists()
    assert "t-mine" not in "\n".join(lines) and "i-mine" not in "\n".join(lines)


def test_an_empty_token_counts_as_unset(tmp_path: Path) -> None:
    env = {TRIGGER: "", INSPECT: "  "}
    cli.dev_environment(tmp_path, env)
    assert TOKEN_RE.match(env[TRIGGER]) and TOKEN_RE.match(env[INSPECT])


def test_serve_note_names_only_the_unset_tokens() -> None:
    both = cli.serve_note({})
    assert both is not None
    assert "trigger and inspect routes will answer 503" in both
    assert TRIGGER in both and INSPECT in both
    only_inspect = cli.serve_note({TRIGGER: "secret-value"})
    assert only_inspect is not None
    assert "inspect routes" in only_inspect and "secret-value" not in only_inspect
    assert TRIGGER not in only_inspect
    assert cli.serve_note({TRIGGER: "a", INSPECT: "b"}) is None


# --- the Typer commands (uvicorn replaced) ----------------------------------------------------


@pytest.mark.parametrize(
    "spec",
    ["foo", ":app", "foo:", "foo:bar:baz", "foo bar:app", "1mod:app", "mod:app()", "a..b:app",
     "/abs/path:app", "mod:"],
)  # fmt: skip
def test_app_spec_validation(spec: str) -> None:
    with pytest.raises(cli.CliError, match=re.escape(cli.APP_SPEC_HELP)):
        cli.validate_app_spec(spec)


@pytest.mark.parametrize("spec", ["main:app", "example_app.main:app", "pkg.mod:obj.app"])
def test_app_spec_validation_accepts(spec: str) -> None:
    assert cli.validate_app_spec(spec) == spec


@pytest.mark.parametrize("command", ["dev", "serve", "start"])
def test_a_malformed_app_is_a_usage_error(
    command: str, clean_env: None, uvicorn_calls: list[dict[str, Any]]
) -> None:
    result = CliRunner().invoke(cli_app, [command, "--app", "example_app.main"])
    assert result.exit_code == 2
    out = plain(result.output)
    assert "Invalid value for '--app'" in out
    assert "'example_app.main': expected module:attribute, e.g. example_app.main:app" in out
    assert uvicorn_calls == []


@pytest.mark.parametrize("command", ["dev", "serve", "start"])
def test_app_is_required_unless_voltro_app_is_set(
    command: str,
    clean_env: None,
    uvicorn_calls: list[dict[str, Any]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    missing = CliRunner().invoke(cli_app, [command])
    assert missing.exit_code == 2
    assert "Missing option '--app'" in plain(missing.output)
    ok = CliRunner().invoke(cli_app, [command], env={"VOLTRO_APP": "example_app.main:app"})
    assert ok.exit_code == 0, ok.output
    assert uvicorn_calls[-1]["spec"] == "example_app.main:app"
    bad = CliRunner().invoke(cli_app, [command], env={"VOLTRO_APP": "nocolon"})
    assert bad.exit_code == 2
    assert "expected module:attribute" in plain(bad.output)


def test_dev_defaults_and_tokens(
    clean_env: None,
    uvicorn_calls: list[dict[str, Any]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli_app, ["dev", "--app", "example_app.main:app"])
    assert result.exit_code == 0, result.output
    [call] = uvicorn_calls
    assert call["host"] == "127.0.0.1" and call["port"] == 8000
    assert call["reload"] is True
    assert call["app_dir"] == Path(".")
    tokens = devtokens.load_or_mint(tmp_path)
    assert call["env"] == {TRIGGER: tokens.trigger, INSPECT: tokens.inspect, DEV: "1"}
    assert tokens.trigger in result.output and tokens.inspect in result.output

    result = CliRunner().invoke(
        cli_app,
        ["dev", "--app", "m:app", "--no-reload", "--host", "0.0.0.0", "--port", "9001",
         "--app-dir", str(tmp_path)],
        env={TRIGGER: "user-trigger"},
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    call = uvicorn_calls[-1]
    assert (call["host"], call["port"], call["reload"]) == ("0.0.0.0", 9001, False)
    assert call["app_dir"] == tmp_path
    assert call["env"][TRIGGER] == "user-trigger"
    assert "user-trigger" not in result.output


def test_app_dir_must_exist(clean_env: None, uvicorn_calls: list[dict[str, Any]]) -> None:
    result = CliRunner().invoke(cli_app, ["serve", "--app", "m:app", "--app-dir", "/no/such/dir"])
    assert result.exit_code == 2
    assert uvicorn_calls == []


@pytest.mark.parametrize("command", ["serve", "start"])
def test_serve_mints_nothing_and_leaves_dev_mode(
    command: str,
    clean_env: None,
    uvicorn_calls: list[dict[str, Any]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(DEV, "1")  # exported by hand: serve must not run in dev mode
    result = CliRunner().invoke(cli_app, [command, "--app", "example_app.main:app"])
    assert result.exit_code == 0, result.output
    [call] = uvicorn_calls
    assert call["reload"] is False
    assert call["env"] == {TRIGGER: None, INSPECT: None, DEV: None}
    assert not (tmp_path / ".voltro").exists()
    out = plain(result.output)
    assert f"voltro {command}: the trigger and inspect routes will answer 503 until" in out
    assert f"voltro {command}: ignoring VOLTRO_DEV" in out


def test_serve_with_tokens_set_prints_no_note_and_no_token(
    clean_env: None, uvicorn_calls: list[dict[str, Any]]
) -> None:
    env = {TRIGGER: "prod-trigger-secret", INSPECT: "prod-inspect-secret"}
    result = CliRunner().invoke(cli_app, ["serve", "--app", "m:app"], env=env)
    assert result.exit_code == 0, result.output
    assert result.output == ""
    assert uvicorn_calls[0]["env"][TRIGGER] == "prod-trigger-secret"


@pytest.mark.parametrize("command", ["serve", "start"])
def test_serve_follows_fastapi_run_defaults(
    command: str, clean_env: None, uvicorn_calls: list[dict[str, Any]]
) -> None:
    """Like ``fastapi run``: every address, port 8000, one worker, proxy headers on (trusted
    from uvicorn's default peers), no root path; ``dev`` stays on the loopback."""
    result = CliRunner().invoke(cli_app, [command, "--app", "m:app"])
    assert result.exit_code == 0, result.output
    [call] = uvicorn_calls
    assert (call["host"], call["port"], call["reload"]) == ("0.0.0.0", 8000, False)
    assert call["server"] == cli.serve.ServerOptions(
        workers=None, proxy_headers=True, forwarded_allow_ips=None, root_path=""
    )
    CliRunner().invoke(cli_app, ["dev", "--app", "m:app"], env={TRIGGER: "t", INSPECT: "i"})
    assert uvicorn_calls[-1]["host"] == "127.0.0.1"


@pytest.mark.parametrize("command", ["serve", "start"])
def test_serve_passes_workers_proxy_headers_and_root_path(
    command: str, clean_env: None, uvicorn_calls: list[dict[str, Any]]
) -> None:
    result = CliRunner().invoke(
        cli_app,
        [command, "--app", "m:app", "--host", "127.0.0.1", "--workers", "3",
         "--no-proxy-headers", "--forwarded-allow-ips", "10.0.0.0/8,192.168.1.7",
         "--root-path", "/api"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    [call] = uvicorn_calls
    assert call["host"] == "127.0.0.1"
    assert call["server"] == cli.serve.ServerOptions(
        workers=3,
        proxy_headers=False,
        forwarded_allow_ips="10.0.0.0/8,192.168.1.7",
        root_path="/api",
    )


def test_serve_refuses_zero_workers(clean_env: None, uvicorn_calls: list[dict[str, Any]]) -> None:
    result = CliRunner().invoke(cli_app, ["serve", "--app", "m:app", "--workers", "0"])
    assert result.exit_code == 2
    assert "--workers" in plain(result.output)
    assert uvicorn_calls == []


def test_run_uvicorn_hands_every_option_to_uvicorn(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The recorder above replaces ``_run_uvicorn``; this checks ``_run_uvicorn`` itself."""
    import uvicorn

    seen: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: seen.append((app, kw)))
    options = cli.serve.ServerOptions(
        workers=2, proxy_headers=False, forwarded_allow_ips="*", root_path="/x"
    )
    cli.serve._run_uvicorn("m:app", "0.0.0.0", 9000, tmp_path, reload=False, server=options)
    [(app, kwargs)] = seen
    assert app == "m:app"
    assert kwargs == {
        "host": "0.0.0.0",
        "port": 9000,
        "reload": False,
        "app_dir": str(tmp_path.resolve()),
        "workers": 2,
        "proxy_headers": False,
        "forwarded_allow_ips": "*",
        "root_path": "/x",
    }


def test_help_lists_dev_serve_start_and_migrate() -> None:
    result = CliRunner().invoke(cli_app, ["--help"])
    assert result.exit_code == 0
    out = plain(result.output)
    for command in ("migrate", "dev", "serve", "start"):
        assert re.search(rf"\b{command}\b", out), command
    assert "Alias of serve" in out
    assert "(alias: start)" in out


def test_start_takes_the_same_options_as_serve() -> None:
    def options(command: str) -> list[str]:
        # Wide enough that rich does not cut a long option name in its table.
        out = CliRunner().invoke(cli_app, [command, "--help"], env={"COLUMNS": "200"}).output
        return sorted(set(re.findall(r"--[a-z-]+", out)))

    assert options("start") == options("serve")
    assert {"--app", "--host", "--port", "--app-dir", "--workers", "--proxy-headers",
            "--no-proxy-headers", "--forwarded-allow-ips", "--root-path"} <= set(options("serve"))
    assert {"--reload", "--no-reload"} <= set(options("dev"))
    assert "--reload" not in options("serve")


def test_migrate_still_works(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    result = CliRunner().invoke(cli_app, ["migrate", "--database-url", f"sqlite+aiosqlite:///{db}"])
    assert result.exit_code == 0, result.output
    assert "voltro migrate:" in result.output


# --- real processes -----------------------------------------------------------------------------


def voltro_command() -> list[str]:
    script = Path(sys.executable).parent / "voltro"
    return [str(script)] if script.exists() else [sys.executable, "-m", "fastapi_voltro_schedules"]


def _stop_group(process: subprocess.Popen[str]) -> None:
    """SIGTERM the whole process group (uvicorn's reloader and its child), then SIGKILL."""
    if process.poll() is None or _group_alive(process.pid):
        try:
            os.killpg(process.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    # A graceful shutdown on a busy machine can take seconds: only a hang gets SIGKILL (the
    # tests read the log for "Application shutdown complete." afterwards).
    try:
        process.wait(HANG)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(5)
    deadline = time.monotonic() + HANG
    while _group_alive(process.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _group_alive(process.pid):
        os.killpg(process.pid, signal.SIGKILL)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover
        return True
    return True


@contextmanager
def voltro_server(
    args: list[str],
    cwd: Path,
    env: Mapping[str, str] | None = None,
    *,
    name: str = "voltro",
    timeout: float = HANG,
) -> Iterator[Server]:
    """``voltro <args> --port <free>`` in its own session (so the reloader and its child form
    one process group); waits until /openapi.json answers, SIGTERMs the group after."""
    port = free_port()
    log_path = cwd.parent / f"{name}.log"  # beside the project, not in it
    base = {k: v for k, v in os.environ.items() if k not in (TRIGGER, INSPECT, DEV, "VOLTRO_APP")}
    full_env = {**base, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1", **(env or {})}
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [*voltro_command(), *args, "--port", str(port)],
            cwd=cwd,
            env=full_env,
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
    running = Server(process, port, log_path)
    try:
        running.wait_ready(name, "/openapi.json", timeout, require_ok=True)
        yield running
    finally:
        _stop_group(process)


def assert_graceful(server: Server) -> None:
    """SIGTERM shut the app down cleanly (uvicorn re-raises the signal once it is done)."""
    log = server.log()
    assert "Application shutdown complete." in log, log
    assert server.process.returncode in (0, -signal.SIGTERM), log


def printed_tokens(log: str) -> dict[str, str]:
    found = dict(re.findall(r"voltro dev: \w+ token\s+\((\w+)\)\s+= (\S+)", log))
    return found


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    return path


def db_env(tmp_path: Path) -> dict[str, str]:
    return {"VOLTRO_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'v.db'}"}


@pytest.mark.slow
def test_real_voltro_dev_prints_the_file_tokens(tmp_path: Path, project: Path) -> None:
    args = ["dev", "--app", "example_app.main:app", "--no-reload"]
    with voltro_server(args, project, db_env(tmp_path)) as server:
        assert httpx.get(server.url + "/openapi.json").status_code == 200
    log = server.log()
    stored = json.loads((project / ".voltro" / "dev-tokens.json").read_text())
    assert printed_tokens(log) == {
        TRIGGER: stored["schedule_trigger_token"],
        INSPECT: stored["inspect_token"],
    }
    assert log.count(stored["schedule_trigger_token"]) == 1  # printed once, logged nowhere else
    assert log.count(stored["inspect_token"]) == 1
    assert "scheduler: starting" in log
    assert stat.S_IMODE((project / ".voltro" / "dev-tokens.json").stat().st_mode) == 0o600
    assert (project / ".voltro" / ".gitignore").read_text() == "*\n"
    assert_graceful(server)

    # a second boot reuses them
    with voltro_server(args, project, db_env(tmp_path), name="again") as again:
        pass
    assert printed_tokens(again.log()) == printed_tokens(log)


@pytest.mark.slow
def test_real_voltro_serve_mints_and_prints_nothing(tmp_path: Path, project: Path) -> None:
    for command in ("serve", "start"):
        args = [command, "--app", "example_app.main:app"]
        with voltro_server(args, project, db_env(tmp_path), name=command) as server:
            assert httpx.get(server.url + "/openapi.json").status_code == 200
        log = server.log()
        assert "scheduler: starting" in log
        assert (
            f"voltro {command}: the trigger and inspect routes will answer 503 until "
            f"{TRIGGER} / {INSPECT} are set"
        ) in log
        assert "token  (" not in log and "voltro dev" not in log
        assert not (project / ".voltro").exists()
        assert_graceful(server)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")
def test_real_voltro_dev_with_reload(tmp_path: Path, project: Path) -> None:
    args = ["dev", "--app", "example_app.main:app"]  # reload is the default
    with voltro_server(args, project, db_env(tmp_path), name="reload") as server:
        log = server.log()
        assert "Started reloader process" in log, log
        children = _children(server.process.pid)
        assert children, "uvicorn's reloader should run the app in a child process"
        # the child got the tokens through its environment
        stored = json.loads((project / ".voltro" / "dev-tokens.json").read_text())
        environ = _environ(children[0])
        assert environ is not None, "no /proc on this platform"
        assert environ.get(TRIGGER) == stored["schedule_trigger_token"]
        assert environ.get(INSPECT) == stored["inspect_token"]
        assert environ.get(DEV) == "1"
    log = server.log()
    assert "scheduler: starting" in log
    assert printed_tokens(log)[TRIGGER] == stored["schedule_trigger_token"]
    assert log.count(stored["schedule_trigger_token"]) == 1  # once, by the reloader, not per child
    assert not _group_alive(server.process.pid)
    for child in children:
        assert not Path(f"/proc/{child}").exists() or _is_zombie(child)


PROBE_APP = """
import hashlib, os
from fastapi import FastAPI

app = FastAPI()

def digest(name):
    value = os.environ.get(name)
    return None if value is None else hashlib.sha256(value.encode()).hexdigest()

@app.get("/probe")
def probe():
    return {"dev": os.environ.get("VOLTRO_DEV"),
            "trigger": digest("VOLTRO_SCHEDULE_TRIGGER_TOKEN"),
            "inspect": digest("VOLTRO_INSPECT_TOKEN")}
"""


@pytest.mark.slow
def test_real_dev_and_serve_hand_the_environment_to_the_app(tmp_path: Path, project: Path) -> None:
    import hashlib

    def sha(value: str) -> str:
        return hashlib.sha256(value.encode()).hexdigest()

    src = project / "src"
    src.mkdir()
    (src / "voltro_probe_app.py").write_text(PROBE_APP)
    base = ["--app", "voltro_probe_app:app", "--app-dir", "src"]

    env = {TRIGGER: "user-chosen-trigger"}
    with voltro_server(["dev", *base, "--no-reload"], project, env, name="probe-dev") as server:
        seen = httpx.get(server.url + "/probe").json()
    stored = json.loads((project / ".voltro" / "dev-tokens.json").read_text())
    assert seen == {
        "dev": "1",
        "trigger": sha("user-chosen-trigger"),
        "inspect": sha(stored["inspect_token"]),
    }
    assert "user-chosen-trigger" not in server.log()

    env = {DEV: "1"}
    with voltro_server(["serve", *base], project, env, name="probe-serve") as server:
        seen = httpx.get(server.url + "/probe").json()
    assert seen == {"dev": None, "trigger": None, "inspect": None}


def _children(pid: int) -> list[int]:
    children = []
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat_file.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:  # fields after "(comm)": state, ppid, ...
            children.append(int(stat_file.parent.name))
    return children


def _environ(pid: int) -> dict[str, str] | None:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True
