"""One firer per SQLite file: OS file locks beside the database.

SQLite has no advisory locks and its coordination is ``single`` (no claims), so several
processes on one ledger — ``uvicorn --workers 3`` on ``./voltro.db`` — would each arm the timer
and fire every slot once per process. Instead, the process that arms the timer holds an
exclusive ``flock`` on a sidecar file, ``<database>.voltro-firer.lock``. The others serve the
routes (trigger, Run now, inspect: their runs execute in the process that admitted them) and
try the lock every :data:`FOLLOW_POLL_SECONDS`; the kernel drops a lock when its holder's file
descriptor closes, so a firer that exits — SIGKILL and OOM included — hands over within about
a poll.

The same kind of lock, ``<database>.voltro-migrate.lock`` held blocking, serialises the
migrate-at-boot of processes booting at once on a fresh file (otherwise two of them race the
``CREATE TABLE``s and one fails with ``database is locked``).

Limits (``docs/coordination.md``): the processes must share one kernel — one machine, or
containers on one host sharing the file's directory. ``flock`` over a network filesystem
(NFS, SMB, most cloud volumes) is not reliable and is not supported; use Postgres or MariaDB
for replicas on several machines. An in-memory SQLite ledger lives in one process and needs no
lock. Platforms without ``fcntl`` (Windows) get no lock and a boot warning.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import anyio
from anyio.abc import TaskGroup
from sqlalchemy.engine import URL

from .logs import logger

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "FIRER_LOCK_SUFFIX",
    "FOLLOW_POLL_SECONDS",
    "MIGRATE_LOCK_SUFFIX",
    "FirerLock",
    "Leadership",
    "file_lock",
    "sqlite_file",
]

FIRER_LOCK_SUFFIX = ".voltro-firer.lock"
MIGRATE_LOCK_SUFFIX = ".voltro-migrate.lock"
FOLLOW_POLL_SECONDS = 0.5
"""How often a process that does not fire tries to take over (real time, not the injected
clock: the lock is an OS fact, and a ManualClock must not stall a takeover)."""


def sqlite_file(url: URL) -> Path | None:
    """The database file of a SQLite URL, absolute; ``None`` for memory and other backends."""
    if url.get_backend_name() != "sqlite":
        return None
    database = url.database or ""
    if database.startswith("file:"):
        if "mode=memory" in database:
            return None
        database = database[len("file:") :].partition("?")[0]
    if database in ("", ":memory:"):
        return None
    return Path(database).expanduser().absolute()


class FirerLock:
    """The non-blocking lock that elects this process the firer of one SQLite file."""

    def __init__(self, database: Path) -> None:
        self.path = database.with_name(database.name + FIRER_LOCK_SUFFIX)
        self._fd: int | None = None
        self.held = False

    def try_acquire(self) -> bool:
        """Take the lock if free; ``True`` while this process holds it. Never blocks."""
        if self.held:
            return True
        if fcntl is None:  # pragma: no cover - Windows
            logger.warning(
                "scheduler: no file locks on this platform — every process on %s fires; run "
                "one process per SQLite file",
                self.path,
            )
            self.held = True
            return True
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        self.held = True
        # Who fires, for the followers' log line and for an operator with `cat`.
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, f"{os.getpid()}\n".encode(), 0)
        return True

    def holder(self) -> str:
        """The pid the lock file names (the current firer, or the last one)."""
        try:
            return self.path.read_text().strip() or "?"
        except OSError:
            return "?"

    def release(self) -> None:
        """Give the lock up (closing the descriptor is what releases it)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self.held = False


@contextlib.asynccontextmanager
async def file_lock(database: Path, suffix: str = MIGRATE_LOCK_SUFFIX) -> AsyncIterator[None]:
    """Hold an exclusive lock beside ``database`` for the block, waiting for it in a worker
    thread (the event loop keeps serving while another process migrates)."""
    if fcntl is None:  # pragma: no cover - Windows
        yield
        return
    database.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(database.with_name(database.name + suffix), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        await anyio.to_thread.run_sync(fcntl.flock, fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


class Leadership:
    """Arms the timer in the process holding the :class:`FirerLock`; elsewhere serves and
    polls to take over. ``lock=None`` (memory, server databases: claims coordinate there)
    arms at once.

    ``arm(tg)`` starts the timer and watchers in ``tg`` and returns once they are armed;
    ``serve(tg)`` lets admitted runs (Run now, trigger route) execute in ``tg`` meanwhile.
    """

    def __init__(
        self,
        lock: FirerLock | None,
        arm: Callable[[TaskGroup], Awaitable[None]],
        serve: Callable[[TaskGroup], None],
    ) -> None:
        self.lock = lock
        self._arm = arm
        self._serve = serve
        self.armed = False
        self._follow_scope = anyio.CancelScope()
        self._followed = anyio.Event()
        self._following = False

    async def start(self, tg: TaskGroup) -> None:
        if self.lock is None or self.lock.try_acquire():
            await self._arm(tg)
            self.armed = True
            return
        self._serve(tg)
        self._following = True
        logger.info(
            "scheduler: not firing here — pid %s holds %s and fires the schedules; this "
            "process serves the routes and takes over if that one stops",
            self.lock.holder(),
            self.lock.path,
        )
        tg.start_soon(self._follow, tg)

    async def _follow(self, tg: TaskGroup) -> None:
        assert self.lock is not None
        try:
            with self._follow_scope:
                # Polling is the point: the kernel frees the lock, nothing can signal us.
                while not self.lock.try_acquire():  # noqa: ASYNC110
                    await anyio.sleep(FOLLOW_POLL_SECONDS)
                logger.info(
                    "scheduler: taking over firing  lock=%s pid=%d", self.lock.path, os.getpid()
                )
                # Once the lock is ours the arming runs to the end: a half-armed timer on
                # shutdown would leave engine.stop() waiting for a supervisor never started.
                with anyio.CancelScope(shield=True):
                    await self._arm(tg)
                    self.armed = True
        finally:
            self._followed.set()

    async def stop(self) -> bool:
        """Stop polling; ``True`` when this process armed the timer (then stop the engine)."""
        if self._following:
            self._follow_scope.cancel()
            await self._followed.wait()
        return self.armed

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()
