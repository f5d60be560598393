"""Find schedules and handlers by convention: every ``*_cron`` module of a package (the
``*.cron.tsx`` rule)."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterator
from types import ModuleType

from .definition import Schedule
from .errors import ConfigurationError, DiscoveryError, shown
from .handlers import NamedHandler

CRON_MODULE_SUFFIX = "_cron"


def _import(name: str, root: str) -> ModuleType:
    """Import ``name``; any failure is a :class:`DiscoveryError` naming the module, with the
    original error as ``__cause__`` (``pkgutil.walk_packages`` skipped a subpackage that failed
    to import, silently: its schedules never fired and nothing said so)."""
    try:
        return importlib.import_module(name)
    except Exception as exc:
        raise DiscoveryError(
            f"discovering schedules under {root}: module {name} failed to import "
            f"({type(exc).__name__}: {shown(str(exc), 300)}) — fix it; the boot stops rather "
            "than run without the schedules it may hold"
        ) from exc


def _walk(path: list[str], prefix: str, root: str) -> Iterator[str]:
    """Every module and package name below ``path``, importing each package (to descend)."""
    for info in pkgutil.iter_modules(path, prefix):
        yield info.name
        if info.ispkg:
            sub = getattr(_import(info.name, root), "__path__", None)
            if sub is not None:
                yield from _walk(list(sub), info.name + ".", root)


def _cron_modules(package: ModuleType) -> list[str]:
    names = [package.__name__] if package.__name__.endswith(CRON_MODULE_SUFFIX) else []
    path = getattr(package, "__path__", None)
    if path is None:  # a plain module, not a package
        return names
    for name in _walk(list(path), package.__name__ + ".", package.__name__):
        if name.rsplit(".", 1)[-1].endswith(CRON_MODULE_SUFFIX):
            names.append(name)
    return sorted(names)


def discover_schedules(package: str | ModuleType) -> list[Schedule]:
    """Import every module of ``package`` whose name ends in ``_cron`` and collect the
    module-level :class:`Schedule` objects, in module order then definition order.

    The same object re-exported by a second module counts once; two distinct schedules with
    one name raise :class:`DiscoveryError` naming both modules. A subpackage or ``_cron``
    module that fails to import raises :class:`DiscoveryError` naming it (the original error is
    its ``__cause__``).
    """
    root = _import(package, package) if isinstance(package, str) else package
    found: list[tuple[Schedule, str | None]] = []
    for module_name in _cron_modules(root):
        module = _import(module_name, root.__name__)
        found.extend(
            (value, module_name) for value in vars(module).values() if isinstance(value, Schedule)
        )
    return _unique(found)


def discover_handlers(package: str | ModuleType) -> list[NamedHandler]:
    """Import every module of ``package`` whose name ends in ``_cron`` and collect the
    module-level handlers (``@define_handler``), in module order then definition order.

    Two distinct handlers with one name raise :class:`ConfigurationError` naming both
    modules."""
    root = _import(package, package) if isinstance(package, str) else package
    seen: dict[str, tuple[NamedHandler, str]] = {}
    for module_name in _cron_modules(root):
        module = _import(module_name, root.__name__)
        for value in vars(module).values():
            if not isinstance(value, NamedHandler):
                continue
            previous = seen.get(value.name)
            if previous is None:
                seen[value.name] = (value, module_name)
            elif previous[0] is not value:
                raise ConfigurationError(
                    f'two handlers are named "{value.name}": one in {previous[1]}, one in '
                    f"{module_name} — a run-time schedule names its handler, so the name "
                    "must be unique; rename one"
                )
    return [handler for handler, _ in seen.values()]


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
