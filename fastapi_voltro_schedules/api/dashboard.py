"""The dashboard: ``GET /_voltro/dashboard``, its sign-in, sign-out and static files.

The page is a thin client over the inspect API (``/_voltro/inspect/schedules…``): the server
renders a shell that knows the signed-in role, and the package's own JavaScript polls the
inspect routes with the session cookie. Nothing is loaded from anywhere else (the
Content-Security-Policy says so to the browser), and nothing needs building.

Signing in trades an inspect token (either role) for the ``voltro_session`` cookie, which holds
a keyed digest of the token, never the token, and when it expires (:mod:`.session`): it lasts
``dashboard_session_ms`` (12 hours by default; ``Max-Age`` for the browser, the signed expiry for
the server), then the page asks to sign in again. The cookie is ``HttpOnly`` (no
script reads it), ``SameSite=Strict`` (no other site's form can ride it — the state-changing
inspect routes are POSTs) and scoped to ``/_voltro``; ``Secure`` when the request came over
https. The server enforces the role on every inspect route; the page only hides what the role
cannot do.

The page writes nothing itself: Run now, pause and the run-time schedule form call the inspect
routes (``POST …/fire``, ``PUT``/``DELETE /_voltro/inspect/schedules/{name}``) with the same
cookie — one door per write, whoever knocks. ``SameSite=Strict`` and the JSON bodies (no other
site's form can send a ``PUT`` or ``application/json``) are its cross-site guard; there is no
second token to keep in step.
"""

from __future__ import annotations

import hashlib
from functools import cache
from importlib import resources
from typing import Any
from urllib.parse import parse_qs

import jinja2
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from ..definition import DEFAULT_MAX_RUNTIME_MS
from ..enums import BackfillPolicy, OverlapPolicy
from ..errors import PayloadTooLargeError
from ..tokens import INSPECT_READ_TOKEN_ENV, INSPECT_TOKEN_ENV, Role
from .auth import scheduling_of
from .errors import VoltroRoute, error_responses
from .session import SESSION_COOKIE, make_session_cookie_value, session_role

router = APIRouter(route_class=VoltroRoute)

_HTML: dict[str, Any] = {"text/html": {"schema": {"type": "string"}}}
_PAGE_503: dict[int | str, dict[str, Any]] = {
    503: {
        "description": "Disabled: no inspect token is set (the sign-in page says so), or the "
        "scheduler is not running (scheduler_not_running / scheduler_disabled, JSON).",
        "content": {
            **_HTML,
            "application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}},
        },
    }
}
_FOLLOWED: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The dashboard (or its sign-in page), for a client that follows the "
        "redirect.",
        "content": _HTML,
    }
}

DASHBOARD = "/_voltro/dashboard"
COOKIE_PATH = "/_voltro"
MAX_FORM_BYTES = 8192
"""A sign-in form is one token; anything bigger is not one."""

