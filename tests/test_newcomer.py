"""What a newcomer sees (issue 31): a missing optional extra is named with its install
command, the declared dependency ranges hold the tested versions, zoo.train prints one true
line per fact, a save says once what it cannot keep, a time-limited tuning run writes its
report, and a killed model build leaves nothing that blocks or stays."""

from __future__ import annotations

import contextlib
import csv
import importlib.metadata
import io
import os
import re
import signal
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

from tpo_gym.extras import EXTRAS, MissingExtraError, needs_extra, require

REPO = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------ missing extras


def _without(tmp_path: Path, modules: list[str]) -> dict[str, str]:
    """An environment in which ``modules`` cannot be imported, as on an install without
    them: a package of each name, first on the path, raises ModuleNotFoundError."""
    shadow = tmp_path / "shadow"
    for name in modules:
        (shadow / name).mkdir(parents=True)
        (shadow / name / "__init__.py").write_text(
            f"raise ModuleNotFoundError(\"No module named '{name}'\", name={name!r})\n"
        )
    return os.environ | {"PYTHONPATH": str(shadow), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )


def test_extras_table_matches_pyproject():
    extras = _pyproject()["project"]["optional-dependencies"]
    for extra, modules in EXTRAS.items():
        declared = {_name(req) for req in extras[extra]}
        assert set(map(_normalize, modules.values())) == declared, extra


def test_needs_extra_names_the_extra_and_passes_other_errors():
    with pytest.raises(MissingExtraError) as info:
        with needs_extra("zoo", "outer"), needs_extra("zoo", "inner"):
            raise ModuleNotFoundError("No module named 'yaml.cyaml'", name="yaml.cyaml")
    message = str(info.value)
    assert message.startswith('outer needs the "zoo" extra (rl-zoo3, optuna and pyyaml)')
    assert "module 'yaml' is not installed" in message
    assert 'pip install "tpo[zoo]"' in message and 'pip install -e ".[zoo]"' in message
    assert isinstance(info.value, ModuleNotFoundError) and info.value.name == "yaml.cyaml"
    with pytest.raises(ModuleNotFoundError) as other, needs_extra("zoo", "x"):
        raise ModuleNotFoundError("No module named 'somethingelse'", name="somethingelse")
    assert not isinstance(other.value, MissingExtraError)
    require("zoo", "x", "yaml")  # installed here: no error
    with pytest.raises(ValueError, match="unknown extra"), needs_extra("nope", "x"):
        pass


@pytest.mark.parametrize("missing", ["yaml", "rl_zoo3", "optuna"])
def test_zoo_train_help_without_the_zoo_extra(tmp_path, missing):
    """``python -m zoo.train --help`` on a core install: one line saying what to install."""
    proc = _run(_without(tmp_path, [missing]), "-m", "zoo.train", "--help")
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith('zoo.train: error: zoo.rlzoo (python -m zoo.train, zoo.enjoy) needs the "zoo" extra')
    assert f"module {missing!r} is not installed" in proc.stderr
    assert 'pip install "tpo[zoo]"' in proc.stderr and 'pip install -e ".[zoo]"' in proc.stderr


def test_zoo_enjoy_and_console_script_without_the_zoo_extra(tmp_path):
    env = _without(tmp_path, ["yaml"])
    proc = _run(env, "-m", "zoo.enjoy", "--help")
    assert proc.returncode == 1 and proc.stderr.startswith("zoo.enjoy: error: ")
    assert 'pip install "tpo[zoo]"' in proc.stderr and "Traceback" not in proc.stderr
    code = "import sys; from zoo.entry_points import train; sys.argv = ['tpo-zoo-train', '--help']; train()"
    proc = _run(env, "-c", code)
    assert proc.returncode == 1 and proc.stderr.startswith("tpo-zoo-train: error: ")
    assert 'pip install "tpo[zoo]"' in proc.stderr and "Traceback" not in proc.stderr


LLM_CHECKS = """
import gymnasium as gym
import pytest

import tpo_gym
from tpo_agents import TPO
from tpo_gym.extras import MissingExtraError

def check(what, missing, call):
    with pytest.raises(MissingExtraError) as info:
        call()
    message = str(info.value)
    assert message.startswith(what + ' needs the "llm" extra'), message
    assert f"module {missing!r} is not installed" in message, message
    assert 'pip install "tpo[llm]"' in message, message
    print("ok", what)

env = gym.make("PromptList-v0", pairs=[("1+2=", lambda a: True)])
check("CausalLMPolicy", "transformers",
      lambda: TPO("CausalLMPolicy", env, policy_kwargs={"model": MODEL_DIR}))
check("CausalLMPolicy", "huggingface_hub",
      lambda: TPO("CausalLMPolicy", env, policy_kwargs={"model": "some/model-id"}))
check("tpo_agents.trl", "trl", lambda: __import__("tpo_agents.trl"))
from zoo.paper.llm.tiny import build_tiny_causal_lm
check("zoo.paper.llm.tiny.build_tiny_causal_lm", "transformers", build_tiny_causal_lm)
from tpo_agents.llm.loading import load_tokenizer
check("tpo_agents.llm.loading.load_tokenizer", "transformers", lambda: load_tokenizer(MODEL_DIR, None, None))
check("Reasoning Gym tasks (ReasoningGym-v0)", "reasoning_gym",
      lambda: gym.make("ReasoningGym-v0", task="leg_counting", size=2))
check(f"reading {PARQUET} (or convert it to JSONL)", "pyarrow", lambda: gym.make("GSM8K-v0", path=PARQUET))
from zoo.paper.llm.pretrain import pretrained_lm
check("the small pretrained models (zoo.paper.llm.pretrain, python -m zoo.pretrain_lm)",
      "transformers", lambda: pretrained_lm(cache_dir=MODEL_DIR))
"""


