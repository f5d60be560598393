"""``example_app/replicas.py``: three real replicas of the example app on the test Postgres;
every slot they ran is in the ledger once, and more than one replica took part.

The script runs its replicas for a fixed ``--seconds`` and then reports — a demo, not a wait on
a condition, so it cannot be made to wait for the slots. ``heartbeat`` therefore fires every
second here (``EXAMPLE_HEARTBEAT_CRON``) instead of every five: "something ran" needs one of
about seven slots to fire, not the only one, so only a machine stalled for the whole run fails
it. Every other verdict (each slot once) does not depend on how many slots fired."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from support.servers import REPO

pytestmark = pytest.mark.slow


def test_three_replicas_run_each_slot_once(postgres_url: str, tmp_path: object) -> None:
    env = {**os.environ, "EXAMPLE_HEARTBEAT_CRON": "* * * * * *"}
    result = subprocess.run(
        [sys.executable, str(REPO / "example_app" / "replicas.py"), "--database-url",
         postgres_url, "--seconds", "7", "--base-port", "18451", "--logs", str(tmp_path)],
        capture_output=True, text=True, timeout=150, check=False, cwd=REPO, env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "exactly once:" in result.stdout and "DUPLICATE" not in result.stdout
    heartbeat = re.search(r"^heartbeat\s+(\d+)\s+(\d+)\s+(\d+)$", result.stdout, re.M)
    assert heartbeat, result.stdout
    slots, runs, replicas = map(int, heartbeat.groups())
    assert slots >= 1 and runs == slots  # every second for 7 s, each slot one run
    assert 1 <= replicas <= 3
