"""Every python and shell example of README.md and docs/*.md, run as it is written.

``tests/doc_blocks.py`` finds the blocks and reads their marks. Every block is checked to
parse and to import; unmarked blocks also run, each page's blocks in reading order in one
fresh folder (a reader following the page), and must exit 0 and print what they achieved.
Blocks marked slow run with ``pytest --docs-slow``; blocks marked manual (a GPU, a cluster,
hours) only parse and import here, and their run test says why it does not run.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from doc_blocks import PAGES, ROOT, DocBlock, all_blocks, blocks_of, parse_mark, shell_commands

BLOCKS = all_blocks()
DEFAULT_TIMEOUT_S = 600


def test_the_pages_have_examples_and_the_marks_are_well_formed():
    assert len(BLOCKS) >= 20, [b.id for b in BLOCKS]
    for block in BLOCKS:
        assert not (block.slow_seconds and block.manual), f"{block.id}: slow or manual, not both"


def test_the_marks_and_fences_are_read_as_documented(tmp_path):
    assert parse_mark(" slow ~4 min ", "x") == {"slow_seconds": 240.0}
    assert parse_mark("slow 10 s (after the block above); cwd=clone", "x") == {
        "slow_seconds": 10.0, "in_clone": True
    }
    assert parse_mark("copy=docs/results, data; manual: a GPU; or a cluster", "x") == {
        "copies": ("docs/results", "data"), "manual": "a GPU; or a cluster"
    }
    for bad in ("slow", "slow ~4 weeks", "fast", "manual:", "copy="):
        with pytest.raises(ValueError, match="x: "):
            parse_mark(bad, "x")
    page = tmp_path / "page.md"
    page.write_text(
        "text\n<!-- docs-test: slow ~2 min -->\n```python\nprint(1)\n```\n"
        "```text\nout\n```\n- item\n\n   ```bash\n   echo 'a; b' && ls  # note\n   ```\n"
    )
    python, shell = blocks_of(page, tmp_path)
    assert (python.line, python.language, python.code, python.slow_seconds) == (3, "python", "print(1)\n", 120.0)
    assert (shell.line, shell.language, shell.runs_by_default) == (11, "shell", True)
    assert shell_commands(shell.code) == ["echo ''", "ls"]
    page.write_text("```python\nprint(1)\n")
    with pytest.raises(ValueError, match="never closed"):
        blocks_of(page, tmp_path)


# --- parse and import: every block -------------------------------------------------------


def _check_python_imports(block: DocBlock) -> None:
    tree = ast.parse(block.code, filename=block.id)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                importlib.import_module(alias.name)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            module = importlib.import_module(node.module)
            for alias in node.names:
                if alias.name != "*" and not hasattr(module, alias.name):
                    importlib.import_module(f"{node.module}.{alias.name}")


def _check_shell_programs(block: DocBlock) -> None:
    check = subprocess.run(["bash", "-n"], input=block.code, text=True, capture_output=True)
    assert check.returncode == 0, f"{block.id} does not parse: {check.stderr}"
    bin_dir = str(Path(sys.executable).parent)
    for command in shell_commands(block.code):
        words = command.split()
        program = words[0]
        if program.startswith("./"):
            assert (ROOT / program).is_file(), f"{block.id}: {program} is not in the clone"
        elif program in ("python", "python3"):
            if len(words) > 2 and words[1] == "-m":
                spec = importlib.util.find_spec(words[2])
                assert spec is not None, f"{block.id}: no module {words[2]} ({command})"
        else:
            found = shutil.which(program, path=bin_dir + os.pathsep + os.environ["PATH"])
            assert found, f"{block.id}: no program {program!r} on PATH ({command})"


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.id)
def test_the_example_parses_and_its_imports_resolve(block):
    if block.language == "python":
        _check_python_imports(block)
    else:
        _check_shell_programs(block)


# --- run: unmarked blocks, and slow ones with --docs-slow ----------------------------------

_folders: dict[str, Path] = {}
_done: set[str] = set()


def _folder(page: str, tmp_path_factory) -> Path:
    if page not in _folders:
        _folders[page] = tmp_path_factory.mktemp(page.replace("/", "_").replace(".", "_"))
    return _folders[page]


def _environment(model_cache: Path) -> dict[str, str]:
    env = dict(os.environ)
    # The small pretrained models are built once per test session (conftest's model_cache).
    env["TPO_CACHE_DIR"] = str(model_cache)
    # `python`, `pip` and the console scripts are this environment's, as in an activated venv.
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env.pop("PYTHONPATH", None)
    return env


def _run(
    block: DocBlock, folder: Path, model_cache: Path, timeout: float
) -> subprocess.CompletedProcess:
    for path in block.copies:
        source, target = ROOT / path, folder / path
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            (shutil.copytree if source.is_dir() else shutil.copy2)(source, target)
    cwd = ROOT if block.in_clone else folder
    script = folder / f"block_{block.line}.{'py' if block.language == 'python' else 'sh'}"
    script.write_text(block.code)
    command = (
        [sys.executable, str(script)]
        if block.language == "python"
        else ["bash", "-e", "-o", "pipefail", str(script)]
    )
    return subprocess.run(
        command, cwd=cwd, env=_environment(model_cache), capture_output=True, text=True, timeout=timeout
    )


def _timeout(block: DocBlock) -> float:
    """Three times a slow block's stated time, and at least DEFAULT_TIMEOUT_S."""
    return max(DEFAULT_TIMEOUT_S, 3 * (block.slow_seconds or 0))


