"""``/tenants``: create, edit and delete a tenant — its row, then its report schedule.

Each route writes the row, then calls :func:`~.schedules.sync_tenant`, which puts or deletes
``tenant-report.{id}`` to match (why in that order, and what a crash between the two leaves:
``schedules.py``). A schedule write that fails answers ``503`` naming the tenant: the row is
saved, and a retry of the request — or the next boot — writes the schedule.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Request, Response
from pydantic import BaseModel, ConfigDict, Field, field_validator
from sqlalchemy import delete, insert, update
from sqlalchemy.ext.asyncio import AsyncEngine

from fastapi_voltro_schedules import Scheduling, VoltroError
from fastapi_voltro_schedules.zones import zone_problem

from ..db import tenants
from .schedules import read_tenant, schedule_name, sync_tenant

router = APIRouter(prefix="/tenants", tags=["tenants"])

TenantId = Annotated[int, Path(ge=1)]


def _zone(value: str | None) -> str | None:
    # The scheduler's own rule (IANA places only), checked before the row is written: a row
    # must never hold a zone its schedule would be refused for.
    if value is not None and (problem := zone_problem(value)) is not None:
        raise ValueError(problem)
    return value


class TenantIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200)
    timezone: str = Field(examples=["Europe/Berlin"])
    report_hour: int = Field(ge=0, le=23, description="0-23, in the tenant's zone")

    check_zone = field_validator("timezone")(_zone)


class TenantPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(default=None, min_length=1, max_length=200)
    timezone: str | None = None
    report_hour: int | None = Field(default=None, ge=0, le=23)

    check_zone = field_validator("timezone")(_zone)


class TenantOut(BaseModel):
    id: int
    name: str
    timezone: str
    report_hour: int
    schedule: str
    """The run-time schedule that writes its reports."""


def _out(row: Any) -> TenantOut:
    return TenantOut(
        id=row.id,
        name=row.name,
        timezone=row.timezone,
        report_hour=row.report_hour,
        schedule=schedule_name(row.id),
    )


def _parts(request: Request) -> tuple[Scheduling, AsyncEngine]:
    return request.app.state.scheduling, request.app.state.db


async def _sync(request: Request, tenant_id: int) -> None:
    scheduling, db = _parts(request)
    try:
        await sync_tenant(scheduling, db, tenant_id)
    except (VoltroError, RuntimeError) as exc:
        raise HTTPException(
            503,
            detail=f"tenant {tenant_id} is saved but its schedule {schedule_name(tenant_id)} "
            f"was not written ({exc}) — retry the request; the app's next boot writes it too",
        ) from exc


@router.post("", status_code=201)
async def create_tenant(body: TenantIn, request: Request) -> TenantOut:
    _, db = _parts(request)
    async with db.begin() as conn:
        result = await conn.execute(insert(tenants).values(**body.model_dump()))
        key = result.inserted_primary_key
        assert key is not None  # an INSERT of one row
        tenant_id = int(key[0])
    await _sync(request, tenant_id)
    return _out(await read_tenant(db, tenant_id))


@router.patch("/{tenant_id}")
async def edit_tenant(tenant_id: TenantId, body: TenantPatch, request: Request) -> TenantOut:
    _, db = _parts(request)
    changes = body.model_dump(exclude_unset=True)
    for field in ("name", "timezone", "report_hour"):
        if field in changes and changes[field] is None:
            raise HTTPException(422, detail=f"{field}: null is not a value — omit it to keep it")
    if changes:
        async with db.begin() as conn:
            await conn.execute(update(tenants).where(tenants.c.id == tenant_id).values(**changes))
    # Read back rather than trust rowcount: MySQL counts rows changed, not rows matched.
    if await read_tenant(db, tenant_id) is None:
        raise HTTPException(404, detail=f"no tenant {tenant_id}")
    await _sync(request, tenant_id)
    return _out(await read_tenant(db, tenant_id))


@router.delete("/{tenant_id}", status_code=204, response_class=Response)
async def delete_tenant(tenant_id: TenantId, request: Request) -> Response:
    _, db = _parts(request)
    async with db.begin() as conn:
        result = await conn.execute(delete(tenants).where(tenants.c.id == tenant_id))
    # Synced even when there was no row: a schedule a crash left behind goes too.
    await _sync(request, tenant_id)
    if result.rowcount != 1:
        raise HTTPException(404, detail=f"no tenant {tenant_id}")
    return Response(status_code=204)
