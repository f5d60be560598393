"""The inspect API, typed: every response a model in OpenAPI; the runs listing filtered by name
and status, paged newest first with an opaque cursor."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from fastapi import FastAPI
from support.pausing import AUTH, BASE, at, pause_scheduling
from support.running import served

from fastapi_voltro_schedules import schedules_router
from fastapi_voltro_schedules.enums import CoordinationOutcome, RunStatus, Trigger
from fastapi_voltro_schedules.store import RunRecord, new_run_ids
from fastapi_voltro_schedules.testing import ManualClock


def test_every_inspect_response_is_a_named_model_in_openapi() -> None:
    app = FastAPI()
    app.include_router(schedules_router)
    paths = app.openapi()["paths"]
    expected = {
        ("get", "/_voltro/inspect/schedules", "200"): "ScheduleList",
        ("get", "/_voltro/inspect/schedules/runs", "200"): "RunPage",
        ("post", "/_voltro/inspect/schedules/{name}/fire", "202"): "FireAnswer",
        ("post", "/_voltro/inspect/schedules/{name}/pause", "200"): "PauseAnswer",
        ("post", "/_voltro/inspect/schedules/{name}/resume", "200"): "PauseAnswer",
        ("post", "/_voltro/schedules/{name}/trigger", "202"): "TriggerAnswer",
        ("get", "/_voltro/schedules/runs/{run_id}", "200"): "RunView",
    }
    for (method, path, status), model in expected.items():
        schema = paths[path][method]["responses"][status]["content"]["application/json"]["schema"]
        assert schema == {"$ref": f"#/components/schemas/{model}"}, (path, schema)
    components = app.openapi()["components"]["schemas"]
    listed = components["ScheduleView"]["properties"]
    assert {"nextFiring", "lastRun", "paused", "pause", "onOverlap"} <= set(listed)
    assert set(components["RunPage"]["properties"]) == {"runs", "nextCursor"}
    params = {p["name"] for p in paths["/_voltro/inspect/schedules/runs"]["get"]["parameters"]}
    assert {"name", "status", "limit", "cursor"} <= params


def _row(name: str, slot: datetime, status: RunStatus, run_id: str) -> RunRecord:
    return RunRecord(
        id=run_id,
        name=name,
        scheduled_at=slot,
        status=status,
        trigger=Trigger.SELF,
        coordination_outcome=CoordinationOutcome.SINGLE,
        fired_at=slot,
        replica_id="pod-1",
    )


async def test_runs_filtered_by_status_and_paged_by_cursor(sqlite_url: str) -> None:
    s = pause_scheduling(sqlite_url, ManualClock(at(0, 30)))
    async with served(s) as client:
        assert s.store is not None
        statuses = [RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.QUEUED, RunStatus.MISSED]
        base = datetime(2026, 5, 1, tzinfo=UTC)
        ids = iter(new_run_ids(40))
        rows = []
        for i in range(20):
            # pairs of rows on one instant: the cursor must page through ties exactly once
            slot = base + timedelta(minutes=i // 2)
            rows.append(_row("minutely", slot, statuses[i % 4], next(ids)))
        rows.append(_row("latest", base, RunStatus.QUEUED, next(ids)))
        await s.store.insert_runs(rows)

        seen: list[str] = []
        cursor = None
        pages = 0
        while True:
            params = {"name": "minutely", "limit": "3"}
            if cursor:
                params["cursor"] = cursor
            r = await client.get(f"{BASE}/runs", headers=AUTH, params=params)
            assert r.status_code == 200, r.text
            body = r.json()
            seen += [x["runId"] for x in body["runs"]]
            pages += 1
            cursor = body["nextCursor"]
            if cursor is None:
                break
        expected = [r.id for r in sorted(rows[:20], key=lambda r: (r.scheduled_at, r.id))][::-1]
        assert seen == expected and pages == 7

        r = await client.get(f"{BASE}/runs", headers=AUTH, params={"status": "queued"})
        got = r.json()["runs"]
        assert {x["status"] for x in got} == {"queued"} and len(got) == 6  # 5 + latest's
        r = await client.get(
            f"{BASE}/runs?name=minutely&status=queued,failed&status=missed", headers=AUTH
        )
        assert {x["status"] for x in r.json()["runs"]} == {"queued", "failed", "missed"}
        assert len(r.json()["runs"]) == 15

        bad = await client.get(f"{BASE}/runs", headers=AUTH, params={"status": "done"})
        assert bad.status_code == 422 and bad.json()["code"] == "invalid_query"
        assert "queued|running|succeeded|failed|skipped|missed" in bad.json()["detail"]
        bad = await client.get(f"{BASE}/runs", headers=AUTH, params={"cursor": "not-a-cursor"})
        assert bad.status_code == 422 and "nextCursor" in bad.json()["detail"]
