"""``/tenants``: create, edit and delete a tenant — its row, then its report schedule.

Each route writes the row, then calls :func:`~.schedules.sync_tenant`, which puts or deletes
``tenant-report.{id}`` to match (why in that order, and what a crash between the two leaves:
``schedules.py``). A schedule write that fails answers ``503`` naming the tenant: the row is
saved, and a retry of the request — or the next boot — writes the schedule.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Request, Response
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, JsonValue, field_validator
from sqlalchemy import delete, insert, update
from sqlalchemy.ext.asyncio import AsyncEngine

from fastapi_voltro_schedules import Scheduling, VoltroError
from fastapi_voltro_schedules.zones import iana_zone_names, zone_problem

from ..db import tenants
from ..errors import AppError, AppRoute, refusals
from .schedules import read_tenant, schedule_name, sync_tenant

# AppRoute: every refusal in the error body's shape, and a 405's Allow naming both methods of
# /tenants/{tenant_id} (Starlette's names only the first route's).
router = APIRouter(prefix="/tenants", tags=["tenants"], route_class=AppRoute)

TenantId = Annotated[int, Path(ge=1, le=2**31 - 1, description="The tenant's id (an INT key).")]
"""At most the largest INT the tenants table holds: a larger id is a 422, not a driver's
overflow answered as a 500."""

ZONES: dict[str, Any] = {"enum": list[JsonValue](sorted(iana_zone_names()))}
"""The zones a tenant may use, published as the package's PUT body publishes them: a client
(or a fuzzer) reads which strings the route takes instead of learning it from a 422."""


def _zone(value: str | None) -> str | None:
    # The scheduler's own rule (IANA places only), checked before the row is written: a row
    # must never hold a zone its schedule would be refused for.
    if value is not None and (problem := zone_problem(value)) is not None:
        raise ValueError(problem)
    return value


def _json_integer(value: object) -> object:
    # The schema says integer, which JSON Schema reads as a number with no fraction (7 and
    # 7.0 alike, which pydantic turns into 7): `true` and "7" are not one, though pydantic's
    # lax int would take them.
    if isinstance(value, bool | str):
        raise ValueError(
            "an integer is required — send a JSON number such as 9, not a string or boolean"
        )
    return value


Hour = Annotated[int, Field(ge=0, le=23), BeforeValidator(_json_integer)]
Name = Annotated[str, Field(min_length=1, max_length=200)]


def _no_null(schema: dict[str, Any]) -> None:
    # The field's schema without its `null` branch (nor its null default): None is only what
    # an omitted field reads as, never a value a client may send.
    schema.pop("default", None)
    options = [option for option in schema.pop("anyOf", ()) if option.get("type") != "null"]
    schema.update(options[0] if len(options) == 1 else {"anyOf": options})


def _zone_no_null(schema: dict[str, Any]) -> None:
    _no_null(schema)
    schema.update(ZONES)


def _not_null(value: object) -> object:
    # An explicit null would blank a NOT NULL column: the schema publishes no null, and the
    # refusal is the same 422 as any other bad field, naming it.
    if value is None:
        raise ValueError("null is not a value — omit the field to keep it")
    return value


class TenantIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Name
    timezone: str = Field(examples=["Europe/Berlin"], json_schema_extra=ZONES)
    report_hour: Hour = Field(description="0-23, in the tenant's zone")

    check_zone = field_validator("timezone")(_zone)


class TenantPatch(BaseModel):
    """The fields to change; an omitted one keeps its value."""

    model_config = ConfigDict(extra="forbid")

    name: Name | None = Field(default=None, json_schema_extra=_no_null)
    timezone: str | None = Field(
        default=None, examples=["Europe/Berlin"], json_schema_extra=_zone_no_null
    )
    report_hour: Hour | None = Field(default=None, json_schema_extra=_no_null)

    refuse_null = field_validator("name", "timezone", "report_hour", mode="before")(_not_null)
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


def _no_tenant(tenant_id: int) -> AppError:
    return AppError(
        404,
        "tenant_not_found",
        f"no tenant {tenant_id} — use an id POST /tenants answered (a deleted tenant is gone)",
    )


async def _sync(request: Request, tenant_id: int) -> None:
    scheduling, db = _parts(request)
    try:
        await sync_tenant(scheduling, db, tenant_id)
    except (VoltroError, RuntimeError) as exc:
        raise AppError(
            503,
            "schedule_not_written",
            f"tenant {tenant_id} is saved but its schedule {schedule_name(tenant_id)} "
            f"was not written ({exc}) — retry the request; the app's next boot writes it too",
        ) from exc


@router.post("", status_code=201, responses=refusals(schedule_not_written=503))
async def create_tenant(body: TenantIn, request: Request) -> TenantOut:
    _, db = _parts(request)
    async with db.begin() as conn:
        result = await conn.execute(insert(tenants).values(**body.model_dump()))
        key = result.inserted_primary_key
        assert key is not None  # an INSERT of one row
        tenant_id = int(key[0])
    await _sync(request, tenant_id)
    return _out(await read_tenant(db, tenant_id))


@router.patch("/{tenant_id}", responses=refusals(tenant_not_found=404, schedule_not_written=503))
async def edit_tenant(tenant_id: TenantId, body: TenantPatch, request: Request) -> TenantOut:
    _, db = _parts(request)
    changes = body.model_dump(exclude_unset=True)  # no None: TenantPatch refuses a null
    if changes:
        async with db.begin() as conn:
            await conn.execute(update(tenants).where(tenants.c.id == tenant_id).values(**changes))
    # Read back rather than trust rowcount: MySQL counts rows changed, not rows matched.
    if await read_tenant(db, tenant_id) is None:
        raise _no_tenant(tenant_id)
    await _sync(request, tenant_id)
    return _out(await read_tenant(db, tenant_id))


@router.delete(
    "/{tenant_id}",
    status_code=204,
    response_class=Response,
    responses=refusals(tenant_not_found=404, schedule_not_written=503),
)
async def delete_tenant(tenant_id: TenantId, request: Request) -> Response:
    _, db = _parts(request)
    async with db.begin() as conn:
        result = await conn.execute(delete(tenants).where(tenants.c.id == tenant_id))
    # Synced even when there was no row: a schedule a crash left behind goes too.
    await _sync(request, tenant_id)
    if result.rowcount != 1:
        raise _no_tenant(tenant_id)
    return Response(status_code=204)
