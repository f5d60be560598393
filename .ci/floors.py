"""The floors of pyproject.toml's direct dependencies, as pins: `name==floor`, one a line.

`.ci/lowest-deps` installs with them as pip constraints (what `uv pip install --resolution
lowest-direct` does); `--verify` checks the installed versions are exactly those floors.
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"
REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?\s*>=\s*([0-9][^,;\s]*)")


def floors(extras: list[str]) -> dict[str, str]:
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    requirements = list(project["dependencies"])
    for extra in extras:
        requirements += project["optional-dependencies"][extra]
    found: dict[str, str] = {}
    for requirement in requirements:
        match = REQUIREMENT.match(requirement)
        if match is None:
            sys.exit(f"floors.py: {requirement!r} has no `>=` floor to test")
        found[match.group(1).lower().replace("_", "-")] = match.group(2)
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--extras", default="")
    parser.add_argument("--verify", action="store_true")
    args = parser.parse_args()
    pins = floors([e for e in args.extras.split(",") if e])
    if not args.verify:
        for name, floor in sorted(pins.items()):
            print(f"{name}=={floor}")
        return
    wrong = []
    for name, floor in sorted(pins.items()):
        try:
            installed = version(name)
        except PackageNotFoundError:
            installed = "missing"
        if installed != floor and not installed.startswith(f"{floor}."):
            wrong.append(f"{name}: {installed} installed, floor {floor}")
    if wrong:
        sys.exit("floors.py: not at the floor: " + "; ".join(wrong))


if __name__ == "__main__":
    main()
