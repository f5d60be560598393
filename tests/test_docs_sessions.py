"""The shell sessions the docs show run, and print what the docs say they print.

A ```console block whose line before is ``<!-- session: example-app -->`` is a session against
the example app. Every ``$ `` command in it (continuation lines ending in ``\\`` joined) runs in
bash, in page order across the page's sessions, against one example app started for the page:
uvicorn on a fresh SQLite ledger, an operator token in ``VOLTRO_INSPECT_TOKEN``, and
``http://127.0.0.1:8000`` pointing at it. What it prints (stdout and stderr) must be the lines
the block shows after it. In those lines ``…`` stands for anything: alone on a line, for any
number of lines (the headers of ``curl -i``, which carry a date); inside a line, for any text
(a timestamp, the fields of a long answer).

A page that has sessions shows no ``$ curl`` or ``$ voltro`` example outside one: an HTTP or CLI
example nothing runs is a doc that can drift. tests/test_docs_commands.py holds every page's
``voltro`` verbs and flags, tests/test_docs_truth.py every ``/_voltro`` route it names.
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.servers import REPO, uvicorn_server

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SESSION = re.compile(r"^<!--\s*session:\s*example-app\s*-->\s*$")
PROMPT = "$ "
SHOWN_URL = "http://127.0.0.1:8000"
ANYTHING = "…"


@dataclass(frozen=True)
class Step:
    line: int
    command: str
    output: list[str]


@dataclass(frozen=True)
class Block:
    line: int
    lang: str
    lines: list[str]
    session: bool


def blocks(text: str) -> list[Block]:
    lines = text.splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = re.match(r"^```(\w*)\s*$", lines[i])
        if not opening:
            i += 1
            continue
        start = i
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            i += 1
        previous = next((ln for ln in reversed(lines[:start]) if ln.strip()), "")
        found.append(
            Block(start + 1, opening.group(1), lines[start + 1 : i], bool(SESSION.match(previous)))
        )
        i += 1
    return found


def steps(block: Block) -> list[Step]:
    """The block's commands, each with the output lines shown under it."""
    found: list[Step] = []
    i = 0
    lines = block.lines
    while i < len(lines):
        if not lines[i].startswith(PROMPT):
            raise AssertionError(
                f"line {block.line + 1 + i}: {lines[i]!r} is output with no command before it"
            )
        start = i
        command = lines[i][len(PROMPT) :]
        while command.endswith("\\"):
            i += 1
            command = command[:-1].rstrip() + " " + lines[i].strip()
        i += 1
        output: list[str] = []
        while i < len(lines) and not lines[i].startswith(PROMPT):
            output.append(lines[i])
            i += 1
        found.append(Step(block.line + 1 + start, command, output))
    return found


def pattern(shown: list[str]) -> re.Pattern[str]:
    """``shown`` as a regex over the whole output: ``…`` alone = any lines, inside = any text."""
    parts = []
    for line in shown:
        if line.strip() == ANYTHING:
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            parts.append(".*?".join(re.escape(p) for p in line.split(ANYTHING)) + r"\n")
    return re.compile("".join(parts))


def matches(shown: list[str], printed: str) -> bool:
    text = printed.replace("\r\n", "\n").rstrip() + "\n"
    if not shown:
        return printed.strip() == ""
    return pattern(shown).fullmatch(text) is not None


def sessions(page: Path) -> list[Step]:
    return [s for b in blocks(page.read_text()) if b.session for s in steps(b)]


SESSION_PAGES = [p for p in PAGES if sessions(p)]


def shows_a_command(block: Block) -> bool:
    return any(re.match(r"^\$\s+(curl|voltro|\.venv/bin/voltro)\b", ln) for ln in block.lines)


# --- the checks ---------------------------------------------------------------------------


def test_the_runtime_page_runs_its_http_and_cli_examples() -> None:
    """Not a count for its own sake: if the marker parser broke, the sessions below would pass
    on an empty list."""
    page = REPO / "docs" / "runtime-schedules.md"
    assert page in SESSION_PAGES
    shown = sessions(page)
    assert sum(s.command.startswith("curl") for s in shown) >= 8
    assert {" ".join(s.command.split()[:3]) for s in shown if s.command.startswith("voltro")} == {
        "voltro schedule put",
        "voltro schedule delete",
    }


@pytest.mark.parametrize("page", SESSION_PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_http_and_cli_example_of_the_page_is_a_session(page: Path) -> None:
    loose = [
        f"{page.relative_to(REPO)}:{b.line}"
        for b in blocks(page.read_text())
        if not b.session and shows_a_command(b)
    ]
    assert not loose, f"examples no session runs (mark them <!-- session: example-app -->): {loose}"


@pytest.mark.slow
@pytest.mark.parametrize("page", SESSION_PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_the_sessions_print_what_the_page_shows(page: Path, tmp_path: Path) -> None:
    token = secrets.token_urlsafe(32)
    env = {
        "VOLTRO_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'voltro.db'}",
        "VOLTRO_INSPECT_TOKEN": token,
        "VOLTRO_DEV": "",
    }
    shell = {
        **os.environ,
        **env,
        # `voltro` is this interpreter's entry point, importing this tree's package
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(REPO),
    }
    with uvicorn_server("example_app.main:app", tmp_path, env, name="docs") as server:
        for step in sessions(page):
            command = step.command.replace(SHOWN_URL, server.url)
            done = subprocess.run(
                ["bash", "-c", command],
                cwd=tmp_path,
                env=shell,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=120,
                check=False,
            )
            printed = done.stdout.replace(server.url, SHOWN_URL)
            assert matches(step.output, printed), (
                f"{page.relative_to(REPO)}:{step.line}: `{step.command}` printed\n{printed}\n"
                f"— the page shows\n" + "\n".join(step.output)
            )


def test_the_matcher_reads_the_shown_output(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text(
        "<!-- session: example-app -->\n```console\n$ curl -si x \\\n    -d 1\n"
        "HTTP/1.1 201 Created\n"
        '…\n{"a":1,…,"z":2}\n$ voltro schedule delete y\ny: deleted\n```\n'
        "```console\n$ curl z\n```\n"
    )
    [session, plain] = blocks(page.read_text())
    assert (session.session, plain.session) == (True, False)
    assert shows_a_command(plain)
    first, second = steps(session)
    assert (first.line, first.command) == (3, "curl -si x -d 1")
    assert second.output == ["y: deleted"]
    answer = 'HTTP/1.1 201 Created\r\ndate: today\r\nserver: uvicorn\r\n\r\n{"a":1,"b":3,"z":2}'
    assert matches(first.output, answer)
    assert not matches(first.output, answer.replace("201 Created", "200 OK"))
    assert not matches(first.output, answer.replace('"z":2', '"z":3'))
    assert not matches(second.output, "y: deleted\nand more\n")
    assert matches([], "") and not matches([], "something")
