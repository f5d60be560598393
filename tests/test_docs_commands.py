"""The commands and variables the docs show are real.

Every ``voltro …`` command line in a code block of README.md or docs/*.md (and every inline
code span that starts with ``voltro``) must name a real verb, and every ``--flag`` on it must
appear in that verb's ``--help`` — asked through Typer's ``CliRunner``, so the check reads the
same help text a user gets. Every ``VOLTRO_*`` name the docs mention must be something the code
reads: a ``SchedulingConfig`` field, a token variable (``tokens.py`` / ``devtokens.py``), an
environment variable of a CLI option, a variable the generated CronJob script reads, or one of
the test suite's own ``VOLTRO_TEST_*`` variables. A doc that shows a verb, flag or variable
nothing reads is a defect (the brief: "a doc line that points at a command that does not exist").
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer.main
from support.servers import REPO
from typer.testing import CliRunner

from fastapi_voltro_schedules import SchedulingConfig, devtokens, tokens
from fastapi_voltro_schedules.cli import app
from fastapi_voltro_schedules.manifests.script import TRIGGER_SCRIPT

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# Fences may be indented (a block inside a list item).
FENCE = re.compile(r"^\s*```")
# A command line, after an optional prompt and venv path: `$ .venv/bin/voltro migrate …`.
COMMAND = re.compile(r"^\s*(?:\$\s+)?(?:\.venv/bin/)?voltro(?:\s|$)")
# What a command prints starts the same way but puts a colon after its verb path:
# `voltro migrate: _voltro_schedule_runs … at 0004`, `voltro schedule backfill: needs …`.
OUTPUT = re.compile(r"^\s*voltro(?:\s+[a-z][a-z-]*)+:(?:\s|$)")
INLINE = re.compile(r"`(voltro(?:\s[^`]*)?)`")
FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")
VARIABLE = re.compile(r"\bVOLTRO_[A-Z0-9_]*[A-Z0-9]\b")


@dataclass(frozen=True)
class Shown:
    page: Path
    line: int
    text: str

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def block_commands(page: Path) -> list[Shown]:
    """The ``voltro`` command lines inside the page's fenced code blocks, continuations joined."""
    found: list[Shown] = []
    inside = False
    pending: tuple[int, str] | None = None
    for number, raw in enumerate(page.read_text().splitlines(), start=1):
        if FENCE.match(raw):
            inside = not inside
            pending = None
            continue
        if not inside:
            continue
        if pending is not None:
            start, text = pending
            text = f"{text} {raw.strip()}"
        elif COMMAND.match(raw) and not OUTPUT.match(raw):
            start, text = number, raw.strip()
        else:
            continue
        if text.endswith("\\"):
            pending = (start, text[:-1].rstrip())
            continue
        pending = None
        found.append(Shown(page, start, text))
    return found


def inline_commands(page: Path) -> list[Shown]:
    """Inline code spans outside code blocks that start with ``voltro``."""
    found: list[Shown] = []
    inside = False
    for number, raw in enumerate(page.read_text().splitlines(), start=1):
        if FENCE.match(raw):
            inside = not inside
            continue
        if inside:
            continue
        found.extend(
            Shown(page, number, m.group(1))
            for m in INLINE.finditer(raw)
            if not OUTPUT.match(m.group(1))
        )
    return found


def is_group(command: Any) -> bool:
    # Typer >= 0.2x vendors click (typer._click): a group is told apart by its `commands`.
    return isinstance(getattr(command, "commands", None), dict)


COMMANDS = [c for page in PAGES for c in (*block_commands(page), *inline_commands(page))]
ROOT = typer.main.get_command(app)
RUNNER = CliRunner()


def words(text: str) -> list[str]:
    """The command's words: prompt, venv path and trailing comment dropped."""
    text = re.sub(r"\s+#\s.*$", "", text)
    text = re.sub(r"^\$\s+", "", text)
    try:
        parts = shlex.split(text)
    except ValueError:  # an unbalanced quote in a synopsis: split on blanks
        parts = text.split()
    assert parts and parts[0].endswith("voltro"), text
    return parts[1:]


def resolve(parts: list[str]) -> list[list[str]]:
    """The verb paths the words name (``list|runs`` names two); [] for a bare ``voltro``.

    Raises AssertionError naming the word that is not a verb of the group before it.
    """
    paths: list[list[str]] = [[]]
    command: Any = ROOT
    for word in parts:
        if not is_group(command) or word.startswith("-"):
            break
        names = word.split("|")
        if not all(re.fullmatch(r"[a-z][a-z-]*", n) for n in names):
            break  # an argument (NAME, a path): the verb path ended on a group
        missing = [n for n in names if n not in command.commands]
        assert not missing, (
            f"`voltro {' '.join(paths[0])}` has no verb {missing[0]!r} "
            f"(it has: {', '.join(sorted(command.commands))})"
        )
        paths = [[*p, n] for p in paths for n in names]
        command = command.commands[names[0]]
    return paths


def help_text(path: list[str]) -> str:
    result = RUNNER.invoke(app, [*path, "--help"], terminal_width=400, prog_name="voltro")
    assert result.exit_code == 0, f"voltro {' '.join(path)} --help: {result.output}"
    return result.output


def leaf(path: list[str]) -> Any:
    command: Any = ROOT
    for name in path:
        assert is_group(command)
        command = command.commands[name]
    return command


