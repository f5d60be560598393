"""Liveness on the database's clock (store contract, every store): heartbeats stamped with
the database's time, the database's time read back, and corpses judged against it — so one
replica's wall-clock step cannot make another replica's live run look dead."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from support.stores import open_store

from fastapi_voltro_schedules.enums import CoordinationOutcome, RunStatus, Trigger
from fastapi_voltro_schedules.store import RunRecord, SQLStore, new_run_id

STORE_PARAMS = [
    pytest.param("memory", id="memory"),
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
    pytest.param("mariadb", id="mariadb", marks=pytest.mark.mariadb),
]
_URL_FIXTURE = {"sqlite": "sqlite_url", "postgres": "postgres_url", "mariadb": "mariadb_url"}


@pytest.fixture(params=STORE_PARAMS)
async def store(request: pytest.FixtureRequest) -> AsyncIterator[SQLStore]:
    url = (
        "sqlite+aiosqlite://"
        if request.param == "memory"
        else request.getfixturevalue(_URL_FIXTURE[request.param])
    )
    async with open_store(url) as s:
        yield s


def run(**kw: Any) -> RunRecord:
    kw.setdefault("name", "job")
    kw.setdefault("scheduled_at", datetime(2026, 5, 28, 9, tzinfo=UTC))
    kw.setdefault("status", RunStatus.RUNNING)
    kw.setdefault("trigger", Trigger.SELF)
    kw.setdefault("coordination_outcome", CoordinationOutcome.SINGLE)
    kw.setdefault("replica_id", "a")
    return RunRecord(id=new_run_id(), **kw)


async def test_database_now_is_the_servers_clock(store: SQLStore) -> None:
    before = datetime.now(UTC)
    now = await store.database_now()
    after = datetime.now(UTC)
    assert now.tzinfo is not None and now.utcoffset() == timedelta(0)
    # the test servers run on this host: their clock agrees with ours to well under a second
    assert before - timedelta(seconds=1) <= now <= after + timedelta(seconds=1)
    later = await store.database_now()
    assert later >= now


async def test_heartbeat_without_at_is_stamped_by_the_database(store: SQLStore) -> None:
    # the replica's own clock is a day off: its beat must not carry that time
    skewed = datetime.now(UTC) - timedelta(days=1)
    row = run(fired_at=skewed, heartbeat_at=skewed)
    other = run(replica_id="b", fired_at=skewed, heartbeat_at=skewed)
    await store.insert_runs([row, other])
    low = await store.database_now()
    assert await store.heartbeat([row.id, other.id], None, "a") == 1
    high = await store.database_now()
    beaten = await store.get_run(row.id)
    assert beaten is not None and beaten.heartbeat_at is not None
    assert low - timedelta(milliseconds=1) <= beaten.heartbeat_at <= high
    untouched = await store.get_run(other.id)
    assert untouched is not None and untouched.heartbeat_at == skewed
    # an explicit instant is still written as given
    assert await store.heartbeat([row.id], skewed, "a") == 1
    again = await store.get_run(row.id)
    assert again is not None and again.heartbeat_at == skewed


async def test_silent_runs_are_judged_by_the_database_clock(store: SQLStore) -> None:
    now = await store.database_now()
    window = timedelta(seconds=15)
    fresh = run(fired_at=now - timedelta(hours=2), heartbeat_at=None)
    beaten = run(name="other", fired_at=now - timedelta(hours=2))
    silent = run(fired_at=now - timedelta(minutes=5), heartbeat_at=now - timedelta(minutes=1))
    # a replica whose clock runs an hour AHEAD wrote these: they look alive for an hour longer
    # (harmless: nobody is killed); one whose clock runs behind wrote nothing newer
    ahead = run(fired_at=now + timedelta(hours=1))
    never = run(fired_at=None, heartbeat_at=None)
    queued_old = run(status=RunStatus.QUEUED, fired_at=None, heartbeat_at=now - timedelta(hours=1))
    done_old = run(status=RunStatus.SUCCEEDED, fired_at=now - timedelta(hours=3))
    await store.insert_runs([fresh, beaten, silent, ahead, never, queued_old, done_old])
    # the live run's replica beats with the database's clock
    assert await store.heartbeat([beaten.id], None, "a") == 1
    await store.update_run(fresh.id, expect_status=RunStatus.RUNNING, heartbeat_at=now)

    corpses = await store.silent_runs(["job", "other"], window)
    assert {r.id for r in corpses} == {silent.id, never.id}
    both = await store.silent_runs(
        ["job", "other", "absent"], window, (RunStatus.RUNNING, RunStatus.QUEUED)
    )
    assert {r.id for r in both} == {silent.id, never.id, queued_old.id}
    assert [r.scheduled_at for r in both] == sorted(r.scheduled_at for r in both)
    assert await store.silent_runs([], window) == []
    # a wider window spares the one silent for a minute
    assert {r.id for r in await store.silent_runs(["job"], timedelta(minutes=2))} == {never.id}
    with pytest.raises(ValueError, match="negative"):
        await store.silent_runs(["job"], timedelta(seconds=-1))
