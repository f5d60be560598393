"""The runtime dependencies are exactly what the package imports (plus the few it loads
indirectly, each with its reason), and ``voltro --version`` prints the installed version."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions, version
from pathlib import Path

from typer.testing import CliRunner

from fastapi_voltro_schedules.cli import app as cli_app

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "fastapi_voltro_schedules"

LOADED_INDIRECTLY = {
    "aiosqlite": "SQLAlchemy loads it for sqlite+aiosqlite:// URLs (the embedded default)",
    "tzdata": "zoneinfo reads it where the system has no tz database (Windows, slim images)",
    "uvicorn": "imported inside voltro dev/serve only; declared so those verbs work",
    "prometheus-fastapi-instrumentator": "the example app (the README's first command) "
    "instruments its HTTP side with it",
}


def _name(requirement: str) -> str:
    return re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _runtime_dependencies() -> set[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return {_name(r) for r in project["dependencies"]}


def _imported_distributions() -> set[str]:
    """Distributions of every non-stdlib module the package imports (any scope)."""
    modules: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                modules.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules.add(node.module.split(".")[0])
    third_party = modules - set(sys.stdlib_module_names) - {"fastapi_voltro_schedules"}
    by_module = packages_distributions()
    found = set()
    for module in third_party:
        dists = by_module.get(module)
        assert dists, f"{module!r} is imported but no installed distribution provides it"
        found.update(d.lower().replace("_", "-") for d in dists)
    return found


def test_every_imported_distribution_is_a_runtime_dependency() -> None:
    # the postgres / mysql extras, imported lazily; pytest only by the pytest plugin
    # (testing.py), which only pytest loads
    optional = {"asyncpg", "asyncmy", "pytest"}
    missing = _imported_distributions() - _runtime_dependencies() - optional
    assert not missing, f"imported but not declared in [project].dependencies: {missing}"
    assert "rich" in _runtime_dependencies()  # cli/backfill.py draws its progress bar with it


def test_every_runtime_dependency_is_imported_or_has_a_reason() -> None:
    unused = _runtime_dependencies() - _imported_distributions() - set(LOADED_INDIRECTLY)
    assert not unused, f"declared but nothing imports them: {unused}"
    assert "croniter" not in _runtime_dependencies()  # the engine's cron math is its own


def test_version_flag_prints_the_installed_version() -> None:
    result = CliRunner().invoke(cli_app, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == (
        f"voltro (fastapi-voltro-schedules) {version('fastapi-voltro-schedules')}"
    )
