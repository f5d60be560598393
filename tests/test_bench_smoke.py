"""The bench's workloads for our engine at tiny N, through the same harness and worker code
as ``python -m bench``: every expected slot runs exactly once. Speed is not asserted, and the
APScheduler peers (their own venvs) are left out."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import harness

pytestmark = pytest.mark.slow

N = 5


@pytest.fixture
def cfg(tmp_path: Path) -> harness.Config:
    return harness.Config(
        quick=True, runs=1, peers=False, graceful=True, logs=tmp_path, progress=lambda _: None
    )


def only_run(section: harness.Section) -> dict[str, object]:
    assert list(section.runs) == ["ours-sqlite"]
    (result,) = section.runs["ours-sqlite"]
    assert "error" not in result, result
    return result


def test_steady_runs_every_slot_once(cfg: harness.Config) -> None:
    (section,) = harness.run_steady(cfg, sizes=[N], seconds=3.0)
    result = only_run(section)
    assert result["expected"] == N * 3
    assert result["achieved"] == result["expected"]
    assert result["duplicates"] == 0
    # the ledger, read after a graceful shutdown: one succeeded row per slot, nothing else
    assert result["ledger"] == {"succeeded": N * 3}
    assert result["ledger_duplicates"] == 0


def test_herd_runs_every_schedule_once(cfg: harness.Config) -> None:
    result = only_run(harness.run_herd(cfg, n=N, lead=3.0))
    assert result["armed_before_s"] > 0
    assert result["missed"] == 0
    assert result["duplicates"] == 0
    assert result["ledger"] == {"succeeded": N}
    assert result["ledger_duplicates"] == 0
    assert result["lag_p99_ms"] is not None


def test_idle_fires_nothing_between_firings(cfg: harness.Config) -> None:
    result = only_run(harness.run_idle(cfg, n=N, seconds=2.0))
    assert result["fired_in_window"] == 0
    assert result["window_s"] > 1.0
    assert result["cpu_pct"] >= 0


def test_boot_arms(cfg: harness.Config) -> None:
    result = only_run(harness.run_boot(cfg, n=N))
    assert 0 < result["boot_s"] < 30


def test_table_renders(cfg: harness.Config) -> None:
    (section,) = harness.run_steady(cfg, sizes=[1], seconds=1.0)
    table = harness.render([section], cfg.systems(), {"cpus": "2"})
    assert "ours, SQLite ledger" in table


def _bench(*args: str) -> str:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", *args], capture_output=True, text=True, timeout=120, check=True
    )
    return done.stdout


def test_range_backfill_bench_runs_every_slot() -> None:
    out = _bench("bench.range_backfill", "--slots", "5", "--repeat", "1")
    assert "sqlite    slots=5" in out and "per-slot median=" in out


def test_trigger_bench_storm_runs_the_handler_once() -> None:
    out = _bench("bench.trigger_rps", "--seconds", "0.5", "--concurrency", "2")
    assert "answers {'accepted': 1, 'duplicate': 199}" in out
    assert "ratio trigger/bare" in out


@pytest.mark.postgres
def test_queue_handoff_bench_measures_every_handoff() -> None:
    # Not the postgres_url fixture: the bench takes the machine-wide Postgres lock itself.
    from conftest import require_service_url

    url = require_service_url("postgres")
    out = _bench(
        "bench.queue_handoff", "--postgres-url", url, "--handoffs", "3", "--strategy", "cdc"
    )
    assert "cdc   handoffs=3  p50=" in out and "p99=" in out


@pytest.mark.postgres
def test_runtime_cdc_bench_times_every_write() -> None:
    from conftest import require_service_url

    url = require_service_url("postgres")
    out = _bench("bench.runtime_cdc", "--postgres-url", url, "--writes", "3", "--strategy", "cdc")
    assert "cdc   writes=3" in out and "from put returned: p50=" in out, out


def test_herd_floor_writes_the_rows_and_starts_every_task() -> None:
    out = _bench("bench.herd_floor", "--n", "50", "--repeat", "2")
    rounds = [line for line in out.splitlines() if line.startswith("insert ")]
    assert len(rounds) == 2 and all("started 50 " in line for line in rounds), out


def test_steady_floor_runs_every_task_and_finishes_every_row() -> None:
    out = _bench("bench.steady_floor", "--n", "20", "--rounds", "3")
    assert "tasks only" in out and out.count("firings 60 ") == 2, out
    # every row written `running` was finished by the terminal write, none left behind
    assert "ledger rows by status: {'succeeded': 60}" in out, out


@pytest.mark.postgres
def test_listing_bench_pages_and_runs_answer() -> None:
    from conftest import require_service_url

    url = require_service_url("postgres")
    out = _bench(
        "bench.listing", "--postgres-url", url, "--schedules", "20", "--rows", "2000",
        "--seconds", "0.3", "--concurrency", "2", "--limit", "5",
    )  # fmt: skip
    assert "app booted with 20 schedules" in out, out
    rows = [line for line in out.splitlines() if line.startswith("| listing") or "runs" in line]
    table = [line for line in rows if line.startswith("| ")]
    assert len(table) == 6, out
    assert all(line.rstrip().endswith("| 0 |") for line in table), out  # no non-200