def _enabled(block: DocBlock, config) -> bool:
    return block.runs_by_default or (
        block.slow_seconds is not None and config.getoption("--docs-slow")
    )


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.id)
def test_the_example_runs_as_written(block, request, tmp_path_factory, model_cache):
    if block.manual:
        pytest.skip(f"manual ({block.manual}): checked to parse and import only")
    if not _enabled(block, request.config):
        pytest.skip(f"slow (~{block.slow_seconds:.0f} s): runs with pytest --docs-slow")
    folder = _folder(block.page, tmp_path_factory)
    # The page's earlier blocks first, as a reader runs them (when this one is run alone).
    for earlier in BLOCKS:
        if earlier.page == block.page and earlier.line < block.line and earlier.id not in _done:
            if _enabled(earlier, request.config):
                _run(earlier, folder, model_cache, _timeout(earlier))
                _done.add(earlier.id)
    start = time.perf_counter()
    result = _run(block, folder, model_cache, _timeout(block))
    _done.add(block.id)
    seconds = time.perf_counter() - start
    print(f"\n--- {block.id}: {seconds:.1f} s, exit {result.returncode}\n{result.stdout[-1500:]}")
    assert result.returncode == 0, (
        f"{block.id} failed (exit {result.returncode}) after {seconds:.0f} s\n"
        f"--- stdout\n{result.stdout[-4000:]}\n--- stderr\n{result.stderr[-4000:]}"
    )
    assert result.stdout.strip(), f"{block.id} ran but printed nothing: say what it achieved"
    if not block.in_clone:
        copied = {Path(c).parts[0] for b in BLOCKS if b.page == block.page for c in b.copies}
        written = sorted(
            p.name + ("/" if p.is_dir() else "") for p in folder.iterdir()
            if not p.name.startswith("block_") and p.name not in copied
        )
        assert [name for name in written if not _git_ignored(name)] == [], (
            f"{block.id} writes files that a reader's clone would not ignore"
        )


def _git_ignored(name: str) -> bool:
    """Whether a file of this name at the clone's top would be ignored by git."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        return True  # no checkout to ask (an installed copy of the tests)
    proc = subprocess.run(
        ["git", "-C", str(ROOT), "check-ignore", "-q", "--no-index", name], capture_output=True
    )
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode == 0


# --- the prose: the files and modules it names exist --------------------------------------

_PATH = re.compile(r"`((?:tpo_gym|tpo_agents|zoo|benchmarks|tests|examples|docs|data|\.ci)/[\w/.-]+)`")
_MODULE = re.compile(r"python -m ([A-Za-z_][\w.]*)")


@pytest.mark.parametrize(
    "page", sorted({p.relative_to(ROOT).as_posix() for g in PAGES for p in ROOT.glob(g)})
)
def test_the_files_and_modules_a_page_names_exist(page):
    text = (ROOT / page).read_text(encoding="utf-8")
    missing = [p for p in _PATH.findall(text) if not (ROOT / p.rstrip(".")).exists()]
    assert missing == [], f"{page} names files that are not in the clone"
    modules = sorted(set(_MODULE.findall(text)) - {"pip", "pytest", "venv"})
    assert [m for m in modules if importlib.util.find_spec(m) is None] == [], page
