"""``voltro dev``, ``voltro serve`` and its alias ``voltro start``: uvicorn underneath."""

from __future__ import annotations

import os
import re
from collections.abc import MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from .. import devtokens
from .common import CliError, _fail, app

_DOTTED = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*"
_APP_SPEC = re.compile(rf"{_DOTTED}:{_DOTTED}")
APP_SPEC_HELP = "expected module:attribute, e.g. example_app.main:app"


def validate_app_spec(spec: str) -> str:
    """Check the ``module:attribute`` form uvicorn imports (nothing is imported here)."""
    spec = spec.strip()
    if not _APP_SPEC.fullmatch(spec):
        raise CliError(f"--app {spec!r}: {APP_SPEC_HELP}")
    return spec


def _app_spec_callback(value: str) -> str:
    try:
        return validate_app_spec(value)
    except CliError as exc:
        raise typer.BadParameter(f"{value!r}: {APP_SPEC_HELP}") from exc


ServeAppOption = Annotated[
    str,
    typer.Option(
        "--app",
        envvar="VOLTRO_APP",
        show_envvar=True,
        callback=_app_spec_callback,
        help="Your ASGI application, as module:attribute (like uvicorn's), e.g. "
        "example_app.main:app.",
    ),
]
HostOption = Annotated[str, typer.Option("--host", help="Bind socket to this host.")]
PortOption = Annotated[int, typer.Option("--port", min=0, max=65535, help="Bind to this port.")]
AppDirOption = Annotated[
    Path,
    typer.Option(
        "--app-dir",
        exists=True,
        file_okay=False,
        help="Look for the --app module in this directory (put first on sys.path, like "
        "uvicorn's --app-dir).",
    ),
]
WorkersOption = Annotated[
    int | None,
    typer.Option(
        "--workers",
        min=1,
        help="Worker processes (uvicorn's --workers). Each worker is a replica with its own "
        "scheduler and replica id: run several only on a Postgres or MariaDB ledger, where "
        "coordination keeps every slot to one run.",
    ),
]
ProxyHeadersOption = Annotated[
    bool,
    typer.Option(
        "--proxy-headers/--no-proxy-headers",
        help="Read X-Forwarded-Proto/-For/-Port to populate the client address and scheme "
        "(only from --forwarded-allow-ips).",
    ),
]
ForwardedAllowIpsOption = Annotated[
    str | None,
    typer.Option(
        "--forwarded-allow-ips",
        help="Comma-separated IPs (or networks) trusted to send proxy headers; '*' trusts "
        "every peer. Unset: uvicorn's default, $FORWARDED_ALLOW_IPS or 127.0.0.1.",
    ),
]
RootPathOption = Annotated[
    str,
    typer.Option(
        "--root-path",
        help="The path prefix a proxy serves the app under (ASGI root_path), e.g. /api.",
    ),
]
ReloadOption = Annotated[
    bool,
    typer.Option("--reload/--no-reload", help="Restart the server when a .py file changes."),
]

TOKEN_LABELS = (
    (devtokens.TRIGGER_TOKEN_ENV, "trigger token"),
    (devtokens.INSPECT_TOKEN_ENV, "inspect token"),
)


SERVE_HOST = "0.0.0.0"
"""``serve`` binds every address, like ``fastapi run``: in a container the probes and the
Service reach the pod's own IP, never its loopback. ``dev`` keeps 127.0.0.1 (``fastapi dev``)."""
DEV_HOST = "127.0.0.1"


@dataclass(frozen=True, slots=True)
class ServerOptions:
    """What ``serve`` adds to uvicorn's call, beside the bind address (``fastapi run``'s set)."""

    workers: int | None = None
    proxy_headers: bool = True
    forwarded_allow_ips: str | None = None
    root_path: str = ""


def _run_uvicorn(
    spec: str,
    host: str,
    port: int,
    app_dir: Path,
    *,
    reload: bool,
    server: ServerOptions | None = None,
) -> None:
    import uvicorn

    server = server or ServerOptions()
    # uvicorn.run puts app_dir first on sys.path; the reloader's (and the workers') spawned
    # children inherit it, and they inherit os.environ (the tokens, VOLTRO_DEV) too.
    uvicorn.run(
        spec,
        host=host,
        port=port,
        reload=reload,
        app_dir=str(app_dir.resolve()),
        workers=server.workers,
        proxy_headers=server.proxy_headers,
        forwarded_allow_ips=server.forwarded_allow_ips,
        root_path=server.root_path,
    )


