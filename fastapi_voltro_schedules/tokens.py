"""The bearer tokens of ``schedules_router`` and the role each one grants.

Three variables, three credentials, never interchangeable:

==================================  ==========  ================================================
variable                            role        opens
==================================  ==========  ================================================
``VOLTRO_SCHEDULE_TRIGGER_TOKEN``   trigger     the external trigger route and its run poll
``VOLTRO_INSPECT_TOKEN``            operator    every inspect route: reads, Run now, range
                                                backfill, pause/resume; the dashboard
``VOLTRO_INSPECT_READ_TOKEN``       read        the inspect reads (schedules, runs) and the
                                                dashboard view; ``403`` on anything that fires
                                                or changes state
==================================  ==========  ================================================

Each variable may hold a comma-separated list, so a Secret is rotated without a window of 401s:
deploy ``new,old``, move the callers to ``new``, deploy ``new``.

Checked once, at boot (:func:`load_tokens`), because a credential that can never match is a
deployment error, not a request error:

* surrounding whitespace — the trailing newline of ``kubectl create secret --from-file`` — is
  stripped, with a warning that names the variable (never the value);
* a value shorter than :data:`MIN_TOKEN_LENGTH` characters is refused: a guessable secret;
* one value under two variables is refused, naming both: the trigger token a CronJob pod mounts
  must never open the inspect routes, and a read-only viewer must never hold the operator's.

Comparisons are :func:`secrets.compare_digest` on bytes against *every* configured value (no
early exit), so neither the answer nor its timing says which value, or which role, came close.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

from .errors import ConfigurationError

if TYPE_CHECKING:
    from pydantic import SecretStr

    from .config import SchedulingConfig

__all__ = [
    "INSPECT_READ_TOKEN_ENV",
    "INSPECT_TOKEN_ENV",
    "MIN_TOKEN_LENGTH",
    "TRIGGER_TOKEN_ENV",
    "Role",
    "Tokens",
    "load_tokens",
    "parse_token_list",
]

# Every token variable is named here; ``devtokens`` (what ``voltro dev`` mints) builds on
# this module and never the other way round.
TRIGGER_TOKEN_ENV = "VOLTRO_SCHEDULE_TRIGGER_TOKEN"
INSPECT_TOKEN_ENV = "VOLTRO_INSPECT_TOKEN"
INSPECT_READ_TOKEN_ENV = "VOLTRO_INSPECT_READ_TOKEN"

MIN_TOKEN_LENGTH = 16
"""Shortest accepted token, in characters. ``voltro dev`` mints 43; ``secrets.token_urlsafe(32)``
is the suggested recipe."""


class Role(StrEnum):
    """What an inspect credential may do."""

    READ = "read"
    """Lists, runs, the dashboard view. Nothing that fires or changes state."""
    OPERATOR = "operator"
    """Everything ``READ`` may, plus Run now, range backfill, pause and resume."""


ROLE_VARIABLE: dict[Role, str] = {
    Role.OPERATOR: INSPECT_TOKEN_ENV,
    Role.READ: INSPECT_READ_TOKEN_ENV,
}
"""The variable whose tokens grant each role."""


@dataclass(frozen=True, slots=True)
class ParsedList:
    values: tuple[bytes, ...]
    warnings: tuple[str, ...] = ()


def parse_token_list(variable: str, raw: str | None) -> ParsedList:
    """Split one variable's value into its tokens (comma-separated; empty or unset → none).

    Raises :class:`ConfigurationError` for a token shorter than :data:`MIN_TOKEN_LENGTH`;
    the message names the variable and the position, never the value.
    """
    if raw is None or not raw.strip():
        return ParsedList(())
    items = raw.split(",")
    values: list[bytes] = []
    stripped = empty = 0
    for position, item in enumerate(items, start=1):
        token = item.strip()
        if not token:
            empty += 1
            continue
        if token != item:
            stripped += 1
        if len(token) < MIN_TOKEN_LENGTH:
            where = f"value {position} of {len(items)}" if len(items) > 1 else "its value"
            raise ConfigurationError(
                f"{variable}: {where} is {len(token)} characters long — a bearer token must "
                f"be at least {MIN_TOKEN_LENGTH} (a guessable secret is no secret). Mint one "
                'with `python -c "import secrets; print(secrets.token_urlsafe(32))"`'
            )
        encoded = token.encode("utf-8")
        if encoded not in values:
            values.append(encoded)
    warnings: list[str] = []
    if stripped:
        warnings.append(
            f"{variable}: surrounding whitespace stripped from {stripped} of its values (a "
            "trailing newline from `kubectl create secret --from-file`?) — the token is used "
            "without it; store the Secret without the newline (`printf %s`) to silence this"
        )
    if empty:
        warnings.append(
            f"{variable}: {empty} empty entr{'y' if empty == 1 else 'ies'} in its "
            "comma-separated list ignored"
        )
    return ParsedList(tuple(values), tuple(warnings))


def _matches(presented: bytes, candidates: Iterable[bytes]) -> bool:
    # Every candidate is compared, whatever the earlier answers: the time taken does not say
    # where in the list (or in which role) a match sits.
    found = False
    for candidate in candidates:
        found |= secrets.compare_digest(presented, candidate)
    return found


@dataclass(frozen=True, slots=True)
class Tokens:
    """The configured tokens of one app, checked. ``repr`` shows counts, never values."""

    trigger: tuple[bytes, ...] = ()
    operator: tuple[bytes, ...] = ()
    read: tuple[bytes, ...] = ()
    warnings: tuple[str, ...] = field(default=(), compare=False)

    def __repr__(self) -> str:
        return (
            f"Tokens(trigger={len(self.trigger)}, operator={len(self.operator)}, "
            f"read={len(self.read)})"
        )

    @property
    def trigger_configured(self) -> bool:
        return bool(self.trigger)

    @property
    def inspect_configured(self) -> bool:
        """Whether any inspect token (either role) is set: otherwise the inspect routes and
        the dashboard stay shut (503)."""
        return bool(self.operator or self.read)

    def of_role(self, role: Role) -> tuple[bytes, ...]:
        """The configured tokens granting ``role`` (what a dashboard session is signed with)."""
        return self.operator if role is Role.OPERATOR else self.read

    def is_trigger(self, presented: str) -> bool:
        """Whether ``presented`` is one of the trigger tokens (constant time over all)."""
        return _matches(presented.encode("utf-8"), self.trigger)

    def inspect_role(self, presented: str) -> Role | None:
        """The role an inspect bearer token grants, or ``None`` (a wrong token, or the trigger
        token: it never opens the inspect routes). Constant time over every configured value
        of both roles; the value is never logged."""
        encoded = presented.encode("utf-8")
        operator = _matches(encoded, self.operator)
        read = _matches(encoded, self.read)
        if operator:
            return Role.OPERATOR
        if read:
            return Role.READ
        return None


def _secret(value: SecretStr | None) -> str | None:
    return None if value is None else value.get_secret_value()


def load_tokens(config: SchedulingConfig) -> Tokens:
    """Parse and check the three token variables of ``config`` (boot time).

    Raises :class:`ConfigurationError` naming the variable(s) — never a value — for a token
    that is too short or a value configured under two variables. Warnings (stripped
    whitespace) are returned in :attr:`Tokens.warnings` for the caller to log.
    """
    lists: Sequence[tuple[str, ParsedList]] = (
        (
            TRIGGER_TOKEN_ENV,
            parse_token_list(TRIGGER_TOKEN_ENV, _secret(config.schedule_trigger_token)),
        ),
        (INSPECT_TOKEN_ENV, parse_token_list(INSPECT_TOKEN_ENV, _secret(config.inspect_token))),
        (
            INSPECT_READ_TOKEN_ENV,
            parse_token_list(INSPECT_READ_TOKEN_ENV, _secret(config.inspect_read_token)),
        ),
    )
    for i, (first_var, first) in enumerate(lists):
        for second_var, second in lists[i + 1 :]:
            if set(first.values) & set(second.values):
                raise ConfigurationError(
                    f"{first_var} and {second_var} hold the same token — each variable needs "
                    "its own secret (the trigger token is mounted into CronJob pods, the read "
                    "token is handed to viewers; neither may open the other's routes). Mint a "
                    "new value for one of them"
                )
    (_, trigger), (_, operator), (_, read) = lists
    return Tokens(
        trigger=trigger.values,
        operator=operator.values,
        read=read.values,
        warnings=trigger.warnings + operator.warnings + read.warnings,
    )
