"""The first Python example of docs/llm.md and of docs/llm_trl.md runs verbatim on a CPU."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"


def first_python_block(name: str) -> str:
    blocks = re.findall(r"```python\n(.*?)```", (DOCS / name).read_text(), flags=re.S)
    assert blocks, f"docs/{name} has no python block"
    return blocks[0]


@pytest.mark.parametrize("name", ["llm.md", "llm_trl.md"])
def test_first_example_runs_verbatim(name, arithmetic_lm, model_cache, tmp_path, monkeypatch):
    pytest.importorskip("trl")
    monkeypatch.setenv("TPO_CACHE_DIR", str(model_cache))  # the session's small model
    monkeypatch.chdir(tmp_path)
    code = first_python_block(name)
    assert "cuda" not in code and "/models/" not in code
    namespace: dict = {}
    exec(compile(code, f"docs/{name}", "exec"), namespace)  # noqa: S102
    assert os.path.isdir(tmp_path / "runs")
