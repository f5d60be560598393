"""Steady load, kept as its own entry point: ``python -m bench.steady --n 1000 --seconds 20``
is ``python -m bench steady --n 1000 --seconds 20`` (ours and the peers, side by side)."""

from __future__ import annotations

import sys

from bench.__main__ import main

if __name__ == "__main__":
    main(["steady", *sys.argv[1:]])
