"""``define_handler``: code names the work, data names the cadence (SPEC §7).

A run-time schedule (``Scheduling.put_schedule``) is data — a name, a cron, a zone, JSON
``args`` — and cannot carry a Python function. It names a *handler* instead: a unit of work
the code registered under a stable name with ``@define_handler(name=...)``. The name is what
the definitions table stores, so a handler keeps its name across refactors that move or rename
the function; renaming the *handler* orphans the schedules that name it (they are skipped at
boot with a warning saying so).

Handlers are found like schedules — module-level values of the ``*_cron`` modules
(:func:`~.discovery.discover_handlers`) — or passed as ``Scheduling(handlers=[...])``.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from .definition import NAME_RE, Handler, check_retry, is_async_callable
from .errors import ConfigurationError, ScheduleDefinitionError
from .retries import RetryPolicy

__all__ = ["NamedHandler", "check_unique_handlers", "define_handler"]


@dataclass(frozen=True, slots=True, eq=False)
class NamedHandler:
    """A unit of work registered under ``name`` (build one with :func:`define_handler`).

    Calling it calls the function: ``await tenant_report(ctx)`` in a test runs exactly what a
    firing runs (a plain ``def`` returns ``None``)."""

    name: str
    fn: Handler
    module: str | None = None
    """The module that defined it (for error messages)."""
    retry: RetryPolicy | None = None
    """The retry policy of the run-time schedules that name this handler and set none
    themselves (``put_schedule(..., retry=...)`` wins)."""

    def __call__(self, ctx: object) -> Awaitable[None] | None:
        return self.fn(ctx)  # type: ignore[arg-type]

    @property
    def __wrapped__(self) -> Handler:
        """The function (the ``functools.wraps`` convention): what ``is_async_callable`` and
        ``inspect.unwrap`` look through to."""
        return self.fn

    @property
    def is_async(self) -> bool:
        return is_async_callable(self.fn)


def _prefix(name: object) -> str:
    return f'define_handler("{name}")' if isinstance(name, str) else f"define_handler({name!r})"


def define_handler(
    *, name: str, retry: RetryPolicy | None = None
) -> Callable[[Handler], NamedHandler]:
    """Register the decorated ``async def``/``def`` (taking a ``ScheduleContext``) under
    ``name``, for run-time schedules to name::

        @define_handler(name="tenantReport", retry=RetryPolicy(attempts=3))
        async def tenant_report(ctx: ScheduleContext) -> None:
            await send_report(ctx.args["tenant"], ctx.scheduled_at)

    ``retry``: how the run-time schedules naming it retry a failed run within its slot,
    unless the schedule sets its own (see :mod:`.retries`)."""
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise ScheduleDefinitionError(
            f"{_prefix(name)}: name={name!r} is not a valid handler name — use 1–200 letters, "
            'digits, "_", "-", "." or ":", starting with a letter or digit (e.g. "tenantReport")'
        )
    policy = check_retry(_prefix(name), retry)
    module = _caller_module()

    def decorate(fn: Handler) -> NamedHandler:
        if isinstance(fn, NamedHandler) or not callable(fn) or inspect.isclass(fn):
            raise ScheduleDefinitionError(
                f"{_prefix(name)}: @define_handler(...) was applied to {fn!r}, which is not a "
                "handler — decorate an `async def` or `def` function taking a ScheduleContext"
            )
        _check_arity(name, fn)
        return NamedHandler(
            name=name, fn=fn, module=getattr(fn, "__module__", None) or module, retry=policy
        )

    return decorate


def _check_arity(name: str, fn: Handler) -> None:
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without a signature: trust it
        return
    try:
        signature.bind(object())
    except TypeError as exc:
        raise ScheduleDefinitionError(
            f"{_prefix(name)}: {getattr(fn, '__qualname__', fn)!r} cannot be called with "
            f"exactly one argument ({exc}; its signature is {signature}) — a handler takes the "
            "ScheduleContext as its only positional argument: "
            "`async def handler(ctx: ScheduleContext) -> None`"
        ) from None


def _caller_module() -> str | None:
    frame = sys._getframe(2)
    return frame.f_globals.get("__name__") if frame is not None else None


def check_unique_handlers(handlers: Iterable[NamedHandler]) -> dict[str, NamedHandler]:
    """The handlers by name (the same object twice counts once); :class:`ConfigurationError`
    naming both modules when two distinct handlers share a name."""
    found: dict[str, NamedHandler] = {}
    for handler in handlers:
        if not isinstance(handler, NamedHandler):
            raise ConfigurationError(
                f"Scheduling(handlers=...): {handler!r} is not a handler — pass the functions "
                "decorated with @define_handler(name=...)"
            )
        previous = found.get(handler.name)
        if previous is None:
            found[handler.name] = handler
        elif previous is not handler:
            raise ConfigurationError(
                f'two handlers are named "{handler.name}": one in {previous.module}, one in '
                f"{handler.module} — a run-time schedule names its handler, so the name must "
                "be unique; rename one"
            )
    return found
