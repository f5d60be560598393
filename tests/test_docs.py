"""The docs run: every ```python block of README.md and docs/*.md is executed, and no internal
link is dead.

Convention for a ```python block (the HTML comment on the line just before it):

* none — the block is runnable on its own: it is executed here, in a fresh namespace, from the
  repository root (top-level ``await`` allowed). It must import what it uses.
* ``<!-- from: tests/PATH.py#NAME -->`` — the block is verbatim the region ``# --- doc: NAME``
  … ``# --- end`` of that file, which pytest runs as tests (the FastAPI ``docs_src`` habit).
* ``<!-- not-run: REASON -->`` — not executed, for the reason given (a fragment of another
  tool's file, a server it needs). The reason is required.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.servers import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\s*$")
MARKER = re.compile(r"^<!--\s*(from|not-run):\s*(.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    lang: str
    code: str
    marker: tuple[str, str] | None

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    lines = page.read_text().splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        start = i
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            i += 1
        previous = next((ln for ln in reversed(lines[:start]) if ln.strip()), "")
        marked = MARKER.match(previous)
        found.append(
            Block(
                page,
                start + 1,
                opening.group(1),
                "\n".join(lines[start + 1 : i]) + "\n",
                (marked.group(1), marked.group(2)) if marked else None,
            )
        )
        i += 1
    return found


PYTHON = [b for page in PAGES for b in blocks(page) if b.lang == "python"]


def doc_region(spec: str) -> str:
    path, _, name = spec.partition("#")
    source = (REPO / path).read_text()
    match = re.search(rf"^# --- doc: {re.escape(name)}\n(.*?)^# --- end\n", source, re.S | re.M)
    assert match, f"{path} has no region '# --- doc: {name}'"
    return match.group(1)


@pytest.mark.parametrize("block", PYTHON, ids=lambda b: b.id)
def test_python_block(block: Block, monkeypatch: pytest.MonkeyPatch) -> None:
    if block.marker is not None:
        kind, value = block.marker
        if kind == "not-run":
            assert len(value) > 10, f"{block.id}: a not-run block needs its reason"
            # Even a fragment must be Python: a typo in the docs is still caught.
            ast.parse(block.code)
            return
        path = value.partition("#")[0]
        assert path.startswith("tests/") and Path(path).name.startswith("test_"), (
            f"{block.id}: from: must name a test file pytest collects"
        )
        assert block.code == doc_region(value), (
            f"{block.id} differs from {value} — copy the region into the page"
        )
        return
    monkeypatch.chdir(REPO)
    monkeypatch.syspath_prepend(str(REPO))
    code = compile(block.code, block.id, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    namespace: dict[str, object] = {"__name__": "docs_snippet"}
    result = eval(code, namespace)
    if inspect.iscoroutine(result):
        asyncio.run(result)


def test_every_page_with_python_is_seen() -> None:
    pages = {b.page.name for b in PYTHON}
    assert {"README.md", "testing.md", "schedules.md"} <= pages
    assert sum(1 for b in PYTHON if b.marker is None) >= 5


def test_the_marker_parser_tells_the_three_kinds_apart(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text(
        "```python\nx = 1\n```\n\n<!-- not-run: needs a server running -->\n```python\ny\n```\n"
        "<!-- from: tests/a.py#b -->\n```python\nz\n```\n```sh\nls\n```\n"
    )
    got = [(b.lang, b.marker, b.code) for b in blocks(page)]
    assert got == [
        ("python", None, "x = 1\n"),
        ("python", ("not-run", "needs a server running"), "y\n"),
        ("python", ("from", "tests/a.py#b"), "z\n"),
        ("sh", None, "ls\n"),
    ]


# --- links ---------------------------------------------------------------------------------

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's heading anchor: lowercase, markup and punctuation dropped, spaces → '-'."""
    # GitHub keeps underscores (`max_runtime_ms` → max_runtime_ms); only `*`/backtick markup goes.
    text = re.sub(r"[`*]|<[^>]+>", "", heading).strip().lower()
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    kept = "".join(
        c for c in text if c in " -_" or unicodedata.category(c)[0] in ("L", "N")
    )
    return kept.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out: set[str] = set()
    in_code = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
            continue
        heading = re.match(r"^#{1,6}\s+(.*)$", line)
        if heading and not in_code:
            base = slug(heading.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(page: Path) -> list[tuple[int, str]]:
    found = []
    in_code = False
    for number, line in enumerate(page.read_text().splitlines(), 1):
        if line.startswith("```"):
            in_code = not in_code
            continue
        if in_code:
            continue
        for target in LINK.findall(re.sub(r"`[^`]*`", "", line)):
            found.append((number, target))
    return found


def dead_links(page: Path) -> list[str]:
    dead = []
    for number, target in links(page):
        if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        where = f"{page.relative_to(REPO)}:{number}: {target}"
        if not file.exists():
            dead.append(f"{where} — no such file")
        elif anchor and (file.suffix != ".md" or anchor not in anchors(file)):
            dead.append(f"{where} — no heading #{anchor} in {file.relative_to(REPO)}")
    return dead


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_no_dead_internal_link(page: Path) -> None:
    assert dead_links(page) == []


def test_the_link_check_finds_a_dead_file_and_a_dead_anchor(tmp_path: Path) -> None:
    docs = REPO / "docs"
    page = docs / "_link_check_probe.md"
    page.write_text(
        "# A `probe` — heading\n[ok](#a-probe--heading) [ok](engine.md) [gone](nope.md)\n"
        "[bad](engine.md#no-such-heading) [web](https://example.com/x.md)\n"
    )
    try:
        dead = dead_links(page)
    finally:
        page.unlink()
    assert [d.split(": ", 1)[1].split(" —")[0] for d in dead] == [
        "nope.md",
        "engine.md#no-such-heading",
    ]
