"""Runs the workers, repeats them, and turns their JSON into figures.

Every run is a fresh process (ours too), so CPU and RSS are measured the same way for every
system: by the worker, on itself, with ``getrusage``. A figure is the median of the runs, shown
with min and max; a ratio is ours ÷ peer of the medians from the same invocation.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bench.common import RESULT_PREFIX, percentile

ROOT = Path(__file__).resolve().parent
REPO = ROOT.parent
VENVS = ROOT / ".venvs"
PEER_REQUIREMENTS: dict[str, list[str]] = {
    "aps3": ["apscheduler>=3.11,<4"],
    "aps4": ["--pre", "apscheduler>=4.0.0a1", "sqlalchemy[asyncio]", "aiosqlite", "sniffio"],
}


# -- systems ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class System:
    key: str
    label: str
    module: str
    peer: str | None = None
    """Name of the bench venv (``aps3``/``aps4``); None = the main venv."""
    store: str = "sqlite"
    """``sqlite`` (a fresh file per run), ``postgres`` or ``memory`` (no URL)."""
    replicas: int = 1
    coordination: str | None = None
    """Ours only: ``VOLTRO_COORDINATION`` for the worker (unset: derived from the store)."""
    settle_s: float = 0.0
    """Ours only: more lead before a herd instant — ``cluster`` settles who owns what over
    its first beats (each replica takes its share at the beat after it sees the others), and a
    herd measured before that is one replica's herd, not three."""
    heartbeat_ms: int = 2000
    """Ours only, under ``cluster``: ``schedule_heartbeat_ms`` (a beat, and half a lease)."""
    gc_freeze: bool = False
    """Ours only: the worker calls ``gc.freeze()`` once armed, as an app may in its lifespan
    (not a default of the package: it changes the whole process's collector)."""

    @property
    def python(self) -> str:
        if self.peer is None:
            return sys.executable
        return str(VENVS / self.peer / "bin" / "python")


OURS_SQLITE = System("ours-sqlite", "ours, SQLite ledger", "bench.ours")
OURS_PG = System("ours-pg", "ours, Postgres ledger", "bench.ours", store="postgres")
OURS_PG3 = System(
    "ours-pg×3", "ours, Postgres ×3 replicas", "bench.ours", store="postgres", replicas=3
)
OURS_PG3_CLUSTER = System(
    "ours-pg×3-cluster",
    "ours, Postgres ×3 replicas, coordination=cluster (heartbeat 2 s)",
    "bench.ours",
    store="postgres",
    replicas=3,
    coordination="cluster",
    settle_s=6.0,  # three 2 s beats: every replica has seen the others and taken its share
)


def cluster_beating(heartbeat_ms: int) -> System:
    """:data:`OURS_PG3_CLUSTER` beating every ``heartbeat_ms``, settled over three beats."""
    return replace(
        OURS_PG3_CLUSTER,
        label="ours, Postgres ×3 replicas, coordination=cluster "
        f"(heartbeat {heartbeat_ms / 1000:g} s)",
        heartbeat_ms=heartbeat_ms,
        settle_s=3 * heartbeat_ms / 1000,
    )


OURS_SQLITE_FROZEN = System(
    "ours-sqlite-frozen", "ours, SQLite ledger, app calls gc.freeze()", "bench.ours", gc_freeze=True
)
APS3 = System("aps3", "APScheduler 3, memory store", "bench.aps3", "aps3", store="memory")
APS4 = System("aps4", "APScheduler 4, SQLite store", "bench.aps4", "aps4")


def ensure_peer_venv(name: str, log: Callable[[str], None] = print) -> None:
    """Create ``bench/.venvs/<name>`` with its APScheduler on first use."""
    python = VENVS / name / "bin" / "python"
    if python.exists():
        return
    log(f"creating {python.parent.parent} (one-off) …")
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", str(VENVS / name)], check=True)
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", *PEER_REQUIREMENTS[name]], check=True
    )


# -- running workers ---------------------------------------------------------------------------


