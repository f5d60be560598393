"""``python -m bench all`` — every workload, ours and the peers side by side, one table.

    python -m bench all [--quick] [--postgres-url URL] [--no-peers] [--json out.json]
    python -m bench steady [--n 1000 --n 10000] [--seconds 20]
    python -m bench herd | idle | boot
    python -m bench setup          # create bench/.venvs/aps3 and aps4 only
    python -m bench.queue_handoff --postgres-url URL   # (all runs it with --postgres-url)

See bench/README.md for what each figure means and the targets.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

from bench import harness


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("workload", choices=["all", "steady", "herd", "idle", "boot", "setup"])
    parser.add_argument("--quick", action="store_true", help="short windows, one run each")
    parser.add_argument("--runs", type=int, default=3, help="runs per figure (default 3)")
    parser.add_argument("--postgres-url", help="also run ours on Postgres (tables reset!)")
    parser.add_argument("--no-peers", action="store_true", help="ours only")
    parser.add_argument("--n", type=int, action="append", help="steady: sizes (repeatable)")
    parser.add_argument("--seconds", type=float, help="steady: window length")
    parser.add_argument("--json", type=Path, help="also write every raw result here")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    cfg = harness.Config(
        quick=args.quick,
        runs=args.runs,
        postgres_url=args.postgres_url,
        peers=not args.no_peers,
    )
    if args.workload == "setup":
        for peer in harness.PEER_REQUIREMENTS:
            harness.ensure_peer_venv(peer)
        return
    started = time.time()
    env = harness.environment(cfg)
    sections: list[harness.Section] = []
    boots: dict[str, float] = {}
    if args.workload in ("all", "boot"):
        boot = harness.run_boot(cfg)
        boots = {k: m for k in boot.runs if (m := boot.median(k, "boot_s")) is not None}
    if args.workload in ("all", "steady"):
        sections += harness.run_steady(cfg, args.n, args.seconds)
    if args.workload in ("all", "herd"):
        sections.append(harness.run_herd(cfg, boots=boots))
    if args.workload in ("all", "idle"):
        sections.append(harness.run_idle(cfg))
    if args.workload in ("all", "boot"):
        sections.append(boot)
    env["wall time"] = f"{(time.time() - started) / 60:.1f} min"
    env["worker logs"] = str(cfg.logs)
    print(harness.render(sections, cfg.systems(), env))
    if args.workload == "all":
        # Ours-only workloads with their own drivers (no peer runs these): run them as they
        # are and show what they print.
        extra = ["--postgres-url", args.postgres_url] if args.postgres_url else []
        for title, module, module_args in (
            ("range backfill  1,000 slots", "bench.range_backfill", extra),
            (
                "external trigger req/s and the 200-POST duplicate storm",
                "bench.trigger_rps",
                ["--seconds", "5" if args.quick else "10", *extra],
            ),
        ):
            print(f"\n## {title}\n```")
            done = subprocess.run(
                [sys.executable, "-m", module, *module_args],
                capture_output=True,
                text=True,
                timeout=900,
                check=False,
            )
            print((done.stdout or done.stderr).rstrip())
            print("```")
        if args.postgres_url:
            print("\n## queue handoff across replicas (Postgres): cdc vs poll, 30 handoffs\n```")
            done = subprocess.run(
                [sys.executable, "-m", "bench.queue_handoff", *extra],
                capture_output=True,
                text=True,
                timeout=900,
                check=False,
            )
            lines = [ln for ln in done.stdout.splitlines() if "handoffs=" in ln]
            print("\n".join(lines) or done.stderr.rstrip())
            print("```")
    if args.json:
        args.json.write_text(
            json.dumps({"env": env, "sections": [asdict(s) for s in sections]}, indent=1)
        )


if __name__ == "__main__":
    sys.exit(main())
