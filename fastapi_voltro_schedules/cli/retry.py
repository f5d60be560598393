"""Retrying a refused connection to ``--url``: the plan, the test for a refusal, the words.

A refused connection means nothing listens at the port yet — uvicorn binds it only once the
app's lifespan has started the scheduler — or the app is restarting. Such a request never
reached the app, so sending it again cannot run anything twice (not even a ``fire`` or a
backfill): refusals are retried, with backoff, for ``--retry-for`` seconds. A connection that
breaks after the request went out is never retried, and a host that does not resolve is
reported at once.
"""

from __future__ import annotations

from typing import Annotated

import httpx
import typer

DEFAULT_RETRY_FOR = 10.0
"""Seconds a refused connection is retried by default: a uvicorn boot, a rolling restart."""
FIRST_RETRY_DELAY = 0.25
MAX_RETRY_DELAY = 2.0
RETRY_FOR_ENV = "VOLTRO_CLI_RETRY_FOR"

RetryOpt = Annotated[
    float,
    typer.Option(
        "--retry-for",
        min=0,
        envvar=RETRY_FOR_ENV,
        show_envvar=True,
        help="With --url: seconds to keep retrying a refused connection (the app starting or "
        "restarting), backing off from 0.25 s to 2 s; 0 tries once.",
    ),
]


def retry_delays(budget_s: float) -> list[float]:
    """The pauses between attempts at a refused connection: 0.25 s doubling to 2 s, as many as
    fit in ``budget_s`` (the last one cut to what is left). Pure: the plan, not the waiting."""
    delays: list[float] = []
    delay, left = FIRST_RETRY_DELAY, budget_s
    while left > 1e-9:
        delays.append(min(delay, left))
        left -= delays[-1]
        delay = min(delay * 2, MAX_RETRY_DELAY)
    return delays


def refused(error: BaseException) -> bool:
    """Whether ``error`` is (or was caused by) a refused connection."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, ConnectionRefusedError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _innermost(error: BaseException) -> BaseException:
    while (inner := error.__cause__ or error.__context__) is not None:
        error = inner
    return error


def retrying(base: str, budget_s: float) -> str:
    """Said once, at the first refusal."""
    return f"{base} refused the connection — retrying for up to {budget_s:g} s"


def unreachable(base: str, error: httpx.ConnectError, attempts: int, budget_s: float) -> str:
    """Why the connection failed for good, and what to do about it."""
    if not refused(error):
        return f"cannot connect to {base}: {_innermost(error)} — check --url (host and port)"
    tried = f"{attempts} attempt{'s' if attempts != 1 else ''}"
    return (
        f"cannot connect to {base}: connection refused ({tried} over {budget_s:g} s) — is the "
        "app running and listening there? Start it (uvicorn …), check --url, or wait longer "
        "with --retry-for SECONDS"
    )


__all__ = [
    "DEFAULT_RETRY_FOR",
    "RETRY_FOR_ENV",
    "RetryOpt",
    "refused",
    "retry_delays",
    "retrying",
    "unreachable",
]
