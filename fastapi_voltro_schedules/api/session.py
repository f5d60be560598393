"""The dashboard's session cookie: which inspect role a browser signed in as.

INTERIM (branch ``dash``): the ``ops`` branch owns this module (token roles, the inspect routes
accepting the cookie). This copy has the same interface so the dashboard can be built against
it; the merge takes ops's version.

The cookie (``voltro_session``) holds ``"<role>.<hex HMAC-SHA256(key=token,
msg=b'voltro-dashboard-session:' + role)>"`` — proof that the browser once presented a token of
that role, never the token itself. Rotating the token ends every session signed with it.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from enum import StrEnum

from fastapi import Request
from pydantic import SecretStr

from .auth import scheduling_of

SESSION_COOKIE = "voltro_session"
_MESSAGE = b"voltro-dashboard-session:"


class Role(StrEnum):
    """What an inspect token may do."""

    READ = "read"
    """Lists, runs, the dashboard view."""
    OPERATOR = "operator"
    """Everything READ may, plus Run now, backfill, pause/resume."""


def _tokens(value: SecretStr | None) -> list[str]:
    if value is None:
        return []
    return [t.strip() for t in value.get_secret_value().split(",") if t.strip()]


def role_tokens(request: Request) -> dict[Role, list[str]]:
    """Every configured token per role (comma-separated lists allowed)."""
    config = scheduling_of(request).config
    read: SecretStr | None = getattr(config, "inspect_read_token", None)
    return {Role.OPERATOR: _tokens(config.inspect_token), Role.READ: _tokens(read)}


def role_of_token(request: Request, presented: str) -> Role | None:
    """The role ``presented`` is a token of, compared in constant time against every token."""
    found: Role | None = None
    for role, tokens in role_tokens(request).items():
        for token in tokens:
            if secrets.compare_digest(presented.encode(), token.encode()) and found is None:
                found = role
    return found


def make_session_cookie_value(role: Role, token: str) -> str:
    digest = hmac.new(token.encode(), _MESSAGE + role.value.encode(), hashlib.sha256)
    return f"{role.value}.{digest.hexdigest()}"


def session_role(request: Request) -> Role | None:
    """The role of the request's ``voltro_session`` cookie, or None (absent, forged, stale)."""
    value = request.cookies.get(SESSION_COOKIE)
    if not value or "." not in value:
        return None
    name = value.split(".", 1)[0]
    try:
        role = Role(name)
    except ValueError:
        return None
    for token in role_tokens(request)[role]:
        if secrets.compare_digest(
            value.encode(), make_session_cookie_value(role, token).encode()
        ):
            return role
    return None
