"""Retries within the slot: :class:`RetryPolicy`, and the pure rules that decide each retry.

A failed run (the handler raised, or the watchdog cut it off) of a schedule with a policy is
retried as another *attempt of the same slot*: the same ledger row, its ``attempt`` column
counting up, one final outcome. Between two attempts the row stays ``running`` with
``retry_at`` — when the next attempt is due — and keeps beating, so a replica that dies then
leaves the pending retry in the ledger for another replica to take over
(:func:`~fastapi_voltro_schedules.catchup.resume_retries`).

No attempt starts once the schedule's next slot is due (a retry never collides with the next
run): the last failure is then final, with ``error_tag="retry-window-closed"``. These rules
are pure — they take ``now`` and return a decision — and the dispatcher carries them out.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from .errors import ScheduleDefinitionError

__all__ = [
    "MAX_ATTEMPTS",
    "RETRY_PAUSED",
    "RETRY_UNAVAILABLE",
    "RETRY_WINDOW_CLOSED",
    "RetryDecision",
    "RetryPolicy",
    "RetryStart",
    "final_message",
    "plan_retry",
    "plan_retry_start",
]

MAX_ATTEMPTS = 100
"""The most attempts a policy may allow for one slot."""
MAX_BACKOFF_MS = 7 * 24 * 3600 * 1000
"""The longest backoff a policy may name (a week): past the cadence of any schedule that
retries usefully."""

RETRY_WINDOW_CLOSED = "retry-window-closed"
"""``error_tag`` of a final failure whose next attempt would have started at or after the
schedule's next slot (the message keeps the last attempt's error)."""
RETRY_PAUSED = "retry-paused"
"""``error_tag`` of a final failure whose next attempt came due while the schedule was paused:
a pause stops retries (resuming replays nothing, like every other paused firing)."""
RETRY_UNAVAILABLE = "retry-unavailable"
"""``error_tag`` of a final failure whose schedule no longer retries here (deleted, or its
policy removed) when its pending retry came due."""


def _refuse(field: str, value: object, why: str) -> ScheduleDefinitionError:
    return ScheduleDefinitionError(f"RetryPolicy: {field}={value!r} {why}")


def _whole(field: str, value: object, *, least: int, most: int, unit: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= most:
        raise _refuse(field, value, f"must be an integer {unit} from {least:_} to {most:_}")
    return value


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a failed run of a schedule is retried within its slot::

        define_schedule(..., retry=RetryPolicy(attempts=3, backoff_ms=1000, max_backoff_ms=60000))

    ``attempts``: the most attempts of one slot, the first run included (3: the run and two
    retries). ``backoff_ms``: the wait before the first retry; each further one doubles it —
    the ``k``-th retry waits ``min(backoff_ms * 2**(k-1), max_backoff_ms)`` after the failure
    before it (a cap below ``backoff_ms`` is every wait). Every field is checked here, on its
    own: :class:`~.errors.ScheduleDefinitionError` names the field and the range it must be
    in."""

    attempts: int
    backoff_ms: int = 1000
    max_backoff_ms: int = 60_000

    def __post_init__(self) -> None:
        ms = "number of milliseconds"
        _whole("attempts", self.attempts, least=1, most=MAX_ATTEMPTS, unit="number of attempts")
        _whole("backoff_ms", self.backoff_ms, least=0, most=MAX_BACKOFF_MS, unit=ms)
        _whole("max_backoff_ms", self.max_backoff_ms, least=0, most=MAX_BACKOFF_MS, unit=ms)

    def backoff(self, retry: int) -> timedelta:
        """The wait before the ``retry``-th retry (1 for the first, after attempt 1 failed)."""
        if retry < 1:
            raise ValueError(f"retry={retry}: retries are counted from 1")
        # capped before it is raised to a power that would build a huge integer
        doublings = min(retry - 1, 63)
        return timedelta(milliseconds=min(self.backoff_ms * 2**doublings, self.max_backoff_ms))

    def as_json(self) -> dict[str, int]:
        """The wire form (the HTTP PUT body's ``retry`` and the inspect listing)."""
        return {
            "attempts": self.attempts,
            "backoffMs": self.backoff_ms,
            "maxBackoffMs": self.max_backoff_ms,
        }


class RetryStart(StrEnum):
    """What to do when a pending retry comes due."""

    START = "start"
    """Start the next attempt now."""
    CLOSE = "close"
    """Do not: the last failure is final (:attr:`RetryDecision.tag` says why)."""


@dataclass(frozen=True, slots=True)
class RetryDecision:
    """:func:`plan_retry`'s answer when a run failed: retry at ``retry_at``, or — ``retry_at``
    ``None`` — the failure is final, with ``tag`` to record instead of the error's own (``None``:
    the error's own; the attempts ran out)."""

    retry_at: datetime | None
    tag: str | None = None
    why: str = ""


def plan_retry(
    policy: RetryPolicy | None, attempt: int, failed_at: datetime, window_end: datetime | None
) -> RetryDecision:
    """Whether attempt ``attempt`` of a slot, failed at ``failed_at``, is retried, and when:
    not without a policy or once ``policy.attempts`` ran; not when the wait would end at or
    after ``window_end`` (the schedule's next slot; ``None``: no next slot) — then the failure
    is final with :data:`RETRY_WINDOW_CLOSED`."""
    if policy is None or attempt >= policy.attempts:
        return RetryDecision(None)
    retry_at = failed_at + policy.backoff(attempt)
    if window_end is not None and retry_at >= window_end:
        return RetryDecision(
            None,
            RETRY_WINDOW_CLOSED,
            f"attempt {attempt + 1} of {policy.attempts} would start at or after the next "
            f"slot ({window_end.isoformat()})",
        )
    return RetryDecision(retry_at)


MESSAGE_LIMIT = 2000
"""Characters of a final failure's message kept (the runner's bound on any error message)."""


def final_message(tag: str | None, message: str | None, why: str) -> str:
    """The message of a slot closed on its pending retry: the last attempt's error, then why
    no further attempt ran — bounded like every error message."""
    return f"{tag or 'failed'}: {message or ''} — {why}"[:MESSAGE_LIMIT]


def plan_retry_start(
    policy: RetryPolicy | None,
    now: datetime,
    window_end: datetime | None,
    *,
    paused: bool,
) -> tuple[RetryStart, str | None, str]:
    """When a pending retry comes due (or is taken over from a replica that stopped): start it,
    or close the slot — the schedule no longer retries (:data:`RETRY_UNAVAILABLE`), it is paused
    (:data:`RETRY_PAUSED`), or its next slot is already due (:data:`RETRY_WINDOW_CLOSED`: late
    because its replica died, say). Returns ``(what, tag, why)``."""
    if policy is None:
        return RetryStart.CLOSE, RETRY_UNAVAILABLE, "the schedule no longer retries here"
    if paused:
        return RetryStart.CLOSE, RETRY_PAUSED, "the schedule was paused when the retry came due"
    if window_end is not None and now >= window_end:
        return (
            RetryStart.CLOSE,
            RETRY_WINDOW_CLOSED,
            f"the next slot ({window_end.isoformat()}) was due before the retry could start",
        )
    return RetryStart.START, None, ""
