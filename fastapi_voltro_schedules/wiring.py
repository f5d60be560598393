"""Which :class:`Scheduling` an app runs when it only includes ``schedules_router``.

The one-liner ``app.include_router(schedules_router)``: the router carries a lifespan, which
FastAPI's ``include_router`` merges into the app's own (inside it: the app's lifespan enters
first). When the app's lifespan already started a ``Scheduling`` (``lifespan=
scheduling.lifespan``, or ``async with scheduling.run(app)``), the router's does nothing.
Otherwise it starts the process's module-level ``Scheduling`` — found here, never guessed:

1. every ``Scheduling`` registers itself when constructed (weakly: registering keeps nothing
   alive); it counts as *module-level* while a module holds it under a global name;
2. a module-level ``Scheduling`` in a module that also holds the app (``main.py`` with both
   ``scheduling = …`` and ``app = FastAPI()``) wins;
3. else the only module-level ``Scheduling`` of the process;
4. two or more (in the app's module, or in the process when the app's module has none) are a
   boot error naming each, with the line that wires one.

No module-level ``Scheduling`` at all leaves the routes answering ``503
scheduler_not_running`` with the remedy, and logs a warning at boot.

Why the module globals are read at all: the router's lifespan is handed the app and nothing
else, and until a lifespan starts one the app holds no reference to any ``Scheduling``; "the
one beside ``app = FastAPI()``" is a fact about module namespaces only. So the router's
lifespan reads them once, at startup, in one pass over ``sys.modules``.

The registry is typed with :class:`Runnable`, what the router's lifespan needs of a
``Scheduling``, so this module sits below the facade and never imports it.
"""

from __future__ import annotations

import sys
import weakref
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Protocol

from .errors import ConfigurationError

if TYPE_CHECKING:
    from fastapi import FastAPI

__all__ = ["Runnable", "module_level", "register", "scheduling_for"]


class Runnable(Protocol):
    """What the router's lifespan needs of a ``Scheduling``: whether it runs, and ``run``."""

    @property
    def active(self) -> bool: ...

    def run(self, app: FastAPI | None = None) -> AbstractAsyncContextManager[object]: ...


_registry: weakref.WeakKeyDictionary[Runnable, None] = weakref.WeakKeyDictionary()


def register(scheduling: Runnable) -> None:
    """Make ``scheduling`` a candidate while it lives (``Scheduling.__init__`` calls this)."""
    _registry[scheduling] = None


def _global_names(targets: dict[int, object]) -> dict[int, list[str]]:
    """``module.attribute`` of every module global holding one of ``targets`` (by ``id``),
    sorted, in one pass over the loaded modules."""
    names: dict[int, list[str]] = {}
    for module_name, module in list(sys.modules.items()):
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        for attribute, value in list(namespace.items()):
            if id(value) in targets and targets[id(value)] is value:
                names.setdefault(id(value), []).append(f"{module_name}.{attribute}")
    return {key: sorted(found) for key, found in names.items()}


def _module_level(app: object = None) -> tuple[list[tuple[str, Runnable]], set[str]]:
    """The module-level schedulings (each once, by its first global name — one in a module
    holding ``app`` when there is one) and the modules holding ``app``."""
    live: dict[int, Runnable] = {id(s): s for s in list(_registry)}
    targets: dict[int, object] = dict(live)
    if app is not None:
        targets[id(app)] = app
    names = _global_names(targets)
    app_modules = {name.rpartition(".")[0] for name in names.pop(id(app), [])}
    found = []
    for key, held_as in names.items():
        local = [name for name in held_as if name.rpartition(".")[0] in app_modules]
        found.append(((local or held_as)[0], live[key]))
    return sorted(found, key=lambda item: item[0]), app_modules


def module_level() -> list[tuple[str, Runnable]]:
    """Every live ``Scheduling`` held by a module global, by name."""
    return _module_level()[0]


def _describe(name: str) -> str:
    module = sys.modules.get(name.rpartition(".")[0])
    return f"{name} ({getattr(module, '__file__', None) or '?'})"


def scheduling_for(app: Any) -> Runnable | None:
    """The ``Scheduling`` the router's lifespan should start for ``app``; ``None`` when the
    app's own lifespan already started one (or there is none to start).

    Raises :class:`ConfigurationError` when several could be meant.
    """
    current = getattr(getattr(app, "state", None), "scheduling", None)
    if current is not None and getattr(current, "active", False):
        return None  # the app's lifespan wired it: nothing starts twice
    candidates, app_modules = _module_level(app)
    if not candidates:
        return None
    local = [(n, s) for n, s in candidates if n.rpartition(".")[0] in app_modules]
    pool = local or candidates
    if len(pool) == 1:
        return pool[0][1]
    where = "the app's module" if local else "this process"
    names = ", ".join(_describe(n) for n, _ in pool)
    first = pool[0][0].rpartition(".")[2]
    raise ConfigurationError(
        f"schedules_router cannot tell which Scheduling this app runs: {where} holds "
        f"{len(pool)} of them and the app's lifespan started none — {names}. Wire the one "
        f"you mean: `app = FastAPI(lifespan={first}.lifespan)`, or `async with "
        f"{first}.run(app):` inside your own lifespan"
    )
