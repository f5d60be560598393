"""Dev-mode tokens: the trigger and inspect tokens ``voltro dev`` mints once per project.

``voltro dev`` keeps them in ``<project>/.voltro/dev-tokens.json`` (mode 0600, in a 0700
directory holding a ``.gitignore`` of ``*``, so the file is git-ignored wherever the project's
own ``.gitignore`` stands) and reuses them on every later run, so a curl command or a browser
tab keeps working across restarts. Delete the file to mint new ones.

``voltro serve`` / ``voltro start`` never call into this module: in production the absence of a
token is not consent, and the routes answer 503 until an operator sets one.

The server process learns it is in dev mode from ``VOLTRO_DEV=1`` (:func:`is_dev_mode`).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import stat
import tempfile
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path

from .tokens import INSPECT_TOKEN_ENV, MIN_TOKEN_LENGTH, TRIGGER_TOKEN_ENV

__all__ = [
    "DEV_ENV",
    "INSPECT_TOKEN_ENV",
    "TOKENS_DIR",
    "TOKENS_FILE",
    "TRIGGER_TOKEN_ENV",
    "DevTokens",
    "apply_to_environ",
    "is_dev_mode",
    "load_or_mint",
    "mint_token",
    "tokens_path",
    "user_set",
]

DEV_ENV = "VOLTRO_DEV"

TOKENS_DIR = ".voltro"
TOKENS_FILE = "dev-tokens.json"
_GITIGNORE = "*\n"
_FILE_MODE = 0o600
_DIR_MODE = 0o700
# Keys in the JSON file: the SchedulingConfig field each token feeds.
_TRIGGER_KEY = "schedule_trigger_token"
_INSPECT_KEY = "inspect_token"


@dataclass(frozen=True, slots=True)
class DevTokens:
    """The project's dev tokens. ``repr`` hides the values: only the CLI's banner prints them."""

    trigger: str
    inspect: str
    path: Path
    minted: bool  # True when this call created the file, False when it reused it

    def __repr__(self) -> str:
        return f"DevTokens(path={str(self.path)!r}, minted={self.minted}, trigger=***, inspect=***)"


def mint_token() -> str:
    """A fresh bearer token: 32 random bytes, URL-safe base64 (43 characters)."""
    return secrets.token_urlsafe(32)


def tokens_path(project_dir: str | os.PathLike[str] = ".") -> Path:
    """``<project_dir>/.voltro/dev-tokens.json``, absolute."""
    return Path(project_dir).resolve() / TOKENS_DIR / TOKENS_FILE


def is_dev_mode(environ: Mapping[str, str] | None = None) -> bool:
    """True under ``voltro dev`` (it sets ``VOLTRO_DEV=1`` for the server process)."""
    value = (os.environ if environ is None else environ).get(DEV_ENV, "")
    return value.strip().lower() in ("1", "true", "yes", "on")


def user_set(name: str, environ: Mapping[str, str] | None = None) -> bool:
    """Whether the environment already holds a non-empty value for ``name``.

    An empty value counts as unset: an empty bearer token would be no credential at all.
    """
    return bool((os.environ if environ is None else environ).get(name, "").strip())


def load_or_mint(project_dir: str | os.PathLike[str] = ".") -> DevTokens:
    """Read the project's dev tokens, minting and storing them on first use.

    A file that is unreadable as our JSON (hand-edited, truncated) is replaced by a fresh one.
    A file whose mode is wider than 0600 is narrowed back to 0600.
    """
    path = tokens_path(project_dir)
    _ensure_dir(path.parent)
    existing = _read(path)
    if existing is not None:
        _narrow_mode(path)
        return DevTokens(existing[0], existing[1], path, minted=False)
    trigger, inspect = mint_token(), mint_token()
    while inspect == trigger:  # pragma: no cover - 256 random bits
        inspect = mint_token()
    if _publish(path, trigger, inspect, replace=path.exists()):
        return DevTokens(trigger, inspect, path, minted=True)
    # Another `voltro dev` in the same project published first: use its tokens.
    raced = _read(path)
    if raced is None:  # pragma: no cover - the other writer's file is complete by construction
        _publish(path, trigger, inspect, replace=True)
        return DevTokens(trigger, inspect, path, minted=True)
    return DevTokens(raced[0], raced[1], path, minted=False)


def apply_to_environ(
    tokens: DevTokens, environ: MutableMapping[str, str] | None = None
) -> dict[str, bool]:
    """Export the tokens where the user has not set them; returns ``{env name: exported}``.

    A user-set value always wins and is left untouched.
    """
    env = os.environ if environ is None else environ
    exported: dict[str, bool] = {}
    for name, value in ((TRIGGER_TOKEN_ENV, tokens.trigger), (INSPECT_TOKEN_ENV, tokens.inspect)):
        if user_set(name, env):
            exported[name] = False
        else:
            env[name] = value
            exported[name] = True
    return exported


def _ensure_dir(directory: Path) -> None:
    directory.mkdir(mode=_DIR_MODE, parents=True, exist_ok=True)
    gitignore = directory / ".gitignore"
    try:
        current = gitignore.read_text()
    except FileNotFoundError:
        current = None
    if current is None or "*" not in current.split():
        gitignore.write_text(_GITIGNORE)


def _read(path: Path) -> tuple[str, str] | None:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    trigger, inspect = data.get(_TRIGGER_KEY), data.get(_INSPECT_KEY)
    if not (isinstance(trigger, str) and isinstance(inspect, str)):
        return None
    # A hand-edited file whose tokens the boot check would refuse (too short, padded, equal)
    # is replaced by fresh ones rather than handed to a server that cannot start.
    for token in (trigger, inspect):
        if token != token.strip() or len(token) < MIN_TOKEN_LENGTH:
            return None
    if trigger == inspect:
        return None
    return trigger, inspect


def _narrow_mode(path: Path) -> None:
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & ~_FILE_MODE:
        path.chmod(_FILE_MODE)


def _publish(path: Path, trigger: str, inspect: str, *, replace: bool) -> bool:
    """Write the file atomically at mode 0600; False if another writer created it first."""
    body = json.dumps({_TRIGGER_KEY: trigger, _INSPECT_KEY: inspect}, indent=2) + "\n"
    fd, tmp_name = tempfile.mkstemp(prefix=".dev-tokens.", suffix=".tmp", dir=path.parent)
    tmp = Path(tmp_name)
    try:
        os.fchmod(fd, _FILE_MODE)  # mkstemp already uses 0600; say so explicitly
        with os.fdopen(fd, "w") as handle:
            handle.write(body)
            handle.flush()
            os.fsync(handle.fileno())
        if replace:
            os.replace(tmp, path)
            return True
        try:
            os.link(tmp, path)  # atomic "create if absent", with the content already in place
        except FileExistsError:
            return False
        except OSError:  # pragma: no cover - a filesystem without hard links
            os.replace(tmp, path)
        return True
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
