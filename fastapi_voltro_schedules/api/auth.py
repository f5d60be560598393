"""The bearer credentials of ``schedules_router`` and the roles they grant
(:mod:`fastapi_voltro_schedules.tokens` parses and checks them at boot).

* **Trigger token** (``VOLTRO_SCHEDULE_TRIGGER_TOKEN``, OpenAPI scheme ``VoltroTriggerToken``):
  what a CronJob pod mounts. It opens ``POST /_voltro/schedules/{name}/trigger`` and
  ``GET /_voltro/schedules/runs/{run_id}`` and nothing else.
* **Inspect tokens** (scheme ``VoltroInspectToken``): ``VOLTRO_INSPECT_TOKEN`` grants the
  *operator* role (reads, Run now, range backfill, pause/resume), ``VOLTRO_INSPECT_READ_TOKEN``
  the *read* role (reads only: ``403 forbidden_role`` on anything that fires or changes
  state). Without a bearer header the dashboard's signed session cookie
  (:mod:`.session`) counts as the role it was signed for. Neither opens the trigger routes.

Each dependency compares only with its own family's tokens, so presenting another family's
token is simply a wrong token (401). A family with no token set shuts its routes with 503 and
the remedy, in every mode: ``voltro dev`` mints the trigger and operator tokens into the
server's environment before the app starts, so an unset token means production (``voltro
serve``/``start`` mint nothing) — and the absence of a secret is not consent. Tokens are
compared with :func:`secrets.compare_digest` on bytes against every configured value and never
appear in a log line, a response or an exception message.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from ..devtokens import is_dev_mode
from ..errors import (
    NOT_RUNNING,
    AuthenticationError,
    ForbiddenRoleError,
    SchedulerDisabledError,
    SchedulerNotRunningError,
    TokenNotConfiguredError,
    VoltroError,
)
from ..tokens import INSPECT_READ_TOKEN_ENV, INSPECT_TOKEN_ENV, TRIGGER_TOKEN_ENV, Role
from .session import session_role

if TYPE_CHECKING:
    from ..engine import Engine
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
    description=f"${INSPECT_TOKEN_ENV} (operator: reads, Run now, backfill, pause/resume) or "
    f"${INSPECT_READ_TOKEN_ENV} (read-only: 403 on anything that fires or changes state). "
    "Neither opens the trigger routes.",
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


def engine_of(scheduling: Scheduling) -> Engine:
    """The running engine; :class:`SchedulerNotRunningError` (503) before boot or after stop."""
    if scheduling.engine is None:
        raise SchedulerNotRunningError(NOT_RUNNING)
    return scheduling.engine


def _not_configured(
    variable: str, routes: str, *, also: str | None = None
) -> TokenNotConfiguredError:
    either = f" (or {also} for read-only access)" if also else ""
    remedy = (
        f"`voltro dev` mints it, but this process was started with VOLTRO_DEV=1 and without "
        f"it — set {variable}, or start the app through `voltro dev`"
        if is_dev_mode()
        else f'set {variable}{either} (a long random secret, e.g. `python -c "import secrets; '
        f"print(secrets.token_urlsafe(32))\"`) in the app's environment. Only `voltro dev` "
        "mints one; `voltro serve` and `voltro start` never do"
    )
    return TokenNotConfiguredError(
        f"the {routes} are disabled: {variable} is not set — {remedy}", variable
    )


async def require_trigger_token(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(trigger_bearer)],
) -> None:
    """Dependency of the trigger routes: the bearer token must be a trigger token."""
    tokens = scheduling_of(request).tokens
    routes = "external trigger routes"
    if not tokens.trigger_configured:
        raise _not_configured(TRIGGER_TOKEN_ENV, routes)
    if credentials is None:
        raise AuthenticationError(
            f"the {routes} need `Authorization: Bearer <{TRIGGER_TOKEN_ENV}>` — no bearer "
            "token was sent"
        )
    if not tokens.is_trigger(credentials.credentials):
        raise AuthenticationError(
            f"the bearer token is not {TRIGGER_TOKEN_ENV} — the {routes} refuse it"
        )


def _inspect_role(request: Request, credentials: HTTPAuthorizationCredentials | None) -> Role:
    tokens = scheduling_of(request).tokens
    routes = "inspect routes"
    if not tokens.inspect_configured:
        raise _not_configured(INSPECT_TOKEN_ENV, routes, also=INSPECT_READ_TOKEN_ENV)
    if credentials is None:
        role = session_role(request)
        if role is None:
            raise AuthenticationError(
                f"the {routes} need `Authorization: Bearer <{INSPECT_TOKEN_ENV}>` (or "
                f"<{INSPECT_READ_TOKEN_ENV}> for reads) — no bearer token was sent (nor a "
                "dashboard session)"
            )
    else:
        found = tokens.inspect_role(credentials.credentials)
        if found is None:
            raise AuthenticationError(
                f"the bearer token is not {INSPECT_TOKEN_ENV} nor {INSPECT_READ_TOKEN_ENV} — "
                f"the {routes} refuse it"
            )
        role = found
    request.state.voltro_role = role
    return role


async def require_inspect_token(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(inspect_bearer)],
) -> Role:
    """Dependency of the inspect reads and the dashboard: either inspect role (bearer token,
    else the dashboard session cookie). Returns the role."""
    return _inspect_role(request, credentials)


async def require_operator(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(inspect_bearer)],
) -> Role:
    """Dependency of every inspect route that fires or changes state: the operator role.
    A read-only credential gets ``403 forbidden_role``."""
    role = _inspect_role(request, credentials)
    if role is not Role.OPERATOR:
        raise ForbiddenRoleError(
            f"this action fires or changes state and needs the operator role "
            f"({INSPECT_TOKEN_ENV}); the credential sent is the read-only one "
            f"({INSPECT_READ_TOKEN_ENV}), which may only read — use the operator token",
            required=Role.OPERATOR.value,
            role=role.value,
        )
    return role


NOT_SERVING: tuple[type[VoltroError], ...] = (SchedulerNotRunningError, SchedulerDisabledError)
"""What every route that needs the scheduler may answer (503) whatever its credential."""
TRIGGER_ERRORS = (AuthenticationError, TokenNotConfiguredError, *NOT_SERVING)
"""What the trigger token's check may answer: 401, or 503 when the token is unset."""
READ_ERRORS = (AuthenticationError, TokenNotConfiguredError, *NOT_SERVING)
"""What the inspect token's check may answer (either role)."""
OPERATOR_ERRORS = (*READ_ERRORS, ForbiddenRoleError)
"""What the operator's check may answer: also 403 for the read-only role."""

TriggerAuth = Depends(require_trigger_token)
InspectAuth = Depends(require_inspect_token)
OperatorAuth = Depends(require_operator)
OperatorRole = Annotated[Role, Depends(require_operator)]
"""A route parameter of this type gets the operator's role (and 403s a read-only token)."""
