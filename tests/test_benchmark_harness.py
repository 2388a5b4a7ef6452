"""benchmarks.harness: two tiny runs in one worker, their cache, summary and JSON/MD/PNG."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks import harness
from benchmarks.harness import EVAL_SEED_OFFSET, Run
from zoo.jobs.sweep import code_version

BUDGET, EVERY = 128, 64  # PPO with 64-step rollouts: evaluations at 0, 64, 128


def build(run: Run):
    import gymnasium as gym
    from stable_baselines3 import PPO
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv

    eval_env = DummyVecEnv([lambda: Monitor(gym.make(run.env))])
    eval_env.seed(run.seed + EVAL_SEED_OFFSET)
    return PPO("MlpPolicy", run.env, seed=run.seed, **run.hyperparameters), eval_env


def job(run: Run, progress=None) -> dict:
    record = harness.train_run(run, build, progress, extra=lambda model: {"n_steps": model.n_steps})
    return {"spec": run.spec(), "code_version": code_version(), **record}


def test_two_runs_are_trained_cached_summarized_and_written(tmp_path):
    settings = {"n_steps": 64, "batch_size": 32, "n_epochs": 1}
    runs = [Run("tiny", "CartPole-v1", "ppo", seed, BUDGET, EVERY, 2, settings) for seed in (0, 1)]
    assert runs[0].name == "CartPole-v1__ppo__seed0" and runs[0].grid == [0, 64, 128]
    cache = tmp_path / "cache"
    info: dict = {}
    records = harness.run_all(runs, job, cache, workers=1, quiet=True, desc="tiny", info=info)
    assert list(records) == [r.name for r in runs] and info["jobs_run"] == 2
    for run in runs:
        record = records[run.name]
        assert len(record["returns"]) == 3 and all(1 <= r <= 500 for r in record["returns"])
        assert record["num_timesteps"] == BUDGET  # the callback stops training at the last point
        assert record["seconds"] > 0 and record["n_steps"] == 64
        assert json.loads(run.cache_path(cache).read_text()) == records[run.name]
    assert run.cache_path(cache) == cache / "tiny" / "CartPole-v1__ppo__seed1.json"

    def untrainable(run, progress=None):
        raise AssertionError("a cached run was trained again")

    assert harness.run_all(runs, untrainable, cache, workers=1, quiet=True) == records

    steps = runs[0].grid
    summary = harness.summarize_method(steps, [records[r.name] for r in runs], [0, 1], 475.0, settings)
    returns = np.array([records[r.name]["returns"] for r in runs])
    assert summary["steps"] == steps and summary["seeds"] == [0, 1] and summary["settings"] == settings
    assert summary["mean"] == pytest.approx(returns.mean(0).tolist())
    assert summary["se"] == pytest.approx((returns.std(0, ddof=1) / np.sqrt(2)).tolist())
    assert summary["final_mean_return"] == pytest.approx(returns[:, -1].mean())
    assert summary["last_evals"] == 3 and summary["trained_timesteps"] == [BUDGET, BUDGET]
    assert len(summary["steps_to_threshold_per_seed"]) == 2

    result = {
        "config": {"n_seeds": 2},
        "envs": {"CartPole-v1": {"threshold": 475.0, "methods": {"ppo": summary}}},
    }
    paths = harness.write_outputs(result, tmp_path / "out", "tiny", "# tiny\n", {"ppo": "PPO"})
    assert {k: p.name for k, p in paths.items()} == {"json": "tiny.json", "png": "tiny.png", "md": "tiny.md"}
    assert json.loads(paths["json"].read_text()) == json.loads(json.dumps(result))
    assert paths["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert paths["md"].read_text() == "# tiny\n"


def test_eval_grid_threshold_and_standard_error():
    assert harness.eval_grid(10_000, 5000) == [0, 5000, 10_000]
    assert harness.eval_grid(12_000, 5000) == [0, 5000, 10_000, 12_000]
    steps = [0, 10, 20, 30]
    assert harness.first_step_at_least([-500, -150, -90, -80], steps, -100) == 20
    assert harness.first_step_at_least([9, 100, 200, 300], steps, 475) is None
    assert harness.standard_error(np.array([[1.0, 2.0]])).tolist() == [0.0, 0.0]  # one seed
    assert harness.standard_error(np.array([[1.0], [3.0]])).tolist() == pytest.approx([1.0])


def build_branching(run: Run):
    """TPO with branch groups on CartPole: most of its env transitions are state copies."""
    import gymnasium as gym
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv

    from tpo_agents import TPO

    eval_env = DummyVecEnv([lambda: Monitor(gym.make(run.env))])
    model = TPO("MlpPolicy", run.env, seed=run.seed, group_mode="branch", batch_size=4, **run.hyperparameters)
    return model, eval_env


def test_the_budget_and_grid_count_every_env_interaction():
    """A branch run stops at its budget of env interactions of every kind, training-env
    steps plus the steps of state copies, not at that many training-env steps."""
    budget = 600
    run = Run("tiny", "CartPole-v1", "tpo", 0, budget, budget // 2, 1, {})
    record = harness.train_run(run, build_branching)
    assert len(record["returns"]) == 3
    assert budget <= record["env_steps_total"] < budget + 400  # stopped within an iteration of it
    assert record["num_timesteps"] < record["env_steps_total"] / 2  # most were simulation


def test_the_plots_step_axis_reads_in_thousands_and_millions():
    # 250000, 500000, ... overlapped on a 200k-step panel; 250k, 1.5M do not.
    labels = [harness._steps_label(x, 0) for x in (0, 500, 25_000, 250_000, 1_000_000, 1_500_000)]
    assert labels == ["0", "500", "25k", "250k", "1M", "1.5M"]