STATIC_FILES = {
    "dashboard.css": "text/css; charset=utf-8",
    "dashboard.js": "text/javascript; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}
"""The only files the static route serves: a fixed list, so no path reaches outside it."""

SECURITY_HEADERS = {
    # Only this app's own files: no CDN, no inline script, not framed by another site.
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
    "img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; "
    "base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


@cache
def _templates() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("fastapi_voltro_schedules", "dashboard/templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )


@cache
def _static(name: str) -> bytes:
    return (
        resources.files("fastapi_voltro_schedules") / "dashboard" / "static" / name
    ).read_bytes()


@cache
def _asset_version() -> str:
    """A digest of the static files, appended to their URLs: a browser never runs an old
    script against a newer page after an upgrade."""
    digest = hashlib.sha256()
    for name in sorted(STATIC_FILES):
        digest.update(_static(name))
    return digest.hexdigest()[:12]


def _render(template: str, status: int = 200, **context: Any) -> HTMLResponse:
    html = (
        _templates()
        .get_template(template)
        .render(
            static=f"{DASHBOARD}/static", version=_asset_version(), dashboard=DASHBOARD, **context
        )
    )
    return HTMLResponse(html, status_code=status, headers=SECURITY_HEADERS)


def _sign_in_form(request: Request, *, error: str | None = None, status: int = 200) -> Response:
    if not scheduling_of(request).tokens.inspect_configured:
        return _render(
            "signin.html",
            503,
            error=f"The dashboard is disabled: neither {INSPECT_TOKEN_ENV} nor "
            f"{INSPECT_READ_TOKEN_ENV} is set in the app's environment. Set one (a long random "
            "secret) and restart; `voltro dev` mints one for you.",
            disabled=True,
        )
    return _render("signin.html", status, error=error, disabled=False)


@router.get(
    DASHBOARD,
    operation_id="getDashboard",
    response_class=HTMLResponse,
    summary="The dashboard (HTML): the page when signed in, else the sign-in form",
    responses=_PAGE_503,
)
async def dashboard(request: Request) -> Response:
    role = session_role(request)
    if role is None:
        return _sign_in_form(request)
    scheduling = scheduling_of(request)
    operator = role is Role.OPERATOR
    return _render(
        "dashboard.html",
        role=role.value,
        operator=operator,
        api="/_voltro/inspect/schedules",
        replica=scheduling.config.replica_id,
        # The schedule form is the operator's only: a read-only page carries no editor at all.
        # Its choices are the server's (the handlers this app registered, the policies this
        # version knows); checking what is sent stays with the PUT route the form calls.
        handlers=sorted(scheduling.handlers) if operator else [],
        overlaps=[policy.value for policy in OverlapPolicy],
        backfills=[policy.value for policy in BackfillPolicy],
        default_max_runtime_ms=DEFAULT_MAX_RUNTIME_MS,
    )


@router.post(
    f"{DASHBOARD}/session",
    operation_id="signIn",
    status_code=303,
    response_class=RedirectResponse,
    summary="Sign in: trade an inspect token for the session cookie",
    responses={
        303: {"description": "Signed in: the cookie is set; on to the dashboard."},
        **_FOLLOWED,
        401: {"description": "Not an inspect token: the form again, saying so.", "content": _HTML},
        **error_responses(PayloadTooLargeError, validation=False),
        **_PAGE_503,
    },
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/x-www-form-urlencoded": {
                    "schema": {
                        "type": "object",
                        "required": ["token"],
                        "properties": {"token": {"type": "string"}},
                    }
                }
            },
        }
    },
)
async def sign_in(request: Request) -> Response:
    # Parsed by hand: FastAPI's Form() needs python-multipart for one urlencoded field.
    body = await request.body()
    token = ""
    if len(body) <= MAX_FORM_BYTES:
        fields = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
        token = (fields.get("token") or [""])[0].strip()
    if not token:
        return _sign_in_form(request, error="Enter an inspect token.", status=401)
    role = scheduling_of(request).tokens.inspect_role(token)
    if role is None:
        return _sign_in_form(
            request,
            error=f"That token is not an inspect token of this app ({INSPECT_TOKEN_ENV} for "
            f"operators, {INSPECT_READ_TOKEN_ENV} for read-only viewers). The trigger token "
            "does not open the dashboard.",
            status=401,
        )
    scheduling = scheduling_of(request)
    max_age = max(1, scheduling.config.dashboard_session_ms // 1000)
    expires = int(scheduling.clock.now().timestamp()) + max_age
    response = RedirectResponse(DASHBOARD, status_code=303, headers={"Cache-Control": "no-store"})
    response.set_cookie(
        SESSION_COOKIE,
        make_session_cookie_value(role, token, expires),
        max_age=max_age,
        path=COOKIE_PATH,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


@router.post(
    f"{DASHBOARD}/signout",
    operation_id="signOut",
    status_code=303,
    response_class=RedirectResponse,
    summary="Sign out: clear the session cookie, and on to the sign-in page",
    responses={
        303: {"description": "Signed out: the cookie is cleared; on to the dashboard."},
        **_FOLLOWED,
        **error_responses(PayloadTooLargeError, validation=False),
    },
)
async def sign_out(request: Request) -> Response:
    response = RedirectResponse(DASHBOARD, status_code=303, headers={"Cache-Control": "no-store"})
    response.delete_cookie(
        SESSION_COOKIE,
        path=COOKIE_PATH,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


@router.get(f"{DASHBOARD}/static/{{name}}", include_in_schema=False)
async def static(name: str) -> Response:
    media_type = STATIC_FILES.get(name)
    if media_type is None:
        return Response("not found", status_code=404, media_type="text/plain")
    return Response(
        _static(name),
        media_type=media_type,
        # URLs carry ?v=<digest of the files>, so a cached copy is never stale.
        headers={"Cache-Control": "public, max-age=86400", "X-Content-Type-Options": "nosniff"},
    )


__all__ = ["DASHBOARD", "router"]