@dataclass
class Config:
    quick: bool = False
    runs: int = 3
    postgres_url: str | None = None
    peers: bool = True
    peer_names: tuple[str, ...] = ("aps3", "aps4")
    """Which peers run when ``peers`` is on (``bench.scale`` runs APScheduler 3 only)."""
    cluster_heartbeat_ms: int | None = None
    """The ``cluster`` replicas' beat (default: :data:`OURS_PG3_CLUSTER`'s 2 s)."""
    only: tuple[str, ...] = ()
    """Run only the systems with these keys (empty: all)."""
    graceful: bool = False
    """Shut the scheduler down properly after measuring (smoke mode); else the worker exits
    hard once its figures are out, so a backlog's shutdown does not eat the time budget."""
    logs: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="voltro-bench-")))
    progress: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True)

    def systems(self, *, replicas: bool = False) -> list[System]:
        found = [OURS_SQLITE]
        if self.postgres_url:
            # the herd sets ×3 beside ×1: scaling out must be faster, not only correct
            cluster = OURS_PG3_CLUSTER
            if self.cluster_heartbeat_ms is not None:
                cluster = cluster_beating(self.cluster_heartbeat_ms)
            found.extend([OURS_PG, OURS_PG3, cluster] if replicas else [OURS_PG])
        if self.peers:
            found += [peer for peer in (APS3, APS4) if peer.peer in self.peer_names]
        if self.only:
            found = [s for s in found if s.key in self.only]
        return found


_counter = iter(range(1_000_000))


@contextmanager
def store_url(system: System, cfg: Config) -> Iterator[str | None]:
    """A fresh ledger for one run: a new SQLite file, or Postgres emptied."""
    if system.store == "memory":
        yield None
        return
    if system.store == "postgres":
        assert cfg.postgres_url is not None
        reset_postgres(cfg.postgres_url)
        yield cfg.postgres_url
        return
    folder = Path(tempfile.mkdtemp(prefix="voltro-bench-db-"))
    try:
        yield f"sqlite+aiosqlite:///{folder / 'ledger.db'}"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


_migrated: set[str] = set()


def reset_postgres(url: str) -> None:
    """First use in this invocation: drop our tables and migrate to head. Every run: DELETE."""
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    from fastapi_voltro_schedules.migrations import VOLTRO_TABLES, upgrade_to_head
    from fastapi_voltro_schedules.models import ALEMBIC_VERSION_TABLE

    # every table of ours (definition versions too: versions left from the last case, with
    # their runs deleted, would owe a catch-up of every slot since): one left behind also makes
    # the fresh migration's CREATE fail
    ours = tuple(sorted(VOLTRO_TABLES))

    async def reset() -> None:
        engine = create_async_engine(url)
        try:
            async with engine.begin() as conn:
                if url not in _migrated:
                    for table in (*ours, ALEMBIC_VERSION_TABLE):
                        await conn.execute(text(f"DROP TABLE IF EXISTS {table}"))
            if url not in _migrated:
                await upgrade_to_head(engine)
                _migrated.add(url)
            if engine.dialect.name == "postgresql":
                # A worker that exited hard (os._exit) may leave its last statement running on
                # the server until it notices the socket is gone: a DELETE beside it deadlocks.
                for _ in range(300):
                    async with engine.connect() as conn:
                        others = await conn.scalar(
                            text(
                                "SELECT count(*) FROM pg_stat_activity WHERE datname = "
                                "current_database() AND pid <> pg_backend_pid()"
                            )
                        )
                    if not others:
                        break
                    await asyncio.sleep(0.1)
            async with engine.begin() as conn:
                for table in ours:
                    await conn.execute(text(f"DELETE FROM {table}"))
        finally:
            await engine.dispose()

    asyncio.run(reset())


