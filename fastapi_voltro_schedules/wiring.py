"""Which :class:`Scheduling` an app runs when it only includes ``schedules_router``.

The design card's one-liner: ``schedules_router`` carries a lifespan, which FastAPI's
``include_router`` merges into the app's own (inside it: the app's lifespan enters first). When
the app's lifespan already started a ``Scheduling`` (``lifespan=scheduling.lifespan``, or
``async with scheduling.run(app)``), the router's does nothing. Otherwise it starts the
process's module-level ``Scheduling`` — found here, never guessed:

1. every ``Scheduling`` registers itself when constructed, with the module that constructed it;
   it counts as *module-level* while that module holds it under a global name;
2. a module-level ``Scheduling`` in the module that holds the app (``main.py`` with both
   ``scheduling = …`` and ``app = FastAPI()``) wins;
3. else the only module-level ``Scheduling`` of the process;
4. two or more (in the app's module, or in the process when the app's module has none) are a
   boot error naming each, with the line that wires one.

No module-level ``Scheduling`` at all leaves the routes answering ``503
scheduler_not_running`` with the remedy, and logs a warning at boot.
"""

from __future__ import annotations

import sys
import weakref
from typing import TYPE_CHECKING, Any

from .errors import ConfigurationError

if TYPE_CHECKING:
    from .scheduling import Scheduling

__all__ = ["module_level", "register", "scheduling_for"]

_PACKAGE = __name__.rpartition(".")[0]
_registry: weakref.WeakKeyDictionary[Scheduling, tuple[str, str, int]] = weakref.WeakKeyDictionary()


def register(scheduling: Scheduling) -> None:
    """Remember where ``scheduling`` was constructed: the first frame outside this package
    (``Scheduling.from_package`` is ours; its caller is the user's module)."""
    frame = sys._getframe(1)
    while frame.f_back is not None and str(frame.f_globals.get("__name__", "")).startswith(
        _PACKAGE + "."
    ):
        frame = frame.f_back
    module = str(frame.f_globals.get("__name__", "?"))
    _registry[scheduling] = (module, frame.f_code.co_filename, frame.f_lineno)


def _global_name(module_name: str, obj: object) -> str | None:
    module = sys.modules.get(module_name)
    if module is None:
        return None
    for attr, value in list(vars(module).items()):
        if value is obj:
            return f"{module_name}.{attr}"
    return None


def module_level() -> list[tuple[str, Scheduling]]:
    """Every live ``Scheduling`` held by a global of the module that built it, by name."""
    found = []
    for scheduling, (module, _, _) in list(_registry.items()):
        name = _global_name(module, scheduling)
        if name is not None:
            found.append((name, scheduling))
    return sorted(found, key=lambda item: item[0])


def _modules_holding(obj: object) -> set[str]:
    holders = set()
    for name, module in list(sys.modules.items()):
        namespace = getattr(module, "__dict__", None)
        if isinstance(namespace, dict) and any(v is obj for v in list(namespace.values())):
            holders.add(name)
    return holders


def _describe(name: str, scheduling: Scheduling) -> str:
    _, filename, line = _registry.get(scheduling, ("?", "?", 0))
    return f"{name} ({filename}:{line})"


def scheduling_for(app: Any) -> Scheduling | None:
    """The ``Scheduling`` the router's lifespan should start for ``app``; ``None`` when the
    app's own lifespan already started one (or there is none to start).

    Raises :class:`ConfigurationError` when several could be meant.
    """
    current = getattr(getattr(app, "state", None), "scheduling", None)
    if current is not None and getattr(current, "active", False):
        return None  # the app's lifespan wired it: nothing starts twice
    candidates = module_level()
    if not candidates:
        return None
    app_modules = _modules_holding(app)
    local = [(n, s) for n, s in candidates if n.rpartition(".")[0] in app_modules]
    pool = local or candidates
    if len(pool) == 1:
        return pool[0][1]
    where = "the app's module" if local else "this process"
    names = ", ".join(_describe(n, s) for n, s in pool)
    first = pool[0][0].rpartition(".")[2]
    raise ConfigurationError(
        f"schedules_router cannot tell which Scheduling this app runs: {where} holds "
        f"{len(pool)} of them and the app's lifespan started none — {names}. Wire the one "
        f"you mean: `app = FastAPI(lifespan={first}.lifespan)`, or `async with "
        f"{first}.run(app):` inside your own lifespan"
    )
