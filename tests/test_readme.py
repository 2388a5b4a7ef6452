"""The README's set-up section installs a CPU torch first, its commands write only git-ignored
folders, and the core install needs none of the heavy optional packages (tests/test_docs.py
runs the README's examples)."""

import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

# Packages of the optional extras (llm, ray, bench, zoo) and of the test tools, by import name.
OPTIONAL_IMPORTS = (
    "jax", "jaxlib", "optax", "flax", "ray", "trl", "transformers", "tokenizers", "peft",
    "accelerate", "datasets", "pyarrow", "reasoning_gym", "rl_zoo3", "optuna", "yaml",
    "hypothesis",
)  # fmt: skip


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def bash_blocks() -> list[str]:
    return re.findall(r"```bash\n(.*?)```", README.read_text(), re.S)


def _git_ignored(name: str) -> bool:
    proc = subprocess.run(
        ["git", "-C", str(ROOT), "check-ignore", "-q", "--no-index", name], capture_output=True
    )
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode == 0


def _require_git() -> None:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs the git checkout to check .gitignore")


def test_readme_bash_outputs_are_git_ignored():
    """The folders the README's commands write (--out, -tb, -f) are in .gitignore."""
    _require_git()
    outputs = set()
    for block in bash_blocks():
        outputs |= set(re.findall(r"(?:--out|-tb|-f)\s+([\w./-]+)", block))
    assert {"results", "logs", "tb"} <= outputs
    assert [name for name in sorted(outputs) if not _git_ignored(name + "/")] == []


def test_readme_names_the_commands_ci_runs():
    text = README.read_text()
    assert 'pip install -e ".[dev]"' in text and "python -m pytest -q" in text
    ci = (README.parent / ".ci" / "run").read_text()
    assert "python -m pytest -q" in ci and '-e ".[dev]"' in ci


def test_setup_installs_cpu_torch_before_the_package():
    setup = README.read_text().split("## Set up", 1)[1].split("\n## ", 1)[0]
    cpu = "pip install torch --index-url https://download.pytorch.org/whl/cpu"
    assert cpu in setup
    assert setup.index(cpu) < setup.index("pip install -e"), "the CPU torch note must come first"


def test_first_zoo_train_command_states_its_run_time():
    text = README.read_text()
    first = next(line for line in text.splitlines() if line.startswith("python -m zoo.train"))
    assert " -n " in first, first  # a budget, not the section's hours-long default
    after = text.split(first, 1)[1].split("## ", 1)[0]
    assert re.search(r"\d+(\.\d+)? minutes", after), after


def test_core_dependencies_leave_out_the_heavy_extras():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

    def names(requirements):
        return {re.split(r"[\s<>=!~\[;]", r, maxsplit=1)[0].lower() for r in requirements}

    core = names(project["dependencies"])
    heavy = {"jax", "jaxlib", "optax", "flax", "ray", "trl", "transformers", "peft", "datasets"}
    assert core & heavy == set()
    extras = project["optional-dependencies"]
    assert {"llm", "ray", "bench", "zoo", "dev"} <= set(extras)
    assert {"transformers", "trl"} <= names(extras["llm"])
    assert "ray" in names(extras["ray"])
    assert {"jax", "optax", "flax"} <= names(extras["bench"])
    assert "rl-zoo3" in names(extras["zoo"])
    dev = " ".join(extras["dev"])
    for extra in ("llm", "ray", "bench", "zoo"):
        assert re.search(rf"tpo\[[^\]]*\b{extra}\b", dev), (extra, dev)
    assert {"pytest", "hypothesis", "ruff"} <= names(extras["dev"])


def test_core_install_runs_without_the_optional_packages():
    """Bandits, MNIST (digits), Token Reversal (both substrates) and the agents, with every
    optional package made unimportable, as on a core-only install."""
    code = textwrap.dedent(
        f"""
        import importlib.abc, sys

        BLOCKED = {OPTIONAL_IMPORTS!r}

        class Hide(importlib.abc.MetaPathFinder):
            def __init__(self, inner):
                self.inner = inner

            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in BLOCKED:
                    return None  # as if not installed
                return self.inner.find_spec(name, path, target)

            def invalidate_caches(self):
                getattr(self.inner, "invalidate_caches", lambda: None)()

        sys.meta_path[:] = [Hide(f) for f in sys.meta_path]
        try:
            import transformers  # noqa: F401
        except ImportError:
            pass
        else:
            raise SystemExit("the blocker does not work")

        import gymnasium as gym
        import torch

        torch.set_num_threads(1)
        import tpo_gym  # noqa: F401
        import tpo_agents.policies  # noqa: F401
        from tpo_agents import DG, GRPO, PG, TPO, CriticFreePPO, GroupPG  # noqa: F401
        import zoo.paper.reproduce, zoo.paper.tabular, zoo.paper.mnist, zoo.paper.token.study  # noqa: F401, E401

        TPO("MlpPolicy", gym.make("MultiContextBandit-v0", n_contexts=4), seed=0).learn(200)
        TPO("MlpPolicy", gym.make("MNISTBandit-v0", dataset="digits"), batch_size=10).learn(20)
        for substrate in ("ours", "paper"):
            env = gym.make("TokenReversal-terminal-v0", length=2)
            TPO("TransformerPolicy", env, batch_size=2, n_candidates=2,
                policy_kwargs=dict(substrate=substrate)).learn(8)
        loaded = sorted({{m.split(".")[0] for m in sys.modules}} & set(BLOCKED))
        print("LOADED", loaded)
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "LOADED []" in proc.stdout, proc.stdout