def run_worker(
    system: System,
    workload: str,
    params: dict[str, Any],
    cfg: Config,
    *,
    timeout: float,
) -> dict[str, Any]:
    """One run of one workload; replicas run side by side and their figures are merged."""
    if system.peer:
        ensure_peer_venv(system.peer, cfg.progress)
    with store_url(system, cfg) as url:
        procs = []
        for replica in range(system.replicas):
            log = cfg.logs / f"{system.key}-{workload}-{next(_counter)}-r{replica}.log"
            p = {**params, "url": url, "launch": time.time(), "graceful": cfg.graceful}
            if system.gc_freeze:
                p["gc_freeze"] = True
            if system.coordination:
                p["coordination"] = system.coordination
                p["heartbeat_ms"] = system.heartbeat_ms
            with open(log, "w") as err:
                proc = subprocess.Popen(
                    [system.python, "-m", system.module, workload, json.dumps(p)],
                    cwd=REPO,
                    stdout=subprocess.PIPE,
                    stderr=err,
                    text=True,
                )
            procs.append((proc, log))
        results = [_collect(proc, log, timeout) for proc, log in procs]
        if system.replicas > 1 and url and all("error" not in r for r in results):
            results[0]["ledger_after_all"] = ledger_snapshot(url)
    if any("error" in r for r in results):
        return next(r for r in results if "error" in r)
    return results[0] if len(results) == 1 else merge_replicas(results)


def _collect(proc: subprocess.Popen[str], log: Path, timeout: float) -> dict[str, Any]:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return {"error": f"timed out after {timeout:.0f} s (log: {log})"}
    for line in out.splitlines():
        if line.startswith(RESULT_PREFIX):
            return dict(json.loads(line[len(RESULT_PREFIX) :]))
    tail = log.read_text(errors="replace").strip().splitlines()[-3:]
    return {"error": f"exit {proc.returncode}: {' | '.join(tail)} (log: {log})"}


