"""One OpenTelemetry span per run (SPEC §7): ``voltro.schedule.run``, from the handler's start
to its outcome, with the schedule, slot, trigger, run id, attempt and final status as
attributes.

The span is the *current* span inside the handler's task (its own context), so the handler's
own spans are its children and a logging integration stamps its log lines with the trace. A run
started inside a traced request (the trigger route, Run now) is a trace of its own **linked** to
that request's span — a run outlives the request that asked for it, and a CronJob's curl is not
the parent of a nightly export — rather than a child of it.

Only ``opentelemetry-api`` is imported. When the app configured no tracer provider (the API's
default proxy, or an explicit no-op one) nothing is started at all: a herd of 10,000 pays one
``isinstance`` per batch, not a span, a context copy and an attach per firing.
"""

from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING

from opentelemetry import context as otel_context
from opentelemetry import trace

if TYPE_CHECKING:
    from .definition import Schedule
    from .records import RunOutcome, RunRecord

__all__ = ["SPAN_NAME", "RunSpans", "run_spans"]

SPAN_NAME = "voltro.schedule.run"
TRACER_NAME = "fastapi_voltro_schedules"


class RunSpans:
    """The spans of one batch of runs (a herd, or a herd of one), on a configured tracer."""

    __slots__ = ("_link", "_tracer")

    def __init__(self, tracer: trace.Tracer) -> None:
        self._tracer = tracer
        # The span current where the batch starts (a request's, when the trigger route or
        # Run now fired it): linked from each run, not its parent.
        current = trace.get_current_span().get_span_context()
        self._link = [trace.Link(current)] if current.is_valid else None

    def start(self, schedule: Schedule, run: RunRecord) -> tuple[trace.Span, contextvars.Context]:
        """A started span for ``run`` and a context with it current (the handler's task runs
        in it)."""
        span = self._tracer.start_span(
            SPAN_NAME,
            context=otel_context.Context(),  # a root: the request, if any, is a link
            kind=trace.SpanKind.INTERNAL,
            links=self._link,
            attributes={
                "voltro.schedule.name": schedule.name,
                "voltro.schedule.scheduled_at": run.scheduled_at.isoformat(),
                "voltro.schedule.trigger": run.trigger.value,
                "voltro.schedule.run_id": run.id,
                # a retry is another attempt of the same run (same id): told apart here
                "voltro.schedule.attempt": run.attempt,
            },
        )
        task_context = contextvars.copy_context()
        task_context.run(otel_context.attach, trace.set_span_in_context(span))
        return span, task_context

    @staticmethod
    def end(span: trace.Span, outcome: RunOutcome, error: BaseException | None) -> None:
        span.set_attribute("voltro.schedule.status", outcome.status.value)
        if outcome.error_tag is not None:
            span.set_attribute("voltro.schedule.error_tag", outcome.error_tag)
        if error is not None:
            span.record_exception(error)
        if outcome.error_tag is not None:
            span.set_status(trace.StatusCode.ERROR, outcome.error_message or outcome.error_tag)
        span.end()


def run_spans() -> RunSpans | None:
    """Spans for the next batch of runs, or ``None`` when the app traces nothing."""
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None
    return RunSpans(provider.get_tracer(TRACER_NAME))
