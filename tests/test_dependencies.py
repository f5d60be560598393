"""The runtime dependencies are exactly what the package imports (plus the few it loads
indirectly, each with its reason), and ``voltro --version`` prints the installed version."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import distribution, packages_distributions, version
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fastapi_voltro_schedules.cli import app as cli_app

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "fastapi_voltro_schedules"

LOADED_INDIRECTLY = {
    "aiosqlite": "SQLAlchemy loads it for sqlite+aiosqlite:// URLs (the embedded default)",
    "tzdata": "zoneinfo reads it where the system has no tz database (Windows, slim images)",
    "uvicorn": "imported inside voltro dev/serve only; declared so those verbs work",
}


def _name(requirement: str) -> str:
    return re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _runtime_dependencies() -> set[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return {_name(r) for r in project["dependencies"]}


def _imported_distributions() -> set[str]:
    """Distributions of every non-stdlib module the package imports (any scope)."""
    dotted: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                dotted.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                dotted.update(f"{node.module}.{alias.name}" for alias in node.names)
    by_module = packages_distributions()
    found = set()
    for name in dotted:
        module = name.split(".")[0]
        if module in sys.stdlib_module_names or module == "fastapi_voltro_schedules":
            continue
        dists = by_module.get(module)
        assert dists, f"{module!r} is imported but no installed distribution provides it"
        if len(dists) > 1:  # a namespace package (opentelemetry): whose file is the import's
            dists = [_providing(name, dists)]
        found.update(d.lower().replace("_", "-") for d in dists)
    return found


def _providing(name: str, dists: list[str]) -> str:
    """The one of ``dists`` that ships the module (or package) ``name`` — or its parent, for
    ``from package import name`` of a plain attribute."""
    parts = name.split(".")
    for depth in range(len(parts), 1, -1):
        wanted = "/".join(parts[:depth])
        for dist in dists:
            files = distribution(dist).files or []
            if any(str(f) in (f"{wanted}.py", f"{wanted}/__init__.py") for f in files):
                return dist
    raise AssertionError(f"{name!r}: none of {dists} ships it")


def test_every_imported_distribution_is_a_runtime_dependency() -> None:
    # the postgres / mysql / sentry / holidays extras, imported lazily; the hand-off engines'
    # extras, each imported by its own module of handoff/ only (the app imports the one it
    # uses); pytest only by the pytest plugin (testing.py), which only pytest loads
    optional = {"asyncpg", "asyncmy", "pytest", "sentry-sdk", "holidays"} | set(HANDOFF_EXTRAS)
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


def _project() -> dict[str, object]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]  # type: ignore[no-any-return]


def test_the_example_apps_instrumentator_is_an_extra_not_a_dependency() -> None:
    project = _project()
    extras = project["optional-dependencies"]
    assert isinstance(extras, dict)
    assert "prometheus-fastapi-instrumentator" not in _runtime_dependencies()
    assert "prometheus-fastapi-instrumentator" in {_name(r) for r in extras["example"]}
    assert "prometheus_fastapi_instrumentator" not in {m for m in _imported_modules(PACKAGE)}, (
        "the package itself must not import the example app's instrumentator"
    )
    assert "prometheus_fastapi_instrumentator" in _imported_modules(REPO / "example_app")
    readme = (REPO / "README.md").read_text()
    assert "pip install -e '.[example]' && .venv/bin/uvicorn example_app.main:app" in readme


def _imported_modules(root: Path) -> set[str]:
    modules: set[str] = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                modules.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules.add(node.module.split(".")[0])
    return modules


def test_the_server_drivers_are_extras() -> None:
    extras = _project()["optional-dependencies"]
    assert isinstance(extras, dict)
    assert {_name(r) for r in extras["postgres"]} == {"asyncpg"}
    assert {_name(r) for r in extras["mysql"]} == {"asyncmy"}
    assert not {"asyncpg", "asyncmy"} & _runtime_dependencies()


def test_sentry_sdk_is_an_extra_imported_only_by_the_sentry_monitor() -> None:
    extras = _project()["optional-dependencies"]
    assert isinstance(extras, dict)
    assert {_name(r) for r in extras["sentry"]} == {"sentry-sdk"}
    assert "sentry-sdk" in {_name(r) for r in extras["dev"]}  # tests/test_monitors.py
    assert "sentry-sdk" not in _runtime_dependencies()
    importers = {
        path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("*.py")
        if "sentry_sdk" in _imported_modules_of(path)
    }
    assert importers == {"monitors/sentry.py"}  # and there inside functions (test_monitors.py)


def test_holidays_is_an_extra_imported_only_when_a_holidays_spec_is_built() -> None:
    extras = _project()["optional-dependencies"]
    assert isinstance(extras, dict)
    assert {_name(r) for r in extras["holidays"]} == {"holidays"}
    assert "holidays" in {_name(r) for r in extras["dev"]}  # tests/test_exclusions*.py
    assert "holidays" not in _runtime_dependencies()
    importers = {
        path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("*.py")
        if "holidays" in _imported_modules_of(path)
    }
    assert importers == {"exclusions.py"}  # and there inside a function


def _imported_modules_of(path: Path) -> set[str]:
    modules: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            modules.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules.add(node.module.split(".")[0])
    return modules


def test_license_classifiers_and_urls() -> None:
    project = _project()
    assert project["license"] == "MIT"
    license_text = (REPO / "LICENSE").read_text()
    assert license_text.startswith("MIT License")
    assert "Copyright (c) the fastapi-voltro-schedules authors" in license_text
    classifiers = project["classifiers"]
    assert isinstance(classifiers, list)
    assert "Framework :: FastAPI" in classifiers
    assert "Typing :: Typed" in classifiers
    assert not any(c.startswith("License ::") for c in classifiers)  # PEP 639: `license` says it
    requires = str(project["requires-python"]).removeprefix(">=")
    assert f"Programming Language :: Python :: {requires}" in classifiers
    urls = project["urls"]
    assert isinstance(urls, dict) and urls
    assert all(str(u).startswith("https://") for u in urls.values())


def test_typer_floor_is_one_that_works_with_the_click_it_resolves() -> None:
    """typer < 0.15.4 resolves the newest click, which breaks it (0.12: `voltro --version`
    crashes; 0.13–0.15.3: `--help`); .ci/lowest-deps installs the floors and runs both."""
    floors = {
        _name(r): r.split(">=", 1)[1].split(",")[0].strip()
        for r in _project()["dependencies"]  # type: ignore[attr-defined]
        if ">=" in r
    }
    assert tuple(int(x) for x in floors["typer"].split(".")) >= (0, 15, 4)
    assert tuple(int(x) for x in floors["typing-extensions"].split(".")) >= (4, 8)  # fastapi's


HANDOFF_EXTRAS = {"arq": "arq", "celery": "celery", "procrastinate": "procrastinate"}
"""Extra → the distribution it brings, imported by ``handoff/<extra>.py`` alone."""


@pytest.mark.parametrize("extra", sorted(HANDOFF_EXTRAS))
def test_each_handoff_engine_is_an_extra_imported_only_by_its_own_module(extra: str) -> None:
    extras = _project()["optional-dependencies"]
    assert isinstance(extras, dict)
    brought = HANDOFF_EXTRAS[extra]
    assert brought in {_name(r) for r in extras[extra]}
    assert brought in {_name(r) for r in extras["dev"]}  # tests/test_handoff_*.py
    assert brought not in _runtime_dependencies()
    importers = {
        path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("*.py")
        if brought in _imported_modules_of(path)
    }
    assert importers == {f"handoff/{extra}.py"}
    # and the package itself never loads it: `import fastapi_voltro_schedules` works without
    import subprocess

    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, fastapi_voltro_schedules; "
         f"print({brought!r} in sys.modules)"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert loaded.stdout.strip() == "False"
