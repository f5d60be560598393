"""``GET /metrics``: Prometheus text from the default registry, no token.

The default registry holds the scheduler's series (:mod:`..metrics`) and whatever else the
process registered there — prometheus-fastapi-instrumentator's HTTP series when the app
instruments itself with ``Instrumentator().instrument(app)`` (without ``.expose(app)``: this
route already serves the same registry). The series are listed in ``docs/operating.md``.
"""

from __future__ import annotations

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from ..metrics import default_metrics

router = APIRouter()


@router.get(
    "/metrics",
    operation_id="getMetrics",
    summary="Prometheus metrics (text exposition format)",
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}},
)
async def metrics() -> Response:
    # On the event loop, not in a worker thread: the next-fire collector reads the engine's
    # timer, which only the loop mutates.
    default_metrics()  # the series exist (with their HELP) before the first scheduler boots
    return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)


__all__ = ["router"]
