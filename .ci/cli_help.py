"""Every ``voltro`` verb's ``--help`` renders: typer and click of the installed versions agree
(typer < 0.15.3 with click 8.2+ fails here, or already at ``voltro --version``)."""

from __future__ import annotations

import click
import typer.main
from typer.testing import CliRunner

from fastapi_voltro_schedules.cli import app


def walk(command: click.Command, path: list[str]) -> int:
    result = CliRunner().invoke(app, [*path, "--help"])
    assert result.exit_code == 0, (path, result.output, result.exception)
    count = 1
    if isinstance(command, click.Group):
        for name, child in command.commands.items():
            count += walk(child, [*path, name])
    return count


print(f"voltro: --help of {walk(typer.main.get_command(app), [])} commands renders")
