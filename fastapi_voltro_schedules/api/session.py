"""The dashboard's signed session cookie: ``voltro_session``.

Value: ``"<role>.<expires>.<hex HMAC-SHA256>"``, the MAC keyed with the inspect token that
signed the user in, over ``b"voltro-dashboard-session:" + role + b":" + expires`` (``expires``:
Unix seconds). So the cookie

* never holds the raw token (a stolen cookie is not the Secret, and cannot be replayed as a
  bearer token);
* needs no server-side state: every replica with the same tokens verifies it;
* dies with its token: rotating ``VOLTRO_INSPECT_TOKEN`` (or ``VOLTRO_INSPECT_READ_TOKEN``) out
  of the list signs everyone who signed in with the old value out;
* cannot be promoted: a read token's MAC over ``"operator"`` is not any operator token's MAC;
* ends: the browser drops it after ``Max-Age`` (``dashboard_session_ms``), and the server
  refuses it after the signed ``expires`` whatever the browser kept — a copied cookie is not a
  session for ever. Nor can it be extended: the expiry is under the MAC.

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


def _mac(role: Role, expires: int, token: bytes) -> str:
    message = _CONTEXT + f"{role.value}:{expires}".encode("ascii")
    return hmac.new(token, message, hashlib.sha256).hexdigest()


def make_session_cookie_value(role: Role, token: str | bytes, expires: int) -> str:
    """The cookie value for a user who signed in with ``token`` of ``role``, good until
    ``expires`` (Unix seconds)."""
    key = token.encode("utf-8") if isinstance(token, str) else token
    return f"{role.value}.{expires}.{_mac(role, expires, key)}"


def verify_session(value: str, tokens: Tokens, now: float) -> Role | None:
    """The role a cookie value proves against ``tokens`` at ``now`` (Unix seconds), or
    ``None``: forged, signed by a token no longer configured, malformed, or expired."""
    claimed, _, rest = value.partition(".")
    stamp, sep, mac = rest.partition(".")
    if not sep or not stamp.isdigit() or len(stamp) > 12:
        return None
    try:
        role = Role(claimed)
    except ValueError:
        return None
    expires = int(stamp)
    presented = mac.encode("ascii", "replace")
    found = False
    for token in tokens.of_role(role):  # every one, no early exit
        found |= hmac.compare_digest(presented, _mac(role, expires, token).encode("ascii"))
    return role if found and now < expires else None


def session_role(request: Request) -> Role | None:
    """The role of the request's ``voltro_session`` cookie, or ``None`` (no cookie, a forged,
    stale or expired one, or a scheduler that has not booted). Expiry is judged on the
    scheduler's clock (a ``ManualClock`` in tests)."""
    value = request.cookies.get(SESSION_COOKIE)
    if not value:
        return None
    scheduling = getattr(request.app.state, "scheduling", None)
    tokens: Tokens | None = getattr(scheduling, "tokens", None)
    if scheduling is None or tokens is None:
        return None
    return verify_session(value, tokens, scheduling.clock.now().timestamp())
