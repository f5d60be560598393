"""The wheel carries the migrations: ``voltro migrate`` works from a plain ``pip install``."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _run(cmd: list[str], *, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.pop("VOLTRO_DATABASE_URL", None)
    proc = subprocess.run(
        cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert proc.returncode == 0, (
        f"{' '.join(cmd)} exited {proc.returncode}\n"
        f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}"
    )
    return proc


@pytest.mark.slow
def test_wheel_ships_migrations_and_voltro_migrate_works(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    _run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(REPO)],
        cwd=tmp_path,
    )
    (wheel,) = dist.glob("fastapi_voltro_schedules-*.whl")

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], cwd=tmp_path)  # clean: no site-packages
    python = venv / "bin" / "python"
    _run(
        [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q", str(wheel)],
        cwd=tmp_path,
    )

    # the migrations are inside the installed package, found there, not in this checkout
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    probe = _run(
        [
            str(python),
            "-c",
            "import fastapi_voltro_schedules as p, fastapi_voltro_schedules.migrations as m;"
            "print(p.__file__); print(m.script_location()); print(m.head_revision())",
        ],
        cwd=outside,
    )
    package_file, location, head = probe.stdout.split()
    package_dir = Path(package_file).parent
    assert package_dir.is_relative_to(venv), package_dir
    assert Path(location) == package_dir / "_alembic"
    assert head == "0013"
    versions = sorted(
        p.name for p in (package_dir / "_alembic" / "versions").glob("00[0-9][0-9]*.py")
    )
    assert versions == [
        "0001_ledger_tables.py",
        "0002_run_error_traceback.py",
        "0003_schedule_pauses.py",
        "0004_cluster_leases.py",
        "0005_runs_scheduled_index.py",
        "0006_schedule_definitions.py",
        "0007_pause_spans.py",
        "0008_definition_tombstones.py",
        "0009_run_attempts.py",
        "0010_run_jobs.py",
        "0011_definition_exclude.py",
        "0012_scale_listing_state.py",
        "0013_success_rollups.py",
    ]
    assert (package_dir / "_alembic" / "env.py").is_file()
    assert (package_dir / "_alembic" / "script.py.mako").is_file()
    # the dashboard's templates and static files ship too (no CDN, nothing to build)
    dashboard = package_dir / "dashboard"
    for asset in (
        "templates/_base.html",
        "templates/signin.html",
        "templates/dashboard.html",
        "static/dashboard.css",
        "static/dashboard.js",
        "static/favicon.svg",
    ):
        assert (dashboard / asset).is_file(), asset
    served = _run(
        [
            str(python),
            "-c",
            "from fastapi_voltro_schedules.api import dashboard as d;"
            "d._templates().get_template('dashboard.html'); print(len(d._static('dashboard.js')))",
        ],
        cwd=outside,
    )
    assert int(served.stdout) > 1000

    db = tmp_path / "x.db"
    result = _run(
        [str(venv / "bin" / "voltro"), "migrate", "--database-url", f"sqlite+aiosqlite:///{db}"],
        cwd=outside,
    )
    assert result.stdout.strip() == (
        "voltro migrate: _voltro_schedule_runs, _voltro_schedule_claims, _voltro_schedule_pauses, "
        "_voltro_schedule_pause_spans, _voltro_schedule_definitions, _voltro_schedule_members, "
        "_voltro_schedule_leases, _voltro_schedule_state, _voltro_schedule_rollups at 0013 (sqlite)"
    )
    with sqlite3.connect(db) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        version = conn.execute("SELECT version_num FROM _voltro_alembic_version").fetchall()
    assert {
        "_voltro_schedule_runs",
        "_voltro_schedule_claims",
        "_voltro_schedule_pauses",
        "_voltro_schedule_pause_spans",
        "_voltro_schedule_definitions",
        "_voltro_schedule_members",
        "_voltro_schedule_leases",
        "_voltro_schedule_state",
        "_voltro_schedule_rollups",
    } <= tables
    assert version == [("0013",)]