def dev_environment(
    project_dir: Path, environ: MutableMapping[str, str] | None = None
) -> list[str]:
    """Prepare the environment of ``voltro dev``; returns the banner lines to print.

    Sets ``VOLTRO_DEV=1``; unless the user set both tokens, reads (or mints) the project's
    token file and exports the tokens the user did not set. A user-set token is never printed.
    """
    env = os.environ if environ is None else environ
    env[devtokens.DEV_ENV] = "1"
    hidden = "set in the environment (not shown)"
    if all(devtokens.user_set(name, env) for name, _ in TOKEN_LABELS):
        shown = {name: hidden for name, _ in TOKEN_LABELS}
        where = None
    else:
        tokens = devtokens.load_or_mint(project_dir)
        exported = devtokens.apply_to_environ(tokens, env)
        values = {
            devtokens.TRIGGER_TOKEN_ENV: tokens.trigger,
            devtokens.INSPECT_TOKEN_ENV: tokens.inspect,
        }
        shown = {name: values[name] if exported[name] else hidden for name, _ in TOKEN_LABELS}
        verb = "minted, kept in" if tokens.minted else "kept in"
        where = (
            f"voltro dev: tokens {verb} {tokens.path} (mode 0600, git-ignored); "
            "delete it to mint new ones"
        )
    width = max(len(name) for name, _ in TOKEN_LABELS) + 2
    lines = [
        f"voltro dev: {label:<15}{'(' + name + ')':<{width}} = {shown[name]}"
        for name, label in TOKEN_LABELS
    ]
    if where:
        lines.append(where)
    return lines


DEV_HELP = (
    "Run the app for development: uvicorn with reload, and dev tokens.\n\n"
    "Mints a trigger token and an inspect token once per project (the current directory), "
    "keeps them in .voltro/dev-tokens.json (mode 0600, git-ignored) and reuses them on later "
    "runs; prints them once at boot and exports them as VOLTRO_SCHEDULE_TRIGGER_TOKEN and "
    "VOLTRO_INSPECT_TOKEN, unless you set those yourself. Sets VOLTRO_DEV=1."
)
SERVE_HELP = (
    "Run the app for production (alias: start), like `fastapi run`: binds 0.0.0.0 (every "
    "address, as a container needs; pass --host 127.0.0.1 to keep it local), no reload, "
    "proxy headers read from --forwarded-allow-ips. Mints no tokens, prints none.\n\n"
    "The trigger and inspect routes answer 503 until VOLTRO_SCHEDULE_TRIGGER_TOKEN and "
    "VOLTRO_INSPECT_TOKEN are set."
)
START_HELP = "Alias of serve: run the app for production. Mints no tokens, prints none."


@app.command(help=DEV_HELP)
def dev(
    app_spec: ServeAppOption,
    host: HostOption = DEV_HOST,
    port: PortOption = 8000,
    app_dir: AppDirOption = Path("."),
    reload: ReloadOption = True,
) -> None:
    """``voltro dev`` (help text: :data:`DEV_HELP`)."""
    try:
        lines = dev_environment(Path.cwd())
    except OSError as exc:
        raise _fail("dev", f"cannot keep the dev tokens: {exc}") from None
    for line in lines:
        typer.echo(line, err=True)
    _run_uvicorn(app_spec, host, port, app_dir, reload=reload)


def serve_note(environ: MutableMapping[str, str] | None = None) -> str | None:
    """The one-line note ``serve`` prints when a token is unset (never a token's value)."""
    env = os.environ if environ is None else environ
    unset = [name for name, _ in TOKEN_LABELS if not devtokens.user_set(name, env)]
    if not unset:
        return None
    if len(unset) == 2:
        routes, verb = "the trigger and inspect routes", "are"
    elif unset[0] == devtokens.TRIGGER_TOKEN_ENV:
        routes, verb = "the trigger routes", "is"
    else:
        routes, verb = "the inspect routes", "is"
    return f"{routes} will answer 503 until {' / '.join(unset)} {verb} set"


def _serve(
    command: str, spec: str, host: str, port: int, app_dir: Path, server: ServerOptions
) -> None:
    if devtokens.is_dev_mode():
        # Dev mode is what `voltro dev` sets; an exported VOLTRO_DEV must not leak into prod.
        typer.echo(f"voltro {command}: ignoring {devtokens.DEV_ENV} (use voltro dev)", err=True)
    os.environ.pop(devtokens.DEV_ENV, None)
    note = serve_note()
    if note:
        typer.echo(f"voltro {command}: {note}", err=True)
    _run_uvicorn(spec, host, port, app_dir, reload=False, server=server)


@app.command(help=SERVE_HELP)
def serve(
    app_spec: ServeAppOption,
    host: HostOption = SERVE_HOST,
    port: PortOption = 8000,
    app_dir: AppDirOption = Path("."),
    workers: WorkersOption = None,
    proxy_headers: ProxyHeadersOption = True,
    forwarded_allow_ips: ForwardedAllowIpsOption = None,
    root_path: RootPathOption = "",
) -> None:
    """``voltro serve`` (help text: :data:`SERVE_HELP`)."""
    server = ServerOptions(workers, proxy_headers, forwarded_allow_ips, root_path)
    _serve("serve", app_spec, host, port, app_dir, server)


@app.command(help=START_HELP)
def start(
    app_spec: ServeAppOption,
    host: HostOption = SERVE_HOST,
    port: PortOption = 8000,
    app_dir: AppDirOption = Path("."),
    workers: WorkersOption = None,
    proxy_headers: ProxyHeadersOption = True,
    forwarded_allow_ips: ForwardedAllowIpsOption = None,
    root_path: RootPathOption = "",
) -> None:
    """``voltro start``, the alias of :func:`serve`."""
    server = ServerOptions(workers, proxy_headers, forwarded_allow_ips, root_path)
    _serve("start", app_spec, host, port, app_dir, server)
