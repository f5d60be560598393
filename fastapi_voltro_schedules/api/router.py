"""``schedules_router``: include it in the app to expose the scheduler's routes.

Routes are added by the external-trigger and inspect features; the router object is public
API already so apps can wire it once.
"""

from __future__ import annotations

from fastapi import APIRouter

schedules_router = APIRouter(tags=["voltro schedules"])
