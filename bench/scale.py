"""A hundred thousand schedules (issue 35): boot, idle and a herd of all of them at one
instant — ours beside APScheduler 3 in the same run, as ratios.

    python -m bench.scale [--n 100000] [--runs 1] [--idle-seconds 30] [--postgres-url URL]
                          [--no-peers] [--skip herd]

The workloads are ``bench boot|idle|herd`` (see bench/README.md) at ``N`` schedules: boot
(process start → armed, and its RSS), idle (CPU % of a core over a window with nothing due, RSS
at its end), herd (all ``N`` due at one instant: missed, lag p50/p99, peak RSS). With
``--postgres-url`` the herd also runs on Postgres ×1 and ×3 (``advisoryLock``, ``cluster``).
Targets (issue 35): boot < 5 s; idle < 0.1% of a core; peak RSS ≤ APScheduler 3's; herd 0
missed, SQLite p99 ≤ 0.3× APScheduler 3's, Postgres ×3 ``cluster`` p99 ≤ 2 s and faster than ×1.
"""

from __future__ import annotations

import argparse
import time

from bench import harness


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__)
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=1, help="runs per figure (default 1)")
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    parser.add_argument(
        "--lead", type=float, default=45.0, help="herd: launch → instant, s (boot + room)"
    )
    parser.add_argument(
        "--quiet", type=float, default=30.0, help="herd: no new start for this long ends it, s"
    )
    parser.add_argument("--postgres-url", help="also the herd on Postgres (tables reset!)")
    parser.add_argument("--no-peers", action="store_true", help="ours only")
    parser.add_argument(
        "--cluster-heartbeat-ms",
        type=int,
        help="the cluster replicas' beat (default 2000; settling takes three)",
    )
    parser.add_argument(
        "--only", action="append", default=[], help="only this system key (repeatable)"
    )
    parser.add_argument(
        "--skip", action="append", default=[], choices=["boot", "idle", "herd"], help="repeatable"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    cfg = harness.Config(
        runs=args.runs,
        postgres_url=args.postgres_url,
        peers=not args.no_peers,
        peer_names=("aps3",),  # APScheduler 4 writes each of 100,000 schedules on its own
        cluster_heartbeat_ms=args.cluster_heartbeat_ms,
        only=tuple(args.only),
    )
    started = time.time()
    env = harness.environment(cfg)
    sections: list[harness.Section] = []
    boots: dict[str, float] = {}
    if "boot" not in args.skip:
        boot = harness.run_boot(cfg, n=args.n)
        boots = {k: m for k in boot.runs if (m := boot.median(k, "boot_s")) is not None}
        sections.append(boot)
    if "idle" not in args.skip:
        sections.append(harness.run_idle(cfg, n=args.n, seconds=args.idle_seconds))
    if "herd" not in args.skip:
        # the lead covers a boot of N on a busy box: a herd armed after its instant is retried
        # once only, and 100,000 handlers due before the worker is armed measure nothing
        herd = harness.run_herd(cfg, n=args.n, boots=boots, lead=args.lead, quiet_s=args.quiet)
        sections.append(herd)
    env["wall time"] = f"{(time.time() - started) / 60:.1f} min"
    env["worker logs"] = str(cfg.logs)
    print(harness.render(sections, cfg.systems(replicas="herd" not in args.skip), env))


if __name__ == "__main__":
    main()
