from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(prefix="/billing")


@router.get("/health")
async def health() -> dict[str, str]:
    return {"status": "ok"}
