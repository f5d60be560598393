"""``on_overlap="queue"`` across real replicas: the line is a row, not a promise.

Three uvicorn processes of ``apps.cluster_app`` share one Postgres or MariaDB ledger. The
``line`` schedule fires every second and each run takes 1.5–2.5 s, so the line grows; the
handlers append their own wall-clock start and end to one file. From those spans: no two runs
at once, no occurrence twice, in ``scheduled_at`` order — and while it runs, the waiting
occurrences are ``queued`` rows, listed by ``GET /_voltro/inspect/schedules/runs?status=queued``.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

import httpx
import pytest
from support.cluster import fetch_runs, run_async, uvicorn_cluster

from fastapi_voltro_schedules.enums import RunStatus
from fastapi_voltro_schedules.migrations import upgrade_to_head

pytestmark = pytest.mark.slow

INSPECT = "queue-cluster-inspect-token-0123456789"
STORES = [
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("mariadb", marks=pytest.mark.mariadb),
]


def _env(url: str, replica_id: str, log: Path, **extra: str) -> dict[str, str]:
    return {
        "VOLTRO_DATABASE_URL": url,
        "VOLTRO_REPLICA_ID": replica_id,
        "VOLTRO_SHUTDOWN_GRACE_MS": "200",
        "VOLTRO_SCHEDULE_HEARTBEAT_MS": "500",
        "VOLTRO_INSPECT_TOKEN": INSPECT,
        "CLUSTER_SCHEDULES": "line",
        "CLUSTER_LINE_LOG": str(log),
        **extra,
    }


def _spans(log: Path) -> list[dict[str, object]]:
    if not log.exists():
        return []
    spans = [json.loads(line) for line in log.read_text().splitlines() if line]
    return sorted(spans, key=lambda s: float(s["start"]))  # type: ignore[arg-type]


def assert_one_at_a_time_in_order(spans: list[dict[str, object]]) -> None:
    slots = [str(s["slot"]) for s in spans]
    twice = {slot: n for slot, n in Counter(slots).items() if n > 1}
    assert not twice, f"occurrences run twice: {twice}"
    for before, after in zip(spans, spans[1:], strict=False):
        assert float(before["end"]) <= float(after["start"]), (  # type: ignore[arg-type]
            f"two runs at once: {before} and {after}"
        )
    assert [datetime.fromisoformat(s) for s in slots] == sorted(
        datetime.fromisoformat(s) for s in slots
    ), f"not in scheduled_at order: {slots}"


@pytest.mark.parametrize("store", STORES)
def test_three_replicas_run_a_slow_queue_schedule_once_each_one_at_a_time_in_order(
    store: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    url = request.getfixturevalue(f"{store}_url")
    run_async(upgrade_to_head(url))
    log = tmp_path / "spans.jsonl"
    envs = [_env(url, f"{store}-q{i}", log) for i in range(3)]
    seen_queued: list[dict[str, object]] = []
    with uvicorn_cluster(tmp_path, envs) as replicas:
        headers = {"Authorization": f"Bearer {INSPECT}"}
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            r = httpx.get(
                replicas[0].url + "/_voltro/inspect/schedules/runs",
                params={"name": "line", "status": "queued"},
                headers=headers,
                timeout=5,
            )
            assert r.status_code == 200, r.text
            seen_queued += r.json()["runs"]
            time.sleep(1.0)
        logs = "\n".join(rep.log() for rep in replicas)
    rows = fetch_runs(url, "line")
    spans = _spans(log)
    assert len(spans) >= 6, (spans, logs[-3000:])
    assert_one_at_a_time_in_order(spans)
    # The ledger agrees: one row per occurrence, and every span is its slot's row.
    per_slot = Counter(r.scheduled_at for r in rows)
    assert all(n == 1 for n in per_slot.values()), [k for k, n in per_slot.items() if n > 1]
    by_id = {r.id: r for r in rows}
    assert all(str(s["runId"]) in by_id for s in spans)
    assert all(by_id[str(s["runId"])].status is RunStatus.SUCCEEDED for s in spans)
    # Consecutive occurrences landed on different replicas, and the line held anyway.
    assert len({s["replica"] for s in spans}) >= 2, spans
    # The backlog was visible while it existed.
    assert seen_queued and all(q["status"] == "queued" for q in seen_queued)
    assert "schedule: queued behind a run in flight   name=line heldBy=" in logs
    assert "schedule: queued behind an earlier firing name=line behind=" in logs
    assert "Traceback" not in logs
