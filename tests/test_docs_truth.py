"""What the docs name exists: every ledger table, every setting and every route.

tests/test_docs_commands.py holds the ``voltro`` verbs, their flags and the ``VOLTRO_*``
variables; this file holds the rest a reader copies into SQL, code or a URL:

* every ``_voltro_schedule_*`` / ``_voltro_alembic_version`` table name README.md or a page of
  docs/ mentions is a table of ``voltro_metadata`` (or Alembic's version table), and the table
  list of docs/migrations.md is all of them, with the right count in its sentence;
* every field of the configuration table of docs/configuration.md, and every keyword passed to
  ``SchedulingConfig(...)`` in any page, is a ``SchedulingConfig`` field, and every field is in
  that table;
* every ``/_voltro/...`` path is a route of ``schedules_router`` (``{param}`` segments match any
  parameter; a mention that stops at a segment boundary — the runs base URL the CronJob script
  appends an id to — must be the start of a route).
"""

from __future__ import annotations

import re
import tomllib
from enum import Enum
from pathlib import Path
from typing import Any, get_args

from fastapi import FastAPI
from support.servers import REPO

from fastapi_voltro_schedules import SchedulingConfig, schedules_router
from fastapi_voltro_schedules.models import ALEMBIC_VERSION_TABLE, voltro_metadata

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

