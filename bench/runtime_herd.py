"""Run-time schedules at scale (issue 31): ``N`` schedules written through the HTTP API, then a
herd of them due at one instant — beside the same herd of declared schedules, in one run.

    python -m bench.runtime_herd [--n 10000] [--postgres-url URL] [--runs 1] [--json out.json]
                                 [--concurrency 16] [--lead 120] [--cdc]

Per system (SQLite one replica; with ``--postgres-url`` also Postgres ×3 on ``advisoryLock``):

- **written**: replicas boot with no schedule at all (``bench.ours written_herd``); replica 0
  serves the package's routes and this driver ``PUT``\\ s ``N`` schedules to
  ``/_voltro/inspect/schedules/w{i}`` (``concurrency`` requests in flight), each due once, at
  the herd instant. Figures: **write s** (first PUT sent → last answered, and writes/s), **every
  replica has them s** (last PUT answered → the last replica has all ``N`` armed: one
  heartbeat of following, or a NOTIFY under ``--cdc``), then the herd as ``bench herd`` reads it.
- **declared**: the yardstick (goal: herd p99 within 10%) — the same replicas, app, routes and
  handler, the same ``N`` declared with ``define_schedule`` instead of written
  (``--yardstick served``, the default); ``--yardstick bare`` is ``bench.ours herd`` as ``bench
  herd`` runs it, a process without the app (its heap, hence its full collections, smaller).

The instant is ``lead`` seconds after launch (default 120 s: 10,000 writes and a heartbeat fit
with room); a replica that has not armed all ``N`` by then is reported, not waited for.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from itertools import count
from pathlib import Path
from typing import Any

import anyio
import httpx

from bench import harness
from bench.common import percentile

TOKEN = "bench-operator-token-" + "x" * 16
HEARTBEAT_MS = 2000
_logs = count()


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.runtime_herd", description=__doc__)
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--postgres-url", help="also Postgres ×3 (tables reset!)")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--lead", type=float, default=120.0, help="launch → herd instant, s")
    parser.add_argument("--cdc", action="store_true", help="Postgres: change_strategy=cdc")
    parser.add_argument("--only", choices=["sqlite", "postgres"], help="one store only")
    parser.add_argument(
        "--yardstick",
        choices=["served", "bare"],
        default="served",
        help="the declared herd: the written one's replica with the schedules declared "
        "(served), or bench herd's (bare)",
    )
    parser.add_argument("--json", type=Path)
    return parser.parse_args(argv)


async def write_all(port: int, n: int, at: float, concurrency: int) -> dict[str, Any]:
    """PUT ``n`` schedules due once, at ``at``; their answers' latencies and the span."""
    instant = time.gmtime(at)
    cron = f"{instant.tm_sec} {instant.tm_min} {instant.tm_hour} * * *"
    base = f"http://127.0.0.1:{port}"
    latencies: list[float] = []
    failures: list[str] = []
    names = iter(range(n))
    async with httpx.AsyncClient(
        base_url=base,
        headers={"Authorization": f"Bearer {TOKEN}"},
        timeout=60.0,
        limits=httpx.Limits(max_connections=concurrency),
    ) as client:
        deadline = time.time() + 120
        while True:  # replica 0 answers once its lifespan has booted the scheduler
            try:
                if (await client.get("/_voltro/inspect/schedules")).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.time() > deadline:
                raise RuntimeError(f"replica 0 did not answer on {base} within 120 s")
            await anyio.sleep(0.1)

        async def writer() -> None:
            for i in names:
                body = {"cron": cron, "timezone": "UTC", "handler": "benchHerd", "args": {"i": i}}
                t0 = time.perf_counter()
                answer = await client.put(f"/_voltro/inspect/schedules/w{i}", json=body)
                latencies.append((time.perf_counter() - t0) * 1000)
                if answer.status_code != 201:
                    failures.append(f"w{i}: {answer.status_code} {answer.text[:200]}")

        started = time.time()
        async with anyio.create_task_group() as tg:
            for _ in range(concurrency):
                tg.start_soon(writer)
        ended = time.time()
    return {
        "write_started": started,
        "write_ended": ended,
        "write_s": ended - started,
        "writes_per_s": n / (ended - started),
        "put_p50_ms": percentile(latencies, 0.50),
        "put_p99_ms": percentile(latencies, 0.99),
        "write_failures": len(failures),
        "first_failures": failures[:3],
    }


