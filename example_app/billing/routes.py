from __future__ import annotations

from fastapi import APIRouter

from ..errors import AppRoute

router = APIRouter(prefix="/billing", route_class=AppRoute)


@router.get("/health")
async def health() -> dict[str, str]:
    return {"status": "ok"}
