"""``bench/handoff.py`` at tiny N, through the same code as ``python -m bench.handoff``: every
firing's work starts once, in process and on a real arq worker. Speed is not asserted."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from bench.handoff import one_engine, worker

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


@pytest.mark.parametrize("engine", ["in-process", "arq"])
def test_the_handoff_bench_measures_every_firing(
    engine: str, postgres_url: str, redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {"BENCH_HANDOFF_REDIS_URL": redis_url, "BENCH_HANDOFF_MARKS": str(tmp_path)}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with worker(engine, env, tmp_path / "worker.log"):
        figures = asyncio.run(one_engine(engine, postgres_url, 3, tmp_path))
    assert (figures.engine, figures.firings) == (engine, 3)
    assert len(figures.lag_ms) == len(figures.final_ms) == 3
    assert all(lag > 0 for lag in figures.lag_ms)
    assert "throughput=" in figures.line()
