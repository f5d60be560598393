"""The import graph keeps its floors (pyproject.toml's ``[tool.importlinter]`` contracts: the
floors, no cycles, pure rules without I/O, the routes importing no store module), run here so
the README's test command holds them as ``.ci/run`` does. The check reads the source and takes
well under a second."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_the_import_contracts_hold() -> None:
    lint_imports = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run(
        [str(lint_imports), "--no-cache", "--no-logo"],
        cwd=REPO,  # lint-imports reads this checkout's package and pyproject.toml
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
