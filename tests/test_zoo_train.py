"""Training and tuning through rl-zoo3 with our algorithms (zoo.rlzoo.train, zoo.rlzoo.enjoy)."""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import subprocess
import sys
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import optuna
import pytest
import torch

import tpo_gym  # noqa: F401
from tpo_agents import DG, GRPO, TPO, CriticFreePPO
from zoo.rlzoo import UsageError, ZooExperimentManager, installed, register
from zoo.rlzoo import enjoy as zoo_enjoy
from zoo.rlzoo import train as zoo_train
from zoo.rlzoo.hyperparams import HYPERPARAMS_DIR, HyperparamsError, load_file
from zoo.rlzoo.samplers import SAMPLERS
from zoo.rlzoo.vec_env import NativeVecEnv

REPO = Path(__file__).resolve().parents[1]
HYPERPARAM_FILES = sorted(HYPERPARAMS_DIR.glob("*.yml"))
SUITE = [
    "SymmetricBandit-v0",
    "MultiContextBandit-v0",
    "MNISTBandit-v0",
    "TokenReversal-v0",
    "TokenReversal-bag-v0",
    "TokenReversal-sequential-v0",
    "TokenReversal-terminal-v0",
]


pytestmark = pytest.mark.usefixtures("one_thread")  # one torch thread (conftest): rl-zoo3's --num-threads sets it process-wide


