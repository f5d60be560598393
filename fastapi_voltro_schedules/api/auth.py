"""The two bearer credentials of ``schedules_router``, kept apart on purpose.

* **Trigger token** (``VOLTRO_SCHEDULE_TRIGGER_TOKEN``, OpenAPI scheme ``VoltroTriggerToken``):
  what a CronJob pod mounts. It opens ``POST /_voltro/schedules/{name}/trigger`` and
  ``GET /_voltro/schedules/runs/{run_id}`` and nothing else.
* **Inspect token** (``VOLTRO_INSPECT_TOKEN``, scheme ``VoltroInspectToken``): the operator's.
  It opens the ``/_voltro/inspect/…`` routes and the dashboard, and never the trigger routes.

Each dependency compares only with its own token, so presenting the other one is simply a
wrong token (401). A token that is unset shuts its routes with 503 and the remedy, in every
mode: ``voltro dev`` mints both tokens into the server's environment before the app starts, so
an unset token means production (``voltro serve``/``start`` mint nothing) — and the absence of
a secret is not consent. Tokens are compared with :func:`secrets.compare_digest` on bytes and
never appear in a log line, a response or an exception message.
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import SecretStr

from ..devtokens import INSPECT_TOKEN_ENV, TRIGGER_TOKEN_ENV, is_dev_mode
from ..errors import (
    AuthenticationError,
    SchedulerDisabledError,
    SchedulerNotRunningError,
    TokenNotConfiguredError,
)

if TYPE_CHECKING:
    from ..scheduling import Scheduling

TRIGGER_SCHEME = "VoltroTriggerToken"
INSPECT_SCHEME = "VoltroInspectToken"

trigger_bearer = HTTPBearer(
    auto_error=False,
    scheme_name=TRIGGER_SCHEME,
    description=f"${TRIGGER_TOKEN_ENV}: fires external schedules and reads their runs. "
    "Mount it into the platform scheduler (CronJob Secret); it opens nothing else.",
)
inspect_bearer = HTTPBearer(
    auto_error=False,
    scheme_name=INSPECT_SCHEME,
    description=f"${INSPECT_TOKEN_ENV}: the operator's credential for the inspect routes and "
    "the dashboard. It does not open the trigger routes.",
)


def scheduling_of(request: Request) -> Scheduling:
    """The app's :class:`Scheduling` (``app.state.scheduling``, set when its lifespan boots).

    Checked before any token: a switched-off scheduler answers ``scheduler_disabled`` whatever
    the caller presents, so a test suite sees why nothing happened.
    """
    scheduling: Scheduling | None = getattr(request.app.state, "scheduling", None)
    if scheduling is None:
        raise SchedulerNotRunningError(
            "the scheduler is not running in this app — include schedules_router with a "
            "module-level Scheduling(...), pass lifespan=scheduling.lifespan to FastAPI(), or "
            "enter `async with scheduling.run(app):` in your own lifespan"
        )
    if not scheduling.config.scheduler_enabled:
        raise SchedulerDisabledError(scheduling.disabled_message())
    return scheduling


def _check(
    expected: SecretStr | None,
    presented: HTTPAuthorizationCredentials | None,
    *,
    variable: str,
    routes: str,
) -> None:
    if expected is None or not expected.get_secret_value():
        remedy = (
            f"`voltro dev` mints it, but this process was started with VOLTRO_DEV=1 and without "
            f"it — set {variable}, or start the app through `voltro dev`"
            if is_dev_mode()
            else f'set {variable} (a long random secret, e.g. `python -c "import secrets; '
            f"print(secrets.token_urlsafe(32))\"`) in the app's environment. Only `voltro dev` "
            "mints one; `voltro serve` and `voltro start` never do"
        )
        raise TokenNotConfiguredError(
            f"the {routes} are disabled: {variable} is not set — {remedy}", variable
        )
    if presented is None:
        raise AuthenticationError(
            f"the {routes} need `Authorization: Bearer <{variable}>` — no bearer token was sent"
        )
    if not secrets.compare_digest(
        presented.credentials.encode("utf-8"), expected.get_secret_value().encode("utf-8")
    ):
        raise AuthenticationError(f"the bearer token is not {variable} — the {routes} refuse it")


async def require_trigger_token(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(trigger_bearer)],
) -> None:
    """Dependency of the trigger routes: the bearer token must be the trigger token."""
    _check(
        scheduling_of(request).config.schedule_trigger_token,
        credentials,
        variable=TRIGGER_TOKEN_ENV,
        routes="external trigger routes",
    )


async def require_inspect_token(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(inspect_bearer)],
) -> None:
    """Dependency of the inspect routes and the dashboard: the bearer token must be the
    inspect token."""
    _check(
        scheduling_of(request).config.inspect_token,
        credentials,
        variable=INSPECT_TOKEN_ENV,
        routes="inspect routes",
    )


TriggerAuth = Depends(require_trigger_token)
InspectAuth = Depends(require_inspect_token)