def merge_replicas(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Herd across replicas: a schedule started on two replicas is a duplicate."""
    keys = Counter(k for r in results for k in r["keys"])
    n = results[0]["n"]
    return {
        "n": n,
        "started": len(keys),
        "missed": n - len(keys),
        "duplicates": sum(c - 1 for c in keys.values()),
        "lags_ms": [lag for r in results for lag in r["lags_ms"]],
        "keys": list(keys),
        "armed_before_s": min(r["armed_before_s"] for r in results),
        "peak_rss_mb": max(r["peak_rss_mb"] for r in results),
        "per_replica_started": [len(r["keys"]) for r in results],
        "claim_round_trips": sum(r.get("claim_round_trips", 0) for r in results),
        "fence_round_trips": sum(r.get("fence_round_trips", 0) for r in results),
        "ledger_duplicates": max(r.get("ledger_duplicates", 0) for r in results),
        "ledger": results[0].get("ledger_after_all", {}),
    }


def ledger_snapshot(url: str) -> dict[str, int]:
    """Rows per status, and claims, once every replica has exited."""
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    from fastapi_voltro_schedules.models import CLAIMS_TABLE, RUNS_TABLE

    async def read() -> dict[str, int]:
        engine = create_async_engine(url)
        try:
            async with engine.connect() as conn:
                rows = await conn.execute(
                    text(f"SELECT status, count(*) FROM {RUNS_TABLE} GROUP BY status")
                )
                found = {str(k): int(v) for k, v in rows.all()}
                claims = await conn.execute(text(f"SELECT count(*) FROM {CLAIMS_TABLE}"))
                found["claims"] = int(claims.scalar() or 0)
                return found
        finally:
            await engine.dispose()

    return asyncio.run(read())


# -- figures -----------------------------------------------------------------------------------


@dataclass
class Metric:
    key: str
    title: str
    fmt: str = "{:,.0f}"
    better: str = "lower"


@dataclass
class Section:
    title: str
    metrics: list[Metric]
    runs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    single: bool = False
    target: str | None = None
    status: str | None = None
    """``not yet built`` placeholders carry no runs."""

    def values(self, system: str, metric: str) -> list[float]:
        return [
            float(r[metric])
            for r in self.runs.get(system, [])
            if "error" not in r and r.get(metric) is not None
        ]

    def median(self, system: str, metric: str) -> float | None:
        values = self.values(system, metric)
        return statistics.median(values) if values else None


def _herd_summary(result: dict[str, Any]) -> dict[str, Any]:
    if "error" in result:
        return result
    lags = result.pop("lags_ms")
    result.pop("keys", None)
    return result | {
        "lag_p50_ms": percentile(lags, 0.50),
        "lag_p99_ms": percentile(lags, 0.99),
        "last_started_ms": max(lags) if lags else None,
    }


STEADY_METRICS = [
    Metric("achieved_ratio", "achieved", "{:.1%}", "higher"),
    Metric("lag_p50_ms", "lag p50 ms"),
    Metric("lag_p99_ms", "lag p99 ms"),
    Metric("lag_max_ms", "lag max ms"),
    Metric("cpu_s_per_1000", "CPU-s/1k firings", "{:.2f}"),
    Metric("peak_rss_mb", "peak RSS MB"),
]
HERD_METRICS = [
    Metric("missed", "missed"),
    Metric("duplicates", "dupes"),
    Metric("lag_p50_ms", "lag p50 ms"),
    Metric("lag_p99_ms", "lag p99 ms"),
    Metric("last_started_ms", "last started ms"),
    Metric("claim_round_trips", "claim round trips"),
    Metric("fence_round_trips", "fence round trips"),
    Metric("peak_rss_mb", "peak RSS MB"),
]
IDLE_METRICS = [
    Metric("cpu_pct", "CPU % of a core", "{:.2f}"),
    Metric("rss_mb", "RSS MB"),
    Metric("window_s", "window s", "{:.1f}", "-"),
]
BOOT_METRICS = [
    Metric("boot_s", "start→armed s", "{:.2f}"),
    Metric("interpreter_and_imports_s", "interp+imports s", "{:.2f}"),
    Metric("define_s", "define s", "{:.2f}"),
    Metric("arm_s", "arm s", "{:.2f}"),
    Metric("rss_mb", "RSS MB"),
]


def steady_sizes(cfg: Config) -> list[int]:
    return [100, 1_000, 10_000]


def run_steady(
    cfg: Config, sizes: list[int] | None = None, seconds: float | None = None
) -> list[Section]:
    window = seconds if seconds is not None else (8.0 if cfg.quick else 20.0)
    sections = []
    for n in sizes or steady_sizes(cfg):
        single = n >= 10_000 and not cfg.graceful
        runs = 1 if single or cfg.quick else cfg.runs
        target = {
            1_000: "ours SQLite: 100% achieved, p99 ≤ 100 ms, ≤ 0.5 CPU-s/1k",
            10_000: "ours: 100% achieved, p99 ≤ 1,000 ms",
        }.get(n)
        section = Section(
            f"steady  N={n:,}  every second  window {window:.0f} s",
            STEADY_METRICS,
            single=runs == 1,
            target=target,
        )
        systems = cfg.systems()
        if n == 1_000 and not cfg.graceful:
            # The same engine with CPython's full collections kept off the startup heap: shows
            # how much of the p99 is the collector (see bench/README.md), beside the default.
            systems.insert(1, OURS_SQLITE_FROZEN)
        for system in systems:
            for i in range(runs):
                cfg.progress(f"steady N={n:,} {system.key} run {i + 1}/{runs}")
                boot_allowance = 240 if system.key == "aps4" else 60
                section.runs.setdefault(system.key, []).append(
                    run_worker(
                        system,
                        "steady",
                        {"n": n, "seconds": window},
                        cfg,
                        timeout=window + boot_allowance + (n / 100 if cfg.graceful else 10),
                    )
                )
        sections.append(section)
    return sections


DEFAULT_LEAD_S = {"aps4": 45.0}
"""Seconds between launching a herd worker and the herd instant: its boot plus ~3 s."""


def herd_on_time(
    system: System,
    cfg: Config,
    n: int,
    lead_s: float,
    *,
    attempts: int,
    timeout_s: float,
    quiet_s: float | None = None,
) -> dict[str, Any]:
    """``bench.ours herd`` of ``n`` due ``lead_s`` after launch, summarised; a run whose
    replicas armed too late for the instant (under 0.5 s before it) is run again with the
    boot it took plus 3 s, up to ``attempts`` runs in all. ``quiet_s``: how long without a new
    handler start ends the wait (default 3 s, 10 s with replicas; a herd of 100,000 is admitted
    for seconds before its first handler starts)."""
    if quiet_s is None:
        quiet_s = 10.0 if system.replicas > 1 else 3.0
    result: dict[str, Any] = {}
    for _attempt in range(attempts):
        at = float(int(time.time() + lead_s) + 1)
        result = run_worker(
            system,
            "herd",
            # replicas: one may sit out a stretch while another holds the claims
            {"n": n, "at": at, "deadline_s": max(60.0, 2 * quiet_s), "quiet_s": quiet_s},
            cfg,
            timeout=lead_s + timeout_s,
        )
        if "error" in result or result["armed_before_s"] > 0.5:
            break
        lead_s += 3.0 - result["armed_before_s"]
        cfg.progress(f"  armed late, retrying with lead {lead_s:.0f} s")
    return _herd_summary(result)


def run_herd(
    cfg: Config,
    n: int = 10_000,
    boots: dict[str, float] | None = None,
    lead: float | None = None,
    quiet_s: float | None = None,
) -> Section:
    runs = 1 if cfg.quick else cfg.runs
    section = Section(
        f"herd  N={n:,} due at one instant (~3 s after arming)",
        HERD_METRICS,
        single=runs == 1,
        target="ours: 0 missed, p99 ≤ 500 ms (SQLite and Postgres ×3)",
    )
    for system in cfg.systems(replicas=True):
        boot = (boots or {}).get(system.key.replace("×3", ""))
        lead_s = lead or ((boot + 3.0) if boot else DEFAULT_LEAD_S.get(system.key, 6.0))
        lead_s += system.settle_s
        for i in range(runs):
            cfg.progress(f"herd N={n:,} {system.key} run {i + 1}/{runs}")
            timeout_s = 90 + 2 * (quiet_s or 0)
            result = herd_on_time(
                system, cfg, n, lead_s, attempts=2, timeout_s=timeout_s, quiet_s=quiet_s
            )
            section.runs.setdefault(system.key, []).append(result)
    section.notes.append(
        "lag = handler start − the instant; 'last started' = when the last one began"
    )
    return section


def run_idle(cfg: Config, n: int = 10_000, seconds: float | None = None) -> Section:
    seconds = seconds or (10.0 if cfg.quick else 30.0)
    section = Section(
        f"idle  N={n:,} minute-cadence  {seconds:.0f} s between firings",
        IDLE_METRICS,
        single=True,
        target="ours: < 0.5% of a core, RSS < 150 MB",
    )
    for system in cfg.systems():
        cfg.progress(f"idle N={n:,} {system.key}")
        guess = DEFAULT_LEAD_S.get(system.key, 3.0)
        section.runs[system.key] = [
            run_worker(
                system,
                "idle",
                {"n": n, "seconds": seconds, "boot_guess_s": guess},
                cfg,
                timeout=seconds + guess + 120,
            )
        ]
    return section


def run_boot(cfg: Config, n: int = 10_000) -> Section:
    runs = 1 if cfg.quick else cfg.runs
    section = Section(
        f"boot  N={n:,}  process start → armed",
        BOOT_METRICS,
        single=runs == 1,
        target="ours: < 2 s",
    )
    for system in cfg.systems():
        for i in range(runs):
            cfg.progress(f"boot N={n:,} {system.key} run {i + 1}/{runs}")
            section.runs.setdefault(system.key, []).append(
                run_worker(system, "boot", {"n": n}, cfg, timeout=600)
            )
    section.notes.append(
        "APScheduler 4 'define' = data store initialised; its 'arm' = one add_schedule "
        "(a write) per schedule, then start"
    )
    return section


# -- the table ---------------------------------------------------------------------------------


def _cell(section: Section, system: str, metric: Metric) -> str:
    values = section.values(system, metric.key)
    if not values:
        errors = [r["error"] for r in section.runs.get(system, []) if "error" in r]
        return "error" if errors else "—"
    med = metric.fmt.format(statistics.median(values))
    if len(values) == 1:
        return med
    return f"{med} ({metric.fmt.format(min(values))}–{metric.fmt.format(max(values))})"


def _ratio(section: Section, ours: str, peer: str, metric: Metric) -> str:
    a, b = section.median(ours, metric.key), section.median(peer, metric.key)
    if a is None or b is None:
        return "—"
    if b == 0:
        return "=" if a == 0 else "∞"
    return f"{a / b:.2f}×"


def render(sections: list[Section], systems: list[System], env: dict[str, str]) -> str:
    lines = ["# voltro bench", ""]
    lines += [f"- {k}: {v}" for k, v in env.items()]
    # the systems run last: a cluster beating otherwise (cluster_beating) keeps its label
    every = [OURS_SQLITE, OURS_SQLITE_FROZEN, OURS_PG3, OURS_PG3_CLUSTER, *systems]
    labels = {s.key: s.label for s in every}  # the herd's replica rows too
    for section in sections:
        lines += ["", f"## {section.title}"]
        if section.status:
            lines.append(f"{section.status}")
            continue
        keys = [k for k in labels if k in section.runs]
        head = ["system", *[m.title for m in section.metrics]]
        rows = [[labels[k], *[_cell(section, k, m) for m in section.metrics]] for k in keys]
        ours_keys = [k for k in keys if k.startswith("ours")]
        peer_keys = [k for k in keys if not k.startswith("ours")]
        for o in ours_keys:
            for p in peer_keys:
                rows.append(
                    [f"ratio {o} ÷ {p}", *[_ratio(section, o, p, m) for m in section.metrics]]
                )
        widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
        fmt = "| " + " | ".join(f"{{:<{w}}}" for w in widths) + " |"
        lines.append(fmt.format(*head))
        lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
        lines += [fmt.format(*r) for r in rows]
        runs = max((len(v) for v in section.runs.values()), default=0)
        lines.append(
            f"runs per figure: {runs}"
            + (" (single run)" if section.single else ", median (min–max)")
        )
        if section.target:
            lines.append(f"target — {section.target}")
        lines += section.notes
        for key in keys:
            errors = [r["error"] for r in section.runs[key] if "error" in r]
            lines += [f"error {key}: {e}" for e in errors]
            extra = _ledger_note(section.runs[key])
            if extra:
                lines.append(f"{key}: {extra}")
    return "\n".join(lines)


def _ledger_note(runs: list[dict[str, Any]]) -> str:
    ledgers = [r["ledger"] for r in runs if "ledger" in r]
    if not ledgers:
        return ""
    merged: Counter[str] = Counter()
    for ledger in ledgers:
        merged.update(ledger)
    parts = ", ".join(f"{k} {v / len(ledgers):,.0f}" for k, v in sorted(merged.items()))
    return f"ledger rows in the window (mean per run): {parts}"


def environment(cfg: Config) -> dict[str, str]:
    from importlib.metadata import version

    env = {
        "when": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, "
        f"load avg {' / '.join(f'{x:.2f}' for x in os.getloadavg())} at start",
        "python": platform.python_version(),
        "ours": f"fastapi-voltro-schedules {version('fastapi-voltro-schedules')}, "
        f"SQLAlchemy {version('sqlalchemy')}, aiosqlite {version('aiosqlite')}, "
        f"SQLite {sqlite3.sqlite_version}",
    }
    if cfg.postgres_url:
        env["ours"] += f", asyncpg {version('asyncpg')}"
        env["postgres"] = _postgres_version(cfg.postgres_url)
    if cfg.peers:
        for peer in ("aps3", "aps4"):
            ensure_peer_venv(peer, cfg.progress)
            out = subprocess.run(
                [str(VENVS / peer / "bin" / "python"), "-c", _VERSIONS_SNIPPET],
                capture_output=True,
                text=True,
                check=False,
            )
            env[peer] = out.stdout.strip() or out.stderr.strip()[-200:]
    return env


_VERSIONS_SNIPPET = """
import importlib.metadata as m
found = []
for p in ('apscheduler', 'sqlalchemy', 'aiosqlite'):
    try:
        found.append(f'{p} {m.version(p)}')
    except m.PackageNotFoundError:
        pass
print(', '.join(found))
"""


def _postgres_version(url: str) -> str:
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    async def ask() -> str:
        engine = create_async_engine(url)
        try:
            async with engine.connect() as conn:
                return str((await conn.execute(text("SHOW server_version"))).scalar())
        finally:
            await engine.dispose()

    try:
        return f"server {asyncio.run(ask())}"
    except Exception as exc:
        return f"unreachable ({type(exc).__name__})"