def train(*argv: str) -> tuple[ZooExperimentManager, str]:
    """zoo.rlzoo.train in this process; returns the run's manager and its stdout."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        manager = zoo_train.main(list(argv))
    return manager, out.getvalue()


def run_folder(manager: ZooExperimentManager) -> Path:
    return Path(manager.save_path)


# ----------------------------------------------------------------------- registration


def test_algorithms_and_samplers_registered_in_every_rl_zoo3_module():
    register()
    import rl_zoo3
    import rl_zoo3.enjoy
    import rl_zoo3.exp_manager
    import rl_zoo3.hyperparams_opt
    import rl_zoo3.train
    import rl_zoo3.utils

    ours = {"tpo": TPO, "grpo": GRPO, "dg": DG, "cfppo": CriticFreePPO}
    for module in (rl_zoo3, rl_zoo3.utils, rl_zoo3.train, rl_zoo3.exp_manager, rl_zoo3.enjoy):
        assert module.ALGOS is rl_zoo3.utils.ALGOS, module.__name__
        for key, cls in ours.items():
            assert module.ALGOS[key] is cls
    assert "pg" in rl_zoo3.utils.ALGOS
    assert rl_zoo3.exp_manager.HYPERPARAMS_SAMPLER is rl_zoo3.hyperparams_opt.HYPERPARAMS_SAMPLER
    for key in ("tpo", "grpo", "dg", "pg", "cfppo"):
        assert rl_zoo3.exp_manager.HYPERPARAMS_SAMPLER[key] is SAMPLERS[key]
        assert key in rl_zoo3.exp_manager.HYPERPARAMS_CONVERTER
    # rl-zoo3's parsers are built when train()/enjoy() run: our keys are valid choices then.
    with installed():
        assert rl_zoo3.train.ExperimentManager is ZooExperimentManager
        assert rl_zoo3.enjoy.ExperimentManager is ZooExperimentManager
    assert rl_zoo3.train.ExperimentManager is rl_zoo3.exp_manager.ExperimentManager


def test_every_suite_env_has_a_section_in_every_file():
    for path in HYPERPARAM_FILES:
        sections = set(load_file(path))
        assert set(SUITE) <= sections, (path.name, set(SUITE) - sections)
    assert {"CartPole-v1", "Acrobot-v1"} <= set(load_file(HYPERPARAMS_DIR / "tpo.yml"))
    assert {p.stem for p in HYPERPARAM_FILES} >= {"tpo", "grpo", "dg", "pg", "ppo"}


def test_files_hold_the_papers_settings():
    tpo = load_file(HYPERPARAMS_DIR / "tpo.yml")
    terminal = tpo["TokenReversal-terminal-v0"]
    assert (terminal["n_candidates"], terminal["batch_size"], terminal["n_epochs"]) == (8, 100, 4)
    assert (terminal["eta"], terminal["learning_rate"], terminal["policy"]) == (1.0, 1e-3, "TransformerPolicy")
    assert terminal["env_kwargs"] == {"length": 10, "vocab_size": 2, "target": "reverse_copy"}
    assert terminal["n_timesteps"] == 2000 * 100 * 8 * 10  # 2000 iterations of B * K * H steps
    assert tpo["TokenReversal-bag-v0"]["n_timesteps"] == 1000 * 100 * 10  # 1000 iterations of B * H
    grpo = load_file(HYPERPARAMS_DIR / "grpo.yml")["TokenReversal-terminal-v0"]
    assert (grpo["clip_range"], grpo["beta"], grpo["n_candidates"], grpo["n_epochs"]) == (0.2, 0.04, 8, 4)
    for env_id in SUITE:
        assert load_file(HYPERPARAMS_DIR / "dg.yml")[env_id]["n_epochs"] == 1
        assert load_file(HYPERPARAMS_DIR / "dg.yml")[env_id]["dg_eta"] == 1.0
    mnist = tpo["MNISTBandit-v0"]
    assert "net_arch=[50, 50]" in mnist["policy_kwargs"] and mnist["learning_rate"] == 1e-3
    ppo = load_file(HYPERPARAMS_DIR / "ppo.yml")
    assert ppo["TokenReversal-v0"]["policy"] == "tpo_agents.policies.TransformerActorCriticPolicy"
    assert ppo["SymmetricBandit-v0"]["policy"] == "MlpPolicy"
    assert (ppo["TokenReversal-v0"]["clip_range"], ppo["TokenReversal-v0"]["n_epochs"]) == (0.2, 4)


# --------------------------------------------------------- every section builds an agent


def _sections():
    return [(path, env_id) for path in HYPERPARAM_FILES for env_id in load_file(path)]


def _manager(algo: str, env_id: str, log_folder: Path, env_kwargs=None, hyperparams=None, config=None):
    args = argparse.Namespace(algo=algo, env=env_id, vec_env="dummy")
    return ZooExperimentManager(
        args,
        algo,
        env_id,
        str(log_folder),
        eval_freq=-1,
        hyperparams=hyperparams,
        env_kwargs=env_kwargs,
        verbose=0,
        seed=0,
        config=config,
    )


@pytest.mark.slow
@pytest.mark.parametrize("path,env_id", _sections(), ids=lambda x: getattr(x, "name", x))
def test_every_section_builds_an_agent(path, env_id, tmp_path):
    """rl-zoo3's own setup (our manager) builds each section's agent on its env."""
    section = load_file(path)[env_id]
    env_kwargs = None
    if env_id == "MNISTBandit-v0":  # the MNIST files are not shipped; same shapes of network
        env_kwargs = {"dataset": "digits"}
    with installed():
        manager = _manager(path.stem, env_id, tmp_path, env_kwargs=env_kwargs)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model, saved = manager.setup_experiment()
    try:
        from rl_zoo3.utils import ALGOS

        assert type(model) is ALGOS[path.stem]
        for key in ("n_epochs", "batch_size", "n_candidates", "eta", "beta", "dg_eta", "gamma", "n_steps"):
            if key in section:
                assert getattr(model, key) == section[key], key
        if "n_envs" in section:
            assert model.n_envs == section["n_envs"]
        else:  # sized like the agent sizes its own env
            direct_env = gym.make(env_id, **(env_kwargs or section.get("env_kwargs") or {}))
            direct = ALGOS[path.stem](env=direct_env, _init_setup_model=False, **_agent_kwargs(section))
            assert model.n_envs == direct.n_envs
            direct.env.close()
        if env_id in SUITE:
            assert isinstance(model.env, NativeVecEnv)
        assert saved["n_timesteps"] == section["n_timesteps"]
    finally:
        model.env.close()


def _agent_kwargs(section: dict) -> dict:
    from zoo.rlzoo.hyperparams import evaluate_policy_kwargs

    kwargs = {k: v for k, v in section.items() if k not in ("n_timesteps", "n_envs", "env_kwargs")}
    if "policy_kwargs" in kwargs:
        kwargs["policy_kwargs"] = evaluate_policy_kwargs(kwargs["policy_kwargs"], "test")
    return kwargs


# ------------------------------------------------------------------------ end to end


def test_train_and_enjoy_tpo_on_symmetric_bandit(tmp_path):
    """Tiny run: rl-zoo3 layout, loadable model, tensorboard events, enjoy, and the same
    parameters as calling the agent directly with the same seed and budget."""
    logs, tb = tmp_path / "logs", tmp_path / "tb"
    manager, out = train(
        "--algo", "tpo", "--env", "SymmetricBandit-v0", "--env-kwargs", "n_actions:10",
        "-n", "500", "--seed", "3", "-tb", str(tb), "-f", str(logs), "--eval-freq", "200",
        "--eval-episodes", "3",
    )  # fmt: skip
    run = run_folder(manager)
    assert run == logs / "tpo" / "SymmetricBandit-v0_1"
    for name in ("SymmetricBandit-v0.zip", "0.monitor.csv", "evaluations.npz", "best_model.zip"):
        assert (run / name).is_file(), name
    for name in ("config.yml", "args.yml", "command.txt"):
        assert (run / "SymmetricBandit-v0" / name).is_file(), name
    assert list((tb / "SymmetricBandit-v0" / "TPO_1").glob("events.out.tfevents.*"))
    assert "Using 100 environments (the agent's own batch layout)" in out
    with open(run / "0.monitor.csv") as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    assert len(rows) == 500  # one row per one-step episode of every sub-env

    model = TPO.load(run / "SymmetricBandit-v0.zip")
    assert (model.num_timesteps, model.batch_size, model.learning_rate) == (500, 100, 0.1)
    direct = TPO(
        "MlpPolicy", gym.make("SymmetricBandit-v0", n_actions=10), seed=3, batch_size=100,
        n_epochs=1, eta=1.0, learning_rate=0.1, policy_kwargs={"net_arch": []},
    ).learn(500)  # fmt: skip
    for a, b in zip(model.policy.state_dict().values(), direct.policy.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        zoo_enjoy.main(["--algo", "tpo", "--env", "SymmetricBandit-v0", "-f", str(logs), "-n", "4"])
    text = out.getvalue()
    assert "adding --no-render" in text and text.count("Episode Reward:") == 4
    assert "Mean reward:" in text


@pytest.mark.slow
def test_train_and_enjoy_tpo_on_token_reversal_terminal_cli(tmp_path):
    """``python -m zoo.train`` then zoo.rlzoo.enjoy on TokenReversal-terminal-v0, H = 4."""
    logs, tb = tmp_path / "logs", tmp_path / "tb"
    cmd = [
        sys.executable, "-m", "zoo.train", "--algo", "tpo", "--env", "TokenReversal-terminal-v0",
        "--env-kwargs", "length:4", "-params", "batch_size:10", "-n", "640", "--seed", "0",
        "-tb", str(tb), "-f", str(logs), "--eval-freq", "320", "--eval-episodes", "2",
        "--num-threads", "1",
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Using 80 environments" in proc.stdout  # batch_size 10 x K = 8 completions
    run = logs / "tpo" / "TokenReversal-terminal-v0_1"
    model = TPO.load(run / "TokenReversal-terminal-v0.zip")
    assert model.num_timesteps == 640 and model.n_envs == 80 and model.batch_size == 10
    assert type(model.policy).__name__ == "TransformerPolicy"
    assert model.observation_space.shape == (8,)  # prompt + completion, 2H
    assert list((tb / "TokenReversal-terminal-v0" / "TPO_1").glob("events.out.tfevents.*"))
    assert np.load(run / "evaluations.npz")["timesteps"].tolist() == [320, 640]
    vec = gym.make_vec("TokenReversal-terminal-v0", num_envs=3, length=4)
    obs, _ = vec.reset(seed=0)
    actions, _ = model.predict(obs, deterministic=True)
    assert actions.shape == (3,)

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        zoo_enjoy.main(["--algo", "tpo", "--env", "TokenReversal-terminal-v0", "-f", str(logs), "-n", "8"])
    assert out.getvalue().count("Episode Length 4") == 2  # two 4-token episodes


@pytest.mark.parametrize("algo", ["grpo", "dg", "pg", "cfppo", "ppo"])
def test_every_algorithm_trains_saves_and_loads(algo, tmp_path):
    from rl_zoo3.utils import ALGOS

    manager, _ = train(
        "--algo", algo, "--env", "MultiContextBandit-v0", "--env-kwargs", "n_contexts:5",
        "-n", "200", "--seed", "0", "-f", str(tmp_path), "--eval-freq", "-1",
    )  # fmt: skip
    model = ALGOS[algo].load(run_folder(manager) / "MultiContextBandit-v0.zip")
    assert model.num_timesteps == 200 and model.n_envs == 100
    assert model.predict(np.array([0, 4]), deterministic=True)[0].shape == (2,)


def test_explicit_n_envs_must_fit_sequence_groups(tmp_path):
    argv = ["--algo", "tpo", "--env", "TokenReversal-terminal-v0", "--env-kwargs", "length:2"]
    with pytest.raises(HyperparamsError, match="n_envs = 12 must be a multiple of n_candidates = 8"):
        train(*argv, "-params", "n_envs:12", "-n", "10", "-f", str(tmp_path))


@pytest.mark.slow
def test_optimize_two_trials_reports_best_parameters(tmp_path):
    logs = tmp_path / "logs"
    _, out = train(
        "--algo", "tpo", "--env", "SymmetricBandit-v0", "--env-kwargs", "n_actions:10",
        "-optimize", "--n-trials", "2", "-n", "200", "--n-startup-trials", "1", "--pruner", "none",
        "--eval-episodes", "2", "--no-optim-plots", "--seed", "0", "-f", str(logs),
    )  # fmt: skip
    assert "Number of finished trials:  2" in out
    best = out.split("Best trial:")[1]
    for name in ("eta", "n_candidates", "n_epochs", "learning_rate", "batch_size"):
        assert f"    {name}: " in best.split("User Attributes")[0], name
    reports = list((logs / "tpo").glob("report_SymmetricBandit-v0_2-trials-200-tpe-none_*.csv"))
    assert len(reports) == 1
    with open(reports[0]) as f:
        trials = list(csv.DictReader(f))
    assert len(trials) == 2
    for trial in trials:
        assert trial["state"] == "COMPLETE"
        assert 0.0 <= float(trial["value"]) <= 1.0  # an evaluation ran (mean reward of a bandit)
        assert int(trial["params_batch_size"]) in (25, 50, 100, 200)


@pytest.mark.parametrize("algo", sorted(SAMPLERS))
def test_samplers_give_constructor_arguments(algo):
    register()
    from rl_zoo3.utils import ALGOS

    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    trial = study.ask()
    sampled = SAMPLERS[algo](trial, 0, 1, {})
    assert sampled and set(sampled) == set(trial.params)
    again = SAMPLERS[algo](trial, 0, 1, {})
    assert again == sampled  # re-suggesting in one trial gives the same values
    model = ALGOS[algo]("MlpPolicy", gym.make("SymmetricBandit-v0", n_actions=5), **sampled)
    for key, value in sampled.items():
        assert getattr(model, key) == value
    expected = {
        "tpo": {"eta", "n_candidates", "n_epochs", "learning_rate", "batch_size"},
        "grpo": {"clip_range", "beta", "n_candidates", "n_epochs"},
        "dg": {"dg_eta", "learning_rate"},
    }
    if algo in expected:
        assert set(sampled) == expected[algo]


# ------------------------------------------------------------------------- vec env


def test_native_vec_env_for_make_vec_env(tmp_path):
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import DummyVecEnv

    spec = gym.spec("TokenReversal-bag-v0")
    vec = make_vec_env(
        lambda **kw: spec.make(**kw), n_envs=6, seed=1, env_kwargs={"length": 3},
        monitor_dir=str(tmp_path), vec_env_cls=NativeVecEnv,
    )  # fmt: skip
    assert isinstance(vec, NativeVecEnv) and vec.num_envs == 6
    assert vec.get_attr("prompt_length", [0]) == [3]
    obs = vec.reset()
    assert obs.shape == (6, 6)
    assert vec.score_candidates(np.zeros((6, 4), dtype=np.int64)).shape == (6, 4)
    for _ in range(3):
        obs, rewards, dones, infos = vec.step(np.zeros(6, dtype=np.int64))
    assert dones.all() and all("episode" in info for info in infos)
    vec.close()
    lines = (tmp_path / "0.monitor.csv").read_text().splitlines()
    assert '"env_id": "TokenReversal-bag-v0"' in lines[0] and len(lines) == 2 + 6

    cartpole = gym.spec("CartPole-v1")
    with pytest.warns(UserWarning, match="no native vector env"):
        fallback = make_vec_env(lambda **kw: cartpole.make(**kw), n_envs=2, vec_env_cls=NativeVecEnv)
    assert isinstance(fallback, DummyVecEnv)


# ------------------------------------------------------------------------ bad input


def _yaml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "custom.yml"
    path.write_text(text)
    return path


def _bandit(*extra: str, tmp_path: Path) -> list[str]:
    return ["--algo", "tpo", "--env", "SymmetricBandit-v0", "-n", "100", "-f", str(tmp_path / "logs"), *extra]


def test_unknown_algorithm_and_env_id(tmp_path):
    with pytest.raises(UsageError, match="unknown algorithm 'tpoo'; expected one of .*'tpo'"):
        zoo_train.main(["--algo", "tpoo", "--env", "SymmetricBandit-v0"])
    with pytest.raises(UsageError, match="unknown env id 'TokenReversal-termnal-v0'.*TokenReversal-terminal-v0"):
        zoo_train.main(["--algo", "tpo", "--env", "TokenReversal-termnal-v0"])
    with pytest.raises(UsageError, match="unknown algorithm 'nope'"):
        zoo_enjoy.main(["--algo", "nope", "--env", "SymmetricBandit-v0"])
    with pytest.raises(UsageError, match="--vec-env must be one of"):
        zoo_train.main(["--algo", "tpo", "--env", "SymmetricBandit-v0", "--vec-env", "fast"])
    assert not (tmp_path / "logs").exists()


def test_a_ppo_hyperparameter_in_a_file_says_what_plays_its_part_here(tmp_path):
    path = _yaml(tmp_path, "SymmetricBandit-v0:\n  n_timesteps: 100\n  policy: MlpPolicy\n  ent_coef: 0.01\n")
    with pytest.raises(HyperparamsError, match=r"unknown hyperparameter 'ent_coef' for TPO \(ent_coef is SB3's: there is no entropy bonus"):
        train(*_bandit("-conf", str(path), tmp_path=tmp_path))


def test_unknown_hyperparameter_names_file_section_and_key(tmp_path):
    path = _yaml(tmp_path, "SymmetricBandit-v0:\n  n_timesteps: 100\n  policy: MlpPolicy\n  etaa: 1.0\n")
    with pytest.raises(HyperparamsError) as err:
        train(*_bandit("-conf", str(path), tmp_path=tmp_path))
    message = str(err.value)
    assert str(path) in message and "[SymmetricBandit-v0]" in message and "'etaa'" in message
    assert "unknown hyperparameter" in message and "'eta'" in message  # the allowed ones are listed
    assert not (tmp_path / "logs").exists()  # nothing was created

    with pytest.raises(HyperparamsError, match=r"-params \['etaa'\] over .*tpo.yml \[SymmetricBandit-v0\].*'etaa'"):
        train(*_bandit("-params", "etaa:2", tmp_path=tmp_path))


@pytest.mark.parametrize(
    "text,match",
    [
        ("SymmetricBandit-v0:\n  policy: [MlpPolicy\n  n_timesteps: 100\n", r"not valid YAML at line \d+, column \d+"),
        ("- just\n- a list\n", "must be a mapping of env id -> hyperparameters; got list"),
        ("SymmetricBandit-v0: 5\n", "section 'SymmetricBandit-v0' must be a mapping"),
        ("CartPole-v1:\n  policy: MlpPolicy\n  n_timesteps: 10\n", "no section for 'SymmetricBandit-v0'"),
        ("SymmetricBandit-v0:\n  n_timesteps: 100\n  policy: Mlp\n", "unknown policy 'Mlp' for TPO"),
        ("SymmetricBandit-v0:\n  policy: MlpPolicy\n", "missing required key 'n_timesteps'"),
        ("SymmetricBandit-v0:\n  n_timesteps: 100\n  policy: MlpPolicy\n  seed: 3\n", "key 'seed' cannot be set"),
        (
            "SymmetricBandit-v0:\n  n_timesteps: 100\n  policy: MlpPolicy\n  policy_kwargs: 'dict(width=3)'\n",
            "unknown policy_kwargs key 'width' for MlpPolicy",
        ),
        (
            "SymmetricBandit-v0:\n  n_timesteps: 100\n  policy: MlpPolicy\n  policy_kwargs: 'dict(net_arch=[3'\n",
            "policy_kwargs 'dict\\(net_arch=\\[3' cannot be evaluated",
        ),
    ],
)
def test_bad_hyperparameter_files(tmp_path, text, match):
    path = _yaml(tmp_path, text)
    with pytest.raises(HyperparamsError, match=match) as err:
        train(*_bandit("-conf", str(path), tmp_path=tmp_path))
    assert str(path) in str(err.value)


def test_sequence_groups_on_token_envs_need_the_native_vec_env(tmp_path):
    argv = ["--algo", "tpo", "--env", "TokenReversal-terminal-v0", "--env-kwargs", "length:2"]
    argv += ["-n", "10", "-f", str(tmp_path), "--vec-env", "dummy"]
    with pytest.raises(UsageError, match="use --vec-env native"):
        train(*argv)


@pytest.mark.slow
def test_cli_reports_errors_without_a_traceback(tmp_path):
    path = _yaml(tmp_path, "SymmetricBandit-v0:\n  n_timesteps: 100\n  policy: MlpPolicy\n  etaa: 1.0\n")
    cmd = [sys.executable, "-m", "zoo.train", *_bandit("-conf", str(path), tmp_path=tmp_path)]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert f"zoo.train: error: {path} [SymmetricBandit-v0]: unknown hyperparameter 'etaa'" in proc.stderr
