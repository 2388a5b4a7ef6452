"""The console scripts of pyproject.toml's [project.scripts] (zoo/entry_points.py): installed,
they resolve to functions that behave as ``python -m zoo.X`` does; and the set-up script that
the README shows first, which CI runs."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import distribution
from pathlib import Path

import pytest

import zoo.entry_points

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = {
    "tpo-zoo-train": "zoo.entry_points:train",
    "tpo-zoo-enjoy": "zoo.entry_points:enjoy",
    "tpo-zoo-reproduce": "zoo.entry_points:reproduce",
    "tpo-zoo-report": "zoo.entry_points:report",
}
STALE = "the installed metadata predates [project.scripts]: reinstall (./tpo setup, or pip install -e .)"


def console_scripts() -> dict:
    return {ep.name: ep for ep in distribution("tpo").entry_points if ep.group == "console_scripts"}


def test_declared_entry_points_resolve():
    scripts = console_scripts()
    assert {name: ep.value for name, ep in scripts.items()} == SCRIPTS, STALE
    for ep in scripts.values():
        assert callable(ep.load())


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_help_runs(name, monkeypatch, capsys):
    """``NAME --help``: through the installed script beside this Python when there is one,
    else through the entry-point function."""
    if name in ("tpo-zoo-train", "tpo-zoo-enjoy"):
        pytest.importorskip("rl_zoo3")  # the zoo extra
    script = Path(sys.executable).parent / name
    if script.exists():
        proc = subprocess.run(
            [str(script), "--help"], capture_output=True, text=True, timeout=300, cwd=ROOT
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        out = proc.stdout
    else:
        entry = console_scripts()[name].load()
        monkeypatch.setattr(sys, "argv", [name, "--help"])
        with pytest.raises(SystemExit) as exit_:
            entry()
        assert exit_.value.code in (0, None)
        out = capsys.readouterr().out
    assert "usage:" in out.lower(), out[-3000:]


def test_reproduce_and_report_exit_0(tmp_path, monkeypatch, capsys):
    """The functions return None, so the console script's ``sys.exit(f())`` exits 0 (the
    ``main`` functions return the result dict and the page's path)."""
    out = tmp_path / "results"
    argv = ["tabular-single", "--seeds", "2", "--steps", "3", "--quiet", "--out", str(out)]
    monkeypatch.setattr(sys, "argv", ["tpo-zoo-reproduce", *argv])
    assert zoo.entry_points.reproduce() is None
    assert json.loads((out / "tabular-single.json").read_text())["config"]["seeds"] == 2
    monkeypatch.setattr(sys, "argv", ["tpo-zoo-report", str(out)])
    assert zoo.entry_points.report() is None
    assert (out / "REPORT.md").is_file()


def test_reproduce_interrupted_exits_130(monkeypatch, capsys):
    import zoo.paper.reproduce

    def interrupted(argv):
        raise KeyboardInterrupt

    monkeypatch.setattr(zoo.paper.reproduce, "main", interrupted)
    monkeypatch.setattr(sys, "argv", ["tpo-zoo-reproduce", "tabular-single"])
    with pytest.raises(SystemExit) as exit_:
        zoo.entry_points.reproduce()
    assert exit_.value.code == 130
    assert capsys.readouterr().err == "interrupted\n"


def test_train_usage_error_exits_2(monkeypatch, capsys):
    pytest.importorskip("rl_zoo3")
    monkeypatch.setattr(sys, "argv", ["tpo-zoo-train", "--algo", "no-such-algo"])
    with pytest.raises(SystemExit) as exit_:
        zoo.entry_points.train()
    assert exit_.value.code == 2
    assert capsys.readouterr().err.startswith("zoo.train: error:")


def test_ci_runs_the_readmes_test_command():
    """CI runs the README's second set-up command, after only its optional apt step."""
    readme = (ROOT / "README.md").read_text()
    assert "./tpo demo" in readme and "./tpo test" in readme
    assert readme.index("./tpo demo") < readme.index("./tpo test") < readme.index("\n## Quickstart")
    commands = [
        line.strip()
        for line in (ROOT / ".ci" / "run").read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    assert commands[-1] == "./tpo test", commands
