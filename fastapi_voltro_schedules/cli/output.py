"""How the operator verbs print a table, for a person or for a pipe.

At a terminal: a rich table that is never narrower than what it holds. Rich fits a table to
the terminal by cutting cells (``brokenExp…``) and folding them over lines; a schedule's name
cut in half is not one you can copy or grep, so the table is measured first and printed at its
natural width — a narrow terminal wraps the long lines itself, the text stays whole.

Through a pipe or into a file: plain lines — a header, then one line per row, columns padded
with two spaces, no title, no box, no colour, no wrapping, no ellipsis — so
``voltro schedule list | grep brokenExport`` finds the whole name at any ``COLUMNS``. A cell's
newlines and tabs become spaces: one row is always one line. Scripts read ``--json`` instead
(see docs/operating.md); these lines are for grep, less and logs.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TextIO

import typer
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

GAP = "  "
"""Between two plain columns: two spaces, as ``kubectl get`` and ``docker ps`` print them."""
_UNBOUNDED = 1_000_000
"""A width no table reaches: what the table would take if nothing constrained it."""


def is_terminal(stream: TextIO | None = None) -> bool:
    """Whether ``stream`` (stdout by default) is a terminal a person reads."""
    stream = sys.stdout if stream is None else stream
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or stand-in stream: not a terminal
        return False


def _cell(value: str) -> str:
    return " ".join(value.split()) if any(c in value for c in "\n\r\t") else value


def plain_lines(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """The header and one line per row, each column padded to its widest cell (the last one
    not padded: no trailing spaces)."""
    table = [[_cell(c) for c in columns], *([_cell(c) for c in row] for row in rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(columns))]
    return [
        GAP.join(cell.ljust(widths[i]) for i, cell in enumerate(line)).rstrip() for line in table
    ]


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """``rows`` under ``columns``: a rich table at a terminal, plain lines otherwise."""
    if not is_terminal():
        for line in plain_lines(columns, rows):
            typer.echo(line)
        return
    table = Table(title=title)
    for column in columns:
        table.add_column(column, overflow="ignore")
    for row in rows:
        table.add_row(*row)
    console = Console(highlight=False, soft_wrap=True)
    natural = Measurement.get(console, console.options.update_width(_UNBOUNDED), table).maximum
    if natural > console.width:
        # Wider than the terminal: print it whole and let the terminal wrap the lines.
        console = Console(highlight=False, soft_wrap=True, width=natural)
    console.print(table)


__all__ = ["is_terminal", "plain_lines", "print_table"]