def launch(
    system: harness.System,
    cfg: harness.Config,
    args: argparse.Namespace,
    lead: float,
    *,
    declared: bool,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Start ``system.replicas`` ``bench.ours written_herd`` replicas due ``lead`` s from now,
    replica 0 serving the routes; write the ``N`` schedules to it unless ``declared`` (then the
    replicas declare them). Returns the writes' figures and each replica's result."""
    with harness.store_url(system, cfg) as url:
        at = float(int(time.time() + lead) + 1)
        port = _free_port()
        procs = []
        for replica in range(system.replicas):
            kind = "declared" if declared else "written"
            log = cfg.logs / f"{system.key}-{kind}-{next(_logs)}-r{replica}.log"
            p: dict[str, Any] = {
                "n": args.n,
                "at": at,
                "url": url,
                "replica_id": f"bench-{replica}",
                "heartbeat_ms": HEARTBEAT_MS,
                "inspect_token": TOKEN,
                "deadline_s": 60.0,
                "quiet_s": 10.0 if system.replicas > 1 else 3.0,
                "graceful": cfg.graceful,
                "declared": declared,
            }
            if replica == 0:
                p["serve_port"] = port
            if args.cdc and system.store == "postgres":
                p["change_strategy"] = "cdc"
            with open(log, "w") as err:
                proc = subprocess.Popen(
                    [system.python, "-m", "bench.ours", "written_herd", json.dumps(p)],
                    cwd=harness.REPO,
                    stdout=subprocess.PIPE,
                    stderr=err,
                    text=True,
                )
            procs.append((proc, log))
        writes: dict[str, Any] = {}
        if not declared:
            try:
                writes = anyio.run(write_all, port, args.n, at, args.concurrency)
            except Exception as exc:  # the workers still exit at their deadline; report why
                writes = {"error": f"writing: {exc!r}"}
        results = [harness._collect(proc, log, lead + 120) for proc, log in procs]
    return writes, results


def run_written(
    system: harness.System, cfg: harness.Config, args: argparse.Namespace
) -> dict[str, Any]:
    writes, results = launch(system, cfg, args, args.lead, declared=False)
    if "error" in writes:
        return writes
    if any("error" in r for r in results):
        return next(r for r in results if "error" in r)
    has_all = [r.get("has_all_at") for r in results]
    merged = results[0] if len(results) == 1 else harness.merge_replicas(results)
    merged = harness._herd_summary(merged)
    reach = (
        max(has_all) - writes["write_ended"]  # type: ignore[type-var]
        if all(h is not None for h in has_all)
        else None
    )
    return (
        merged
        | writes
        | {
            "every_replica_has_them_s": reach,
            "replicas_with_all": sum(h is not None for h in has_all),
        }
    )


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


DECLARED_LEAD_S = 30.0
"""Launch → instant for the served yardstick: a boot of 10,000 declared schedules (three
replicas on a busy box included) with room; one armed later is run again with more."""


def run_declared(
    system: harness.System, cfg: harness.Config, args: argparse.Namespace
) -> dict[str, Any]:
    """The yardstick. ``served`` (the default): the written herd's own replica — same config,
    app, routes served by replica 0, handler — with the ``N`` schedules declared in code, so the
    two differ only in how the schedules came in. ``bare``: ``bench.ours herd`` as ``bench
    herd`` runs it (no app, no routes: a smaller process than the written one)."""
    if args.yardstick == "bare":
        lead_s = harness.DEFAULT_LEAD_S.get(system.key, 6.0) + system.settle_s
        return harness.herd_on_time(system, cfg, args.n, lead_s, attempts=3, timeout_s=120)
    lead = DECLARED_LEAD_S + system.settle_s
    merged: dict[str, Any] = {}
    for _attempt in range(3):
        _, results = launch(system, cfg, args, lead, declared=True)
        if any("error" in r for r in results):
            return next(r for r in results if "error" in r)
        merged = results[0] if len(results) == 1 else harness.merge_replicas(results)
        merged = harness._herd_summary(merged)
        if min(r["armed_before_s"] for r in results) > 0.5:  # every replica armed in time
            break
        lead += DECLARED_LEAD_S
        cfg.progress(f"  armed late, retrying with lead {lead:.0f} s")
    return merged


FIGURES = [
    ("write_s", "write s", "{:.1f}"),
    ("writes_per_s", "writes/s", "{:,.0f}"),
    ("put_p99_ms", "PUT p99 ms", "{:,.0f}"),
    ("every_replica_has_them_s", "every replica has them s", "{:.2f}"),
    ("missed", "missed", "{:,.0f}"),
    ("duplicates", "dupes", "{:,.0f}"),
    ("lag_p50_ms", "herd p50 ms", "{:,.0f}"),
    ("lag_p99_ms", "herd p99 ms", "{:,.0f}"),
    ("last_started_ms", "last started ms", "{:,.0f}"),
]


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    cfg = harness.Config(quick=False, runs=args.runs, postgres_url=args.postgres_url, peers=False)
    systems = []
    if args.only != "postgres":
        systems.append(harness.OURS_SQLITE)
    if args.postgres_url and args.only != "sqlite":
        systems.append(harness.OURS_PG3)
    rows: list[tuple[str, str, dict[str, Any]]] = []
    for system in systems:
        for i in range(args.runs):
            # interleaved: declared then written, each run
            cfg.progress(f"{system.key} run {i + 1}/{args.runs}: declared herd N={args.n:,}")
            rows.append((system.key, "declared", run_declared(system, cfg, args)))
            cfg.progress(f"{system.key} run {i + 1}/{args.runs}: written herd N={args.n:,}")
            rows.append((system.key, "written", run_written(system, cfg, args)))
    print(render(rows, args))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1, default=str))


def render(rows: list[tuple[str, str, dict[str, Any]]], args: argparse.Namespace) -> str:
    head = ["system", "schedules", *[title for _, title, _ in FIGURES]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key, kind, result in rows:
        if "error" in result:
            lines.append(f"| {key} | {kind} | error: {result['error']} |")
            continue
        cells = []
        for metric, _, fmt in FIGURES:
            value = result.get(metric)
            cells.append("—" if value is None else fmt.format(value))
        lines.append(f"| {key} | {kind} | " + " | ".join(cells) + " |")
    # the goal: the written herd's p99 within 10% of the declared one's, per system
    for key in dict.fromkeys(k for k, _, _ in rows):
        declared = [
            r["lag_p99_ms"]
            for k, kind, r in rows
            if k == key and kind == "declared" and "error" not in r
        ]
        written = [
            r["lag_p99_ms"]
            for k, kind, r in rows
            if k == key and kind == "written" and "error" not in r
        ]
        if declared and written:
            lines.append(
                f"\n{key}: written/declared herd p99 = "
                + ", ".join(f"{w / d:.2f}×" for w, d in zip(written, declared, strict=False))
            )
    lines.append(
        f"\nN={args.n:,}, {args.concurrency} PUTs in flight, heartbeat {HEARTBEAT_MS} ms"
        + (", cdc" if args.cdc else "")
    )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
