"""Every Python block of the README runs verbatim on a fresh install."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(python_blocks())))
def test_readme_python_block_runs(index, tmp_path):
    code = python_blocks()[index]
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_readme_names_the_commands_ci_runs():
    text = README.read_text()
    assert 'pip install -e ".[dev]"' in text and "python -m pytest -q" in text
    ci = (README.parent / ".ci" / "run").read_text()
    assert "python -m pytest -q" in ci and '-e ".[dev]"' in ci