TABLE = re.compile(r"(?<![\w])_voltro_(?:schedule_[a-z_]*[a-z]|alembic_version)\b")
ROUTE = re.compile(r"/_voltro(?:/[A-Za-z0-9_{}.-]+)*/?")
CONFIG_ROW = re.compile(r"^\|\s*`([a-z_]+)`\s*\|\s*`VOLTRO_[A-Z_]+`\s*\|")
CONFIG_CALL = re.compile(r"SchedulingConfig\(([^()]*)\)")
KEYWORD = re.compile(r"(?<![\w.])([a-z_][a-z0-9_]*)\s*=(?!=)")
NUMBERS = {"two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9}


def _text(page: Path) -> str:
    return page.read_text()


def _where(page: Path) -> str:
    return page.relative_to(REPO).as_posix() if page.is_relative_to(REPO) else page.name


# --- tables -------------------------------------------------------------------------------


def known_tables() -> set[str]:
    return set(voltro_metadata.tables) | {ALEMBIC_VERSION_TABLE}


def table_mentions(pages: list[Path]) -> set[tuple[str, str]]:
    return {(name, _where(page)) for page in pages for name in TABLE.findall(_text(page))}


def test_every_table_the_docs_name_exists() -> None:
    known = known_tables()
    unknown = sorted(
        f"{name} ({page})" for name, page in table_mentions(PAGES) if name not in known
    )
    assert not unknown, f"the docs name tables the models do not define: {unknown}"


def test_the_migrations_page_lists_every_table_and_counts_them() -> None:
    text = _text(REPO / "docs" / "migrations.md")
    listed = set(re.findall(r"^\|\s*`(_voltro_schedule_[a-z_]+)`\s*\|", text, re.M))
    assert listed == set(voltro_metadata.tables), (
        f"docs/migrations.md's table list differs from voltro_metadata: "
        f"missing {set(voltro_metadata.tables) - listed}, "
        f"extra {listed - set(voltro_metadata.tables)}"
    )
    count = re.search(r"keeps its ledger in (\w+) tables", text)
    assert count, "docs/migrations.md no longer says how many tables the ledger has"
    assert NUMBERS.get(count.group(1)) == len(voltro_metadata.tables), count.group(0)


# --- settings -----------------------------------------------------------------------------


def configuration_fields() -> list[str]:
    lines = _text(REPO / "docs" / "configuration.md").splitlines()
    return [m.group(1) for line in lines if (m := CONFIG_ROW.match(line))]


def config_keywords(pages: list[Path]) -> set[tuple[str, str]]:
    found = set()
    for page in pages:
        for call in CONFIG_CALL.findall(_text(page)):
            found.update((name, _where(page)) for name in KEYWORD.findall(call))
    return found


def test_the_configuration_table_is_the_settings_model() -> None:
    documented = configuration_fields()
    fields = set(SchedulingConfig.model_fields)
    assert len(documented) == len(set(documented)), "a field is documented twice"
    assert set(documented) == fields, (
        f"docs/configuration.md's table: unknown {set(documented) - fields}, "
        f"undocumented {fields - set(documented)}"
    )


def enum_of(annotation: Any) -> type[Enum] | None:
    for candidate in (annotation, *get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, Enum):
            return candidate
    return None


def test_the_configuration_table_names_every_value_a_choice_setting_takes() -> None:
    """A value the settings accept but the page leaves out (``cluster`` once was documented as
    "not available in this version" while config.py served it) is a doc that lies by omission."""
    rows = {
        m.group(1): line
        for line in _text(REPO / "docs" / "configuration.md").splitlines()
        if (m := CONFIG_ROW.match(line))
    }
    missing = []
    for name, field in SchedulingConfig.model_fields.items():
        choices = enum_of(field.annotation)
        if choices is None or name not in rows:
            continue
        missing += [f"{name}={c.value}" for c in choices if f"`{c.value}`" not in rows[name]]
    assert not missing, f"docs/configuration.md's table leaves out: {missing}"
    page = _text(REPO / "docs" / "configuration.md")
    assert not re.search(r"`cluster` is not available", page)


def test_every_setting_the_docs_pass_in_code_exists() -> None:
    fields = set(SchedulingConfig.model_fields)
    unknown = sorted(f"{n} ({p})" for n, p in config_keywords(PAGES) if n not in fields)
    assert not unknown, f"the docs pass SchedulingConfig settings it does not have: {unknown}"


# --- routes -------------------------------------------------------------------------------


def route_paths(routes: list[Any], prefix: str = "") -> list[str]:
    """Every route path, included routers walked with their include prefix."""
    found: list[str] = []
    for route in routes:
        inner = getattr(route, "original_router", None)
        if inner is not None:
            context = getattr(route, "include_context", None)
            found += route_paths(inner.routes, prefix + (getattr(context, "prefix", "") or ""))
        elif getattr(route, "path", None) is not None:
            found.append(prefix + route.path)
    return found


def app_routes() -> list[str]:
    app = FastAPI()
    app.include_router(schedules_router)
    return [p for p in route_paths(app.routes) if p.startswith("/_voltro")]


def route_exists(mention: str, routes: list[str]) -> bool:
    said = mention.rstrip("/").split("/")
    for route in routes:
        parts = route.split("/")
        if len(said) > len(parts):
            continue
        if all(
            a == b or (b.startswith("{") and b.endswith("}"))
            for a, b in zip(said, parts, strict=False)
        ):
            return True
    return False


def route_mentions(pages: list[Path]) -> set[tuple[str, str]]:
    return {(m, _where(page)) for page in pages for m in ROUTE.findall(_text(page))}


def test_every_route_the_docs_name_exists() -> None:
    routes = app_routes()
    assert "/_voltro/schedules/{name}/trigger" in routes  # the walk sees the included routers
    unknown = sorted(f"{m} ({p})" for m, p in route_mentions(PAGES) if not route_exists(m, routes))
    assert not unknown, f"the docs name routes the app does not have: {unknown}"


# --- extras -------------------------------------------------------------------------------

EXTRA = re.compile(r"fastapi-voltro-schedules\[([a-z,]+)\]")


def test_the_docs_name_the_driver_extras_where_a_database_is_chosen() -> None:
    extras = set(
        tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    )
    named = {
        (extra, _where(page))
        for page in PAGES
        for group in EXTRA.findall(_text(page))
        for extra in group.split(",")
    }
    unknown = sorted(f"[{e}] ({p})" for e, p in named if e not in extras)
    assert not unknown, f"the docs name extras pyproject.toml does not define: {unknown}"
    for page in ("README.md", "docs/configuration.md", "docs/migrations.md"):
        assert {("postgres", page), ("mysql", page)} <= named, f"{page} names no driver extra"


# --- the checks themselves ----------------------------------------------------------------


def test_the_checks_catch_a_wrong_table_setting_and_route(tmp_path: Path) -> None:
    page = tmp_path / "probe.md"
    page.write_text(
        "The `_voltro_schedule_runs` and `_voltro_schedule_jobs` tables; "
        "`fastapi_voltro_schedules` is no table.\n"
        "`SchedulingConfig(database_url=url, coordinaton='cluster')`\n"
        "GET /_voltro/inspect/schedules/digest/fire, POST /_voltro/schedules/x/trigger-now, "
        "the base `…/_voltro/schedules/runs`, GET /_voltro/healthz\n"
    )
    assert {n for n, _ in table_mentions([page])} == {
        "_voltro_schedule_runs",
        "_voltro_schedule_jobs",
    }
    assert {n for n, _ in table_mentions([page])} - known_tables() == {"_voltro_schedule_jobs"}
    fields = set(SchedulingConfig.model_fields)
    assert {n for n, _ in config_keywords([page])} - fields == {"coordinaton"}
    routes = app_routes()
    wrong = {m for m, _ in route_mentions([page]) if not route_exists(m, routes)}
    assert wrong == {"/_voltro/schedules/x/trigger-now", "/_voltro/healthz"}