def test_llm_parts_without_the_llm_extra(tmp_path):
    """CausalLMPolicy, tpo_agents.llm / .trl, the tiny and pretrained models, Reasoning Gym
    and GSM8K parquet on an install without the llm extra: the error names ``tpo[llm]``."""
    llm = ["transformers", "tokenizers", "peft", "trl", "huggingface_hub", "reasoning_gym", "pyarrow", "datasets"]
    model_dir, parquet = tmp_path / "model", tmp_path / "gsm8k.parquet"
    model_dir.mkdir()
    parquet.write_bytes(b"PAR1")
    code = f"MODEL_DIR, PARQUET = {str(model_dir)!r}, {str(parquet)!r}\n" + LLM_CHECKS
    proc = _run(_without(tmp_path, llm), "-c", code)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("ok ") == 8, proc.stdout


def test_jax_baseline_without_the_bench_extra(tmp_path):
    code = "from benchmarks.jax_baseline import measure; measure(1, 1)"
    proc = _run(_without(tmp_path, ["jax", "optax"]), "-c", code)
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("tpo_gym.extras.MissingExtraError: the JAX baseline")
    assert "--no-jax-baseline" in last and 'pip install "tpo[bench]"' in last


# ------------------------------------------------------------- tested version ranges


def _pyproject() -> dict:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _name(requirement: str) -> str:
    return _normalize(re.match(r"[A-Za-z0-9._-]+", requirement).group(0))


# Libraries whose private methods we override (see the comments in pyproject.toml): their
# range must stop before the next minor version, the one the suite has not run on.
PRIVATE_API = ("stable-baselines3", "rl-zoo3", "trl")


def test_installed_versions_are_inside_the_declared_ranges():
    try:
        from packaging.requirements import Requirement
    except ModuleNotFoundError:
        from pip._vendor.packaging.requirements import Requirement
    project = _pyproject()["project"]
    requirements = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        requirements += [r for r in extra if not r.startswith("tpo[")]
    checked, bounded = [], set()
    for text in requirements:
        req = Requirement(text)
        if any(spec.operator == "<" for spec in req.specifier):
            bounded.add(_normalize(req.name))
        try:
            version = importlib.metadata.version(req.name)
        except importlib.metadata.PackageNotFoundError:
            continue  # an extra that is not installed here
        assert req.specifier.contains(version, prereleases=True), (
            f"installed {req.name} {version} is outside pyproject.toml's {text!r}"
        )
        checked.append(req.name)
    assert {"stable-baselines3", "torch", "gymnasium"} <= {_normalize(n) for n in checked}
    assert set(PRIVATE_API) <= bounded, f"no upper bound for {set(PRIVATE_API) - bounded}"


# ------------------------------------------------------------ zoo.train's messages


def _zoo_train(*argv: str) -> tuple[object, str]:
    from zoo.rlzoo import train as zoo_train

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        manager = zoo_train.main(list(argv))
    return manager, out.getvalue()


def test_zoo_train_prints_the_number_of_envs_once(tmp_path, one_thread):
    _, out = _zoo_train(
        "--algo", "tpo", "--env", "TokenReversal-terminal-v0", "--env-kwargs", "length:2",
        "-params", "batch_size:4", "-n", "64", "--seed", "0", "-f", str(tmp_path), "--eval-freq", "-1",
    )  # fmt: skip
    lines = [line for line in out.splitlines() if re.match(r"Using \d+ environments", line)]
    assert lines == ["Using 32 environments (the agent's own batch layout)"]  # 4 prompts x K = 8


def test_zoo_train_help_lists_vec_env_choices_once(capsys):
    from zoo.rlzoo import train as zoo_train

    with pytest.raises(SystemExit):
        zoo_train.main(["--help"])
    out = capsys.readouterr().out
    assert out.count("--vec-env") == 2  # the usage line and the option's entry
    assert out.count("--vec-env {auto,native,dummy,subproc}") == 2
    assert "{dummy,subproc}" not in out and "--timeout SECONDS" in out


