"""Find schedules by convention: every ``*_cron`` module of a package (the ``*.cron.tsx`` rule)."""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

from .definition import Schedule
from .errors import DiscoveryError

CRON_MODULE_SUFFIX = "_cron"


def _cron_modules(package: ModuleType) -> list[str]:
    names = [package.__name__] if package.__name__.endswith(CRON_MODULE_SUFFIX) else []
    path = getattr(package, "__path__", None)
    if path is None:  # a plain module, not a package
        return names
    for info in pkgutil.walk_packages(path, prefix=package.__name__ + "."):
        if info.name.rsplit(".", 1)[-1].endswith(CRON_MODULE_SUFFIX):
            names.append(info.name)
    return sorted(names)


def discover_schedules(package: str | ModuleType) -> list[Schedule]:
    """Import every module of ``package`` whose name ends in ``_cron`` and collect the
    module-level :class:`Schedule` objects, in module order then definition order.

    The same object re-exported by a second module counts once; two distinct schedules with
    one name raise :class:`DiscoveryError` naming both modules.
    """
    root = importlib.import_module(package) if isinstance(package, str) else package
    found: list[tuple[Schedule, str | None]] = []
    for module_name in _cron_modules(root):
        module = importlib.import_module(module_name)
        found.extend(
            (value, module_name) for value in vars(module).values() if isinstance(value, Schedule)
        )
    return _unique(found)


def check_unique_names(schedules: list[Schedule]) -> list[Schedule]:
    """The list without repeated objects; :class:`DiscoveryError` when two share a name."""
    return _unique([(schedule, schedule.module) for schedule in schedules])


def _unique(found: list[tuple[Schedule, str | None]]) -> list[Schedule]:
    seen: dict[str, tuple[Schedule, str | None]] = {}
    for schedule, where in found:
        previous = seen.get(schedule.name)
        if previous is None:
            seen[schedule.name] = (schedule, where)
        elif previous[0] is not schedule:
            raise DiscoveryError(
                f'two schedules are named "{schedule.name}": one in {previous[1]}, one in '
                f"{where} — schedule names are the coordination key and must be unique; "
                "rename one"
            )
    return [schedule for schedule, _ in seen.values()]
