"""The fenced code blocks of README.md and docs/*.md, as the docs test runs them.

Every ```python and ```bash (also ``sh``, ``shell``) block is an example a reader may paste as
it is. The line before a block may say how the test treats it, in an HTML comment that the
rendered page hides::

    <!-- docs-test: slow ~4 min -->              runs only with --docs-slow
    <!-- docs-test: manual: needs a GPU -->      never runs here (a GPU, a cluster, hours)
    <!-- docs-test: cwd=clone -->                runs in the clone (``./tpo``), not a temp folder
    <!-- docs-test: copy=docs/results -->        the temp folder gets a copy of these paths

Items combine with ``;``; ``manual: WHY`` comes last. Unmarked blocks run in every test run. Every block, whatever its
marks, is checked to parse and to import (its python modules, its shell commands' programs).
Other fences (``text``, no language) are output or listings and are not code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = ("README.md", "docs/*.md")
LANGUAGES = {"python": "python", "bash": "shell", "sh": "shell", "shell": "shell"}
_FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
_MARK = re.compile(r"^\s*<!--\s*docs-test:(.*)-->\s*$")
_SLOW = re.compile(r"^slow\s+~?\s*(\d+(?:\.\d+)?)\s*(s|min|h)(\s+\(.*\))?$")  # (a note)


@dataclass(frozen=True)
class DocBlock:
    """One fenced block: where it is, its language (python or shell), its code, its marks."""

    page: str  # path relative to the clone, e.g. "docs/llm.md"
    line: int  # 1-based line of the opening fence
    language: str
    code: str
    slow_seconds: float | None = None  # the time the mark states for a slow block
    manual: str | None = None  # why it never runs here
    in_clone: bool = False
    copies: tuple[str, ...] = field(default=())

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def runs_by_default(self) -> bool:
        return self.slow_seconds is None and self.manual is None


def parse_mark(text: str, where: str) -> dict:
    """The keyword arguments of DocBlock that a ``docs-test:`` comment's text asks for."""
    marks: dict = {}
    text, manual, reason = text.partition("manual:")  # the reason, last, may hold ';'
    if manual:
        if not reason.strip():
            raise ValueError(f"{where}: 'manual:' needs a reason (why it never runs here)")
        marks["manual"] = reason.strip()
    for item in (part.strip() for part in text.split(";") if part.strip()):
        slow = _SLOW.match(item)
        if slow:
            value, unit = float(slow.group(1)), slow.group(2)
            marks["slow_seconds"] = value * {"s": 1, "min": 60, "h": 3600}[unit]
        elif item == "cwd=clone":
            marks["in_clone"] = True
        elif item.startswith("copy=") and item[len("copy="):].strip():
            marks["copies"] = tuple(p.strip() for p in item[len("copy="):].split(","))
        else:
            raise ValueError(
                f"{where}: unknown docs-test mark {item!r}; expected 'slow ~N s|min|h', "
                "'manual: WHY', 'cwd=clone' or 'copy=PATH[,PATH]'"
            )
    return marks


def blocks_of(page: Path, root: Path = ROOT) -> list[DocBlock]:
    """The python and shell blocks of one markdown page, in reading order."""
    lines = page.read_text(encoding="utf-8").splitlines()
    name = page.relative_to(root).as_posix()
    blocks, i = [], 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        indent, language, start = fence.group(1), fence.group(2).lower(), i
        i += 1
        body = []
        while i < len(lines) and not re.match(r"^\s*```\s*$", lines[i]):
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        if i == len(lines):
            raise ValueError(f"{name}:{start + 1}: a code fence that is never closed")
        i += 1
        if language not in LANGUAGES:
            continue
        previous = next((s for s in reversed(lines[:start]) if s.strip()), "")
        mark = _MARK.match(previous)
        marks = parse_mark(mark.group(1), f"{name}:{start}") if mark else {}
        code = "\n".join(body) + "\n"
        blocks.append(DocBlock(name, start + 1, LANGUAGES[language], code, **marks))
    return blocks


def all_blocks(root: Path = ROOT) -> list[DocBlock]:
    """Every block of README.md and docs/*.md."""
    pages = sorted({p for pattern in PAGES for p in root.glob(pattern)})
    return [block for page in pages for block in blocks_of(page, root)]


def shell_commands(code: str) -> list[str]:
    """The simple commands of a shell block: continuations joined, comments and blanks out."""
    joined = re.sub(r"\\\n", " ", code)
    commands = []
    for line in joined.splitlines():
        line = re.sub(r"'[^']*'|\"[^\"]*\"", "''", line)  # quoted text holds no commands
        line = re.sub(r"(^|\s)#.*$", "", line).strip()
        if line:
            commands.extend(part.strip() for part in re.split(r"&&|\|\||;|\|", line) if part.strip())
    return commands