def test_saving_with_monitor_log_files_keeps_the_env_snapshot(tmp_path, one_thread):
    """A Monitor writing a log file (as rl-zoo3 and make_vec_env(monitor_dir=...) set up) no
    longer costs the checkpoint its env snapshot, open or closed; a resume keeps logging."""
    from stable_baselines3.common.env_util import make_vec_env

    from tpo_agents import TPO

    env = make_vec_env("CartPole-v1", n_envs=8, seed=0, monitor_dir=str(tmp_path / "a"))
    model = TPO("MlpPolicy", env, batch_size=1, n_candidates=8, seed=0).learn(160)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="the checkpoint holds no env snapshot")
        model.save(tmp_path / "open")
        env.close()  # rl-zoo3 closes the env before it saves
        model.save(tmp_path / "closed")
    env2 = make_vec_env("CartPole-v1", n_envs=8, seed=1, monitor_dir=str(tmp_path / "b"))
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="force_reset=False: the env's saved state cannot")
        resumed = TPO.load(tmp_path / "open", env2, force_reset=False)
    resumed.learn(160, reset_num_timesteps=False)
    env2.close()
    rows = (tmp_path / "b" / "0.monitor.csv").read_text().splitlines()
    assert len(rows) > 2  # header lines, then the resumed run's episodes in the live env's file


def test_tuning_stopped_by_its_time_limit_writes_the_report(tmp_path, one_thread):
    logs = tmp_path / "logs"
    _, out = _zoo_train(
        "--algo", "tpo", "--env", "SymmetricBandit-v0", "--env-kwargs", "n_actions:10",
        "-optimize", "--n-trials", "1000", "--timeout", "0.1", "-n", "200", "--n-startup-trials", "1",
        "--pruner", "none", "--eval-episodes", "2", "--no-optim-plots", "--seed", "0", "-f", str(logs),
    )  # fmt: skip
    assert "zoo.train: --timeout 0.1 s reached: no new trial starts" in out
    reports = list((logs / "tpo").glob("report_SymmetricBandit-v0_*.csv"))
    assert len(reports) == 1 and "Writing report to" in out
    with open(reports[0]) as f:
        states = [row["state"] for row in csv.DictReader(f)]
    assert 1 <= len(states) < 1000 and set(states) == {"COMPLETE"}  # the running trial finished


def test_timeout_needs_optimize():
    from zoo.rlzoo import UsageError
    from zoo.rlzoo.train import check_timeout

    with pytest.raises(UsageError, match="--timeout applies to tuning: add -optimize"):
        check_timeout(["--algo", "tpo", "--timeout", "5"])
    with pytest.raises(UsageError, match="--timeout: expected a number > 0"):
        check_timeout(["-optimize", "--timeout", "0"])
    assert check_timeout(["--optimize", "--timeout=2.5"]) == (["--optimize"], 2.5)


@pytest.mark.slow
def test_sigterm_stops_tuning_with_the_report(tmp_path):
    """SIGTERM (``timeout``, a scheduler's time limit) stops a study like Ctrl-C: report written."""
    logs = tmp_path / "logs"
    cmd = [
        sys.executable, "-m", "zoo.train", "--algo", "tpo", "--env", "SymmetricBandit-v0",
        "--env-kwargs", "n_actions:10", "-optimize", "--n-trials", "1000", "-n", "200",
        "--n-startup-trials", "1", "--pruner", "none", "--eval-episodes", "2", "--no-optim-plots",
        "--seed", "0", "-f", str(logs), "--num-threads", "1",
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=os.environ | {"OMP_NUM_THREADS": "1"})
    out = []
    for line in proc.stdout:
        out.append(line)
        if "Trial 0 finished" in line:
            proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=300) == 0, "".join(out)[-3000:]
    text = "".join(out)
    assert "zoo.train: SIGTERM: stopping as Ctrl-C does" in text and "Writing report to" in text
    assert len(list((logs / "tpo").glob("report_SymmetricBandit-v0_*.csv"))) == 1


# ------------------------------------------------------------------ killed model build


KILLED_BUILD = """
import time
from zoo.paper.llm import pretrain

def slow(config, out, log=None):
    (out / "config.json").write_text("{}")
    print("building", flush=True)
    time.sleep(600)

pretrain.pretrain_causal_lm = slow
pretrain.pretrained_lm("arithmetic", cache_dir=CACHE, log=None)
"""


@pytest.mark.timeout(300)
def test_a_killed_model_build_neither_blocks_nor_stays(tmp_path, monkeypatch):
    from zoo.paper.llm import pretrain

    cache = tmp_path / "cache"
    code = f"CACHE = {str(cache)!r}\n" + textwrap.dedent(KILLED_BUILD)
    child = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, text=True,
                             env=os.environ | {"OMP_NUM_THREADS": "1"})
    assert child.stdout.readline().strip() == "building"
    child.kill()
    child.wait()
    left = sorted(p.name for p in cache.iterdir())
    assert [n for n in left if n.endswith(".lock")] and [n for n in left if n.endswith(".tmp")], left

    def build(config, out, log=None):
        (out / "sft_report.json").write_text("{}")

    monkeypatch.setattr(pretrain, "pretrain_causal_lm", build)
    logged = []
    folder = pretrain.pretrained_lm("arithmetic", cache_dir=cache, log=logged.append)
    assert [p.name for p in cache.iterdir()] == [folder.name]  # no lock, no temporary folder
    assert logged == [f"removed 1 temporary folder(s) left by an interrupted build of {folder.name}"]