@pytest.mark.parametrize("shown", COMMANDS, ids=lambda c: c.id)
def test_the_command_names_a_real_verb_with_real_options(shown: Shown) -> None:
    parts = words(shown.text)
    flags = sorted({m.group(1) for m in FLAG.finditer(" ".join(parts))})
    for path in resolve(parts):
        command = leaf(path)
        grouped = is_group(command)
        # A group is named alone in prose ("`voltro schedule`"); a block must run something.
        if grouped and flags == [] and shown in block_commands(shown.page):
            assert path == [] and parts == [], (
                f"{shown.id}: `{shown.text}` names the group `voltro {' '.join(path)}`, no verb"
            )
        text = help_text(path)
        for flag in flags:
            assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text), (
                f"{shown.id}: `{shown.text}` uses {flag}, which `voltro {' '.join(path)} "
                f"--help` does not list"
            )


def test_the_command_finder_sees_blocks_continuations_and_skips_output(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text(
        "Run `voltro migrate --app a:b` first; it says `voltro migrate: failed on …`.\n"
        "```\n"
        "$ voltro schedule backfill x --from 1 \\\n"
        "    --to 2 --yes\n"
        "voltro schedule backfill: needs confirmation\n"
        "voltro migrate: _voltro_schedule_runs at 0004 (sqlite)\n"
        "```\n"
        "  ```bash\n"
        "  .venv/bin/voltro dev --app a:b   # reload on\n"
        "  ```\n"
    )
    assert [c.text for c in block_commands(page)] == [
        "$ voltro schedule backfill x --from 1 --to 2 --yes",
        ".venv/bin/voltro dev --app a:b   # reload on",
    ]
    assert [c.text for c in inline_commands(page)] == ["voltro migrate --app a:b"]
    assert words(".venv/bin/voltro dev --app a:b   # reload on") == ["dev", "--app", "a:b"]


def test_the_checker_catches_a_wrong_verb_and_a_wrong_flag() -> None:
    with pytest.raises(AssertionError, match="no verb 'bakfill'"):
        resolve(words("voltro schedule bakfill x"))
    assert resolve(words("voltro schedule list|runs NAME")) == [
        ["schedule", "list"],
        ["schedule", "runs"],
    ]
    assert "--yes" in help_text(["schedule", "backfill"])
    assert not re.search(r"(?<![\w-])--force(?![\w-])", help_text(["schedule", "backfill"]))


def test_the_docs_show_the_verbs_a_user_needs() -> None:
    """Not a coverage count for its own sake: if the finder broke, every check above would pass
    on an empty list."""
    shown = {tuple(p) for c in COMMANDS for p in resolve(words(c.text))}
    for verb in [
        ("dev",),
        ("serve",),
        ("migrate",),
        ("schedule-manifest",),
        ("schedule", "backfill"),
        ("schedule", "list"),
        ("schedule", "fire"),
        ("schedule", "pause"),
    ]:
        assert verb in shown, f"no page shows `voltro {' '.join(verb)}`"


# --- VOLTRO_* variables --------------------------------------------------------------------


def cli_variables() -> set[str]:
    found: set[str] = set()

    def walk(command: Any) -> None:
        for param in command.params:
            envvar = getattr(param, "envvar", None)
            if isinstance(envvar, str):
                found.add(envvar)
            elif envvar:
                found.update(envvar)
        if is_group(command):
            for child in command.commands.values():
                walk(child)

    walk(ROOT)
    return found


def suite_variables() -> set[str]:
    sources = [REPO / "tests" / "conftest.py", *sorted((REPO / "tests" / "support").glob("*.py"))]
    return {
        name
        for source in sources
        for name in re.findall(r"\"(VOLTRO_TEST_[A-Z0-9_]+)\"", source.read_text())
    }


def known_variables() -> dict[str, str]:
    known: dict[str, str] = {}
    for field in SchedulingConfig.model_fields:
        known[f"VOLTRO_{field.upper()}"] = "a SchedulingConfig field"
    for module in (tokens, devtokens):
        for value in vars(module).values():
            if isinstance(value, str) and re.fullmatch(r"VOLTRO_[A-Z0-9_]+", value):
                known[value] = f"a token variable in {module.__name__}"
    for name in cli_variables():
        known.setdefault(name, "a CLI option's environment variable")
    for name in re.findall(r"\$\{?(VOLTRO_[A-Z0-9_]+)", TRIGGER_SCRIPT):
        known.setdefault(name, "read by the generated CronJob script")
    for name in suite_variables():
        known.setdefault(name, "read by the test suite")
    return known


MENTIONS = sorted(
    {
        (name, page.relative_to(REPO).as_posix())
        for page in PAGES
        for name in VARIABLE.findall(page.read_text())
    }
)


def test_every_variable_the_docs_mention_is_read_by_the_code() -> None:
    known = known_variables()
    unknown = [f"{name} ({page})" for name, page in MENTIONS if name not in known]
    assert not unknown, f"the docs mention variables nothing reads: {', '.join(unknown)}"


def test_the_variable_sources_are_found() -> None:
    known = known_variables()
    # One from each source, so an import that silently yields nothing is caught.
    assert known["VOLTRO_DATABASE_URL"] == "a SchedulingConfig field"
    assert known["VOLTRO_DEV"].startswith("a token variable")
    assert known["VOLTRO_APP"] == "a CLI option's environment variable"
    assert known["VOLTRO_TRIGGER_URL"] == "read by the generated CronJob script"
    assert known["VOLTRO_TEST_POSTGRES_URL"] == "read by the test suite"
    assert "VOLTRO_BASE_URL" not in known
    assert len(MENTIONS) > 20
