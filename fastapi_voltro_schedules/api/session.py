"""The dashboard's signed session cookie: ``voltro_session``.

Value: ``"<role>.<hex HMAC-SHA256>"``, the MAC keyed with the inspect token that signed the
user in, over ``b"voltro-dashboard-session:" + role``. So the cookie

* never holds the raw token (a stolen cookie is not the Secret, and cannot be replayed as a
  bearer token);
* needs no server-side state: every replica with the same tokens verifies it;
* dies with its token: rotating ``VOLTRO_INSPECT_TOKEN`` (or ``VOLTRO_INSPECT_READ_TOKEN``) out
  of the list signs everyone who signed in with the old value out;
* cannot be promoted: a read token's MAC over ``"operator"`` is not any operator token's MAC.

Verified in constant time against every configured token of the claimed role.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import TYPE_CHECKING

from ..tokens import Role, Tokens

if TYPE_CHECKING:
    from fastapi import Request

SESSION_COOKIE = "voltro_session"
_CONTEXT = b"voltro-dashboard-session:"

__all__ = ["SESSION_COOKIE", "make_session_cookie_value", "session_role"]


def _mac(role: Role, token: bytes) -> str:
    return hmac.new(token, _CONTEXT + role.value.encode("ascii"), hashlib.sha256).hexdigest()


def make_session_cookie_value(role: Role, token: str | bytes) -> str:
    """The cookie value for a user who signed in with ``token`` of ``role``."""
    key = token.encode("utf-8") if isinstance(token, str) else token
    return f"{role.value}.{_mac(role, key)}"


def verify_session(value: str, tokens: Tokens) -> Role | None:
    """The role a cookie value proves against ``tokens``, or ``None``."""
    claimed, sep, mac = value.partition(".")
    if not sep:
        return None
    try:
        role = Role(claimed)
    except ValueError:
        return None
    presented = mac.encode("ascii", "replace")
    found = False
    for token in tokens.of_role(role):  # every one, no early exit
        found |= hmac.compare_digest(presented, _mac(role, token).encode("ascii"))
    return role if found else None


def session_role(request: Request) -> Role | None:
    """The role of the request's ``voltro_session`` cookie, or ``None`` (no cookie, a forged
    or stale one, or a scheduler that has not booted)."""
    value = request.cookies.get(SESSION_COOKIE)
    if not value:
        return None
    tokens: Tokens | None = getattr(getattr(request.app.state, "scheduling", None), "tokens", None)
    if tokens is None:
        return None
    return verify_session(value, tokens)
