"""discover_schedules: every *_cron module of a package, duplicates named with both modules."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fastapi_voltro_schedules import DiscoveryError, Scheduling, discover_schedules

SCHEDULE = '''
from fastapi_voltro_schedules import define_schedule

@define_schedule(name="{name}", cron="0 9 * * *", timezone="UTC")
async def job(ctx):
    return None
'''


@pytest.fixture
def make_package(tmp_path: Path) -> Iterator[object]:
    created: list[str] = []

    def make(package: str, files: dict[str, str]) -> str:
        for rel, text in files.items():
            path = tmp_path / package / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        for directory in {p for p in (tmp_path / package).rglob("*") if p.is_dir()} | {
            tmp_path / package
        }:
            (directory / "__init__.py").touch()
        created.append(package)
        return package

    sys.path.insert(0, str(tmp_path))
    yield make
    sys.path.remove(str(tmp_path))
    for name in list(sys.modules):
        if any(name == p or name.startswith(p + ".") for p in created):
            del sys.modules[name]


def test_discovers_only_cron_modules(make_package) -> None:  # type: ignore[no-untyped-def]
    pkg = make_package(
        "disc_app_one",
        {
            "billing/rollup_cron.py": SCHEDULE.format(name="dailyRollup"),
            "billing/routes.py": SCHEDULE.format(name="notDiscovered"),
            "digest_cron.py": SCHEDULE.format(name="dailyDigest"),
            "deep/er/prune_cron.py": SCHEDULE.format(name="prune"),
        },
    )
    names = [s.name for s in discover_schedules(pkg)]
    assert sorted(names) == ["dailyDigest", "dailyRollup", "prune"]
    assert "notDiscovered" not in names
    scheduling = Scheduling.from_package(pkg)
    assert sorted(s.name for s in scheduling.schedules) == sorted(names)


def test_reexport_counts_once(make_package) -> None:  # type: ignore[no-untyped-def]
    pkg = make_package(
        "disc_app_two",
        {
            "a_cron.py": SCHEDULE.format(name="shared"),
            "b_cron.py": "from disc_app_two.a_cron import job as again\n",
        },
    )
    assert [s.name for s in discover_schedules(pkg)] == ["shared"]


def test_duplicate_names_name_both_modules(make_package) -> None:  # type: ignore[no-untyped-def]
    pkg = make_package(
        "disc_app_three",
        {
            "one_cron.py": SCHEDULE.format(name="report"),
            "sub/two_cron.py": SCHEDULE.format(name="report"),
        },
    )
    with pytest.raises(DiscoveryError) as info:
        discover_schedules(pkg)
    msg = str(info.value)
    assert '"report"' in msg
    assert "disc_app_three.one_cron" in msg and "disc_app_three.sub.two_cron" in msg
    assert "rename one" in msg


def test_hand_built_list_with_duplicates_rejected() -> None:
    from fastapi_voltro_schedules import define_schedule

    async def h(ctx: object) -> None:
        return None

    a = define_schedule(name="x", cron="0 9 * * *", timezone="UTC", handler=h)
    b = define_schedule(name="x", cron="0 10 * * *", timezone="UTC", handler=h)
    with pytest.raises(DiscoveryError, match='two schedules are named "x"'):
        Scheduling([a, b])
    assert len(Scheduling([a, a]).schedules) == 1


@pytest.mark.parametrize(
    ("files", "module", "cause"),
    [
        # a subpackage whose __init__ fails: walk_packages skipped it silently before
        (
            {"billing/__init__.py": "import no_such_module_anywhere\n",
             "billing/rollup_cron.py": SCHEDULE.format(name="dailyRollup")},
            "disc_broken.billing",
            ModuleNotFoundError,
        ),
        (
            {"ops/__init__.py": "raise RuntimeError('bad config at import')\n",
             "ops/prune_cron.py": SCHEDULE.format(name="prune")},
            "disc_broken.ops",
            RuntimeError,
        ),
        # a _cron module that fails
        (
            {"digest_cron.py": "from .nowhere import thing\n"},
            "disc_broken.digest_cron",
            ImportError,
        ),
    ],
)  # fmt: skip
def test_a_module_that_fails_to_import_stops_discovery_naming_it(
    make_package, files: dict[str, str], module: str, cause: type[Exception]
) -> None:  # type: ignore[no-untyped-def]
    pkg = make_package("disc_broken", {"fine_cron.py": SCHEDULE.format(name="fine"), **files})
    with pytest.raises(DiscoveryError) as info:
        discover_schedules(pkg)
    assert f"module {module} failed to import" in str(info.value)
    assert isinstance(info.value.__cause__, cause)
    with pytest.raises(DiscoveryError):
        Scheduling.from_package(pkg)


def test_a_broken_module_that_discovery_never_imports_is_not_its_business(make_package) -> None:  # type: ignore[no-untyped-def]
    pkg = make_package(
        "disc_plain",
        {"digest_cron.py": SCHEDULE.format(name="dailyDigest"), "routes.py": "import nope\n"},
    )
    assert [s.name for s in discover_schedules(pkg)] == ["dailyDigest"]
