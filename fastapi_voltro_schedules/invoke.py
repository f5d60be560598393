"""Calling a schedule's target directly (``await schedule(ctx)``), outside the runner.

The runner (:mod:`.runner`) wraps the same three cases in its watchdog and ledger writes; this
is the bare call a user's test makes on a decorated handler.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, cast

import anyio

from .errors import ConfigurationError

if TYPE_CHECKING:
    from .context import ScheduleContext
    from .definition import Schedule


async def invoke_target(schedule: Schedule, ctx: ScheduleContext) -> None:
    """Await an async handler, run a plain ``def`` in a worker thread, or start the workflow."""
    if schedule.workflow is not None:
        if ctx.workflows is None:
            raise ConfigurationError(
                f'schedule "{schedule.name}" targets workflow "{schedule.workflow.name}" but the '
                "context has no workflow starter — pass make_context(..., workflows=<object "
                "with async start(name, payload) -> str>)"
            )
        await ctx.workflows.start(schedule.workflow.name, schedule.workflow.build_payload(ctx))
        return
    handler = schedule.handler
    if handler is None:  # define_schedule always sets one of the two targets
        raise ConfigurationError(f'schedule "{schedule.name}" has neither handler nor workflow')
    if schedule.awaits_handler:
        await cast(Awaitable[Any], handler(ctx))
        return
    result = await anyio.to_thread.run_sync(handler, ctx)
    if inspect.isawaitable(result):  # a def that returns a coroutine
        await result
