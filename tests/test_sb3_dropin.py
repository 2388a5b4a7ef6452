"""An SB3 user's first hour (issue 29): what works with SB3's algorithms works with ours.

Each test names the SB3 behaviour it follows; all run on tiny budgets."""

from __future__ import annotations

import csv
import json
import math
import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from stable_baselines3.common.callbacks import LogEveryNTimesteps
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.logger import configure
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

import tpo_gym  # noqa: F401  (registers the envs)
from tpo_agents import DG, GRPO, TPO

ALGOS = pytest.mark.parametrize("algo", [TPO, GRPO, DG], ids=lambda a: a.__name__)


class Steps(gym.Env):
    """A few steps per episode, two actions (action 0 pays 1); ``is_success`` at the end."""

    observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)

    def __init__(self, n_actions: int = 2, length: int = 3):
        self.action_space = spaces.Discrete(n_actions)
        self.length = length
        self.t = 0

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.np_random.uniform(-1, 1, 2).astype(np.float32), {}

    def step(self, action):
        self.t += 1
        done = self.t >= self.length
        info = {"is_success": bool(action == 0)} if done else {}
        return self.np_random.uniform(-1, 1, 2).astype(np.float32), float(action == 0), done, False, info


class NoOptions(Steps):
    """``reset(self, seed=None)`` without ``options``, as some older envs have."""

    def reset(self, seed=None):  # SB3 accepts such envs: it passes options only when set
        return super().reset(seed=seed)


def subproc_vec_env(env_id: str, n_envs: int = 2) -> SubprocVecEnv:
    # "fork" starts the workers in milliseconds (the default forkserver imports torch
    # again); what crosses the pipes, and so what a get_attr breaks, is the same.
    return make_vec_env(env_id, n_envs=n_envs, vec_env_cls=SubprocVecEnv, vec_env_kwargs={"start_method": "fork"})


def weights(model) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.policy.parameters()]


# ------------------------------------------------------------------ 1. SubprocVecEnv


@ALGOS
def test_subproc_vec_env_constructs_trains_and_still_steps(algo):
    venv = subproc_vec_env("CartPole-v1")
    try:
        model = algo("MlpPolicy", venv, batch_size=16, seed=0)
        model.learn(100)
        assert model.num_timesteps >= 100
        venv.reset()  # the user's vec env is alive after the probing and the training
        obs, rewards, dones, infos = venv.step(np.zeros(2, dtype=np.int64))
        assert obs.shape == (2, 4)
    finally:
        venv.close()


def test_probing_a_scoring_env_in_subprocesses_moves_no_bound_method():
    # The env has score_candidates (a bound method of an unpicklable-in-general env):
    # has_attr answers in the worker; the scores themselves come back through env_method.
    venv = subproc_vec_env("tpo_gym:MultiContextBandit-v0")
    try:
        model = TPO("MlpPolicy", venv, group_mode="per_state", batch_size=4, seed=0)
        model.learn(16)
        venv.reset()
        venv.step(np.zeros(2, dtype=np.int64))
    finally:
        venv.close()


# ------------------------------------------------------------------ 2. LogEveryNTimesteps


@ALGOS
def test_log_every_n_timesteps_callback(algo, tmp_path):
    model = algo("MlpPolicy", Steps(), batch_size=8, seed=0)
    model.set_logger(configure(str(tmp_path), ["csv"]))
    model.learn(96, callback=LogEveryNTimesteps(n_steps=24))  # calls model.dump_logs()
    with open(tmp_path / "progress.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) >= 2 and all(r["time/total_timesteps"] for r in rows)


# ------------------------------------------------------------------ 3. set_env of the same env


@ALGOS
def test_set_env_of_the_agents_own_env_keeps_its_state(algo):
    env = Steps()
    model = algo("MlpPolicy", env, batch_size=8, seed=0).learn(40)
    live = model.get_env()
    for same in (live, env):  # the training VecEnv, or the object it was built from
        last = np.array(model._last_obs, copy=True)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no "cannot be restored" warning
            model.set_env(same, force_reset=False)
        assert model.get_env() is live
        assert np.array_equal(model._last_obs, last)
    model.learn(16, reset_num_timesteps=False)
    assert model.num_timesteps >= 56
    model.set_env(live)  # force_reset=True, SB3's default: the next learn() resets
    assert model.get_env() is live and model._last_obs is None


def test_set_env_of_another_vec_env_follows_sb3():
    model = TPO("MlpPolicy", "CartPole-v1", n_envs=2, batch_size=8, seed=0).learn(16)
    last = np.array(model._last_obs, copy=True)
    other = make_vec_env("CartPole-v1", n_envs=2)
    model.set_env(other, force_reset=False)  # SB3: keeps _last_obs, the caller vouches for the env
    assert model.get_env() is other and np.array_equal(model._last_obs, last)
    model.set_env(make_vec_env("CartPole-v1", n_envs=2))
    assert model._last_obs is None


# ------------------------------------------------------------------ 4. reset(self, seed=None)


@ALGOS
def test_env_whose_reset_takes_no_options(algo):
    model = algo("MlpPolicy", NoOptions(), batch_size=8, seed=0).learn(24)
    assert model.num_timesteps >= 24
    model = algo("MlpPolicy", DummyVecEnv([NoOptions, NoOptions]), batch_size=8, seed=0).learn(24)
    assert model.num_timesteps >= 24


@ALGOS
def test_an_env_whose_spec_names_an_unregistered_id_is_used_as_given(algo):
    # SB3's BitFlippingEnv carries EnvSpec("BitFlippingEnv-v0", "no-entry-point"): a spec that
    # cannot remake the env. PPO trains on it; so must we (it failed loading the entry point).
    from stable_baselines3.common.envs import BitFlippingEnv

    env = BitFlippingEnv(n_bits=4, continuous=False)
    assert env.spec is not None and env.spec.id not in gym.registry
    model = algo("MultiInputPolicy", env, batch_size=8, seed=0).learn(24)
    assert model.num_timesteps >= 24 and model.get_env().envs[0].unwrapped is env


@ALGOS
def test_a_time_limit_given_to_gym_make_is_kept_in_every_sub_env(algo):
    # gym.make("CartPole-v1", max_episode_steps=20): the sub-envs were rebuilt from the id with
    # its registered limit (500), so episodes ran past what the user asked for.
    model = algo("MlpPolicy", gym.make("CartPole-v1", max_episode_steps=20), batch_size=8, seed=0)
    assert model.n_envs > 1
    model.learn(400)
    lengths = [info["l"] for info in model.ep_info_buffer]
    assert lengths and max(lengths) <= 20


@ALGOS
def test_a_ppo_hyperparameter_is_refused_with_what_plays_its_part_here(algo):
    # An rl-zoo3 PPO entry ported as it is: Python's TypeError, as SB3 gives for any unknown
    # keyword, plus what n_steps and ent_coef correspond to here; an unknown name is listed too.
    with pytest.raises(TypeError, match=r"'ent_coef', 'foo', 'n_steps'(?s:.*)n_steps: SB3's; a rollout here is batch_size"):
        algo("MlpPolicy", "CartPole-v1", n_steps=16, ent_coef=0.0, foo=1)


# ------------------------------------------------------------------ 5. rollout/success_rate


@ALGOS
def test_success_rate_is_logged(algo, tmp_path):
    model = algo("MlpPolicy", Steps(), batch_size=8, seed=0)
    model.set_logger(configure(str(tmp_path), ["csv"]))
    model.learn(48)
    assert len(model.ep_success_buffer) > 0
    with open(tmp_path / "progress.csv") as f:
        rates = [float(r["rollout/success_rate"]) for r in csv.DictReader(f) if r["rollout/success_rate"]]
    assert rates and all(0.0 <= r <= 1.0 for r in rates)
    assert rates[-1] == pytest.approx(float(np.mean(model.ep_success_buffer)))


# ------------------------------------------------------------------ 6. device="cuda" on a CPU machine


@pytest.mark.skipif(torch.cuda.is_available(), reason="the fallback of a machine without CUDA")
@ALGOS
def test_cuda_without_cuda_falls_back_to_cpu(algo, tmp_path):
    with pytest.warns(UserWarning, match="CUDA is not available.*using the CPU"):
        model = algo("MlpPolicy", Steps(), batch_size=8, seed=0, device="cuda")
    assert model.device.type == "cpu"
    model.learn(16).save(tmp_path / "agent")
    with pytest.warns(UserWarning, match="CUDA is not available.*using the CPU"):
        loaded = algo.load(tmp_path / "agent", env=Steps(), device="cuda")
    assert loaded.device.type == "cpu" and next(loaded.policy.parameters()).device.type == "cpu"
    loaded.learn(16)


# ------------------------------------------------------------------ 7. Discrete(1)


@ALGOS
def test_one_action_space_learns_a_zero_update(algo):
    model = algo("MlpPolicy", Steps(n_actions=1), batch_size=8, seed=0)
    before = weights(model)
    model.learn(48)
    assert model.num_timesteps >= 48
    assert all(torch.equal(a, b) for a, b in zip(before, weights(model)))  # nothing to learn


# ------------------------------------------------------------------ 8. the budget


@ALGOS
def test_learn_stops_within_one_rollout_of_the_budget(algo):
    budget = 64
    model = algo("MlpPolicy", "CartPole-v1", n_envs=2, seed=0)
    model.learn(budget)
    n, mode = model.n_envs, model.resolve_group_mode()
    if mode == "single":  # whole episodes: none starts past the budget
        rollout = n * model.get_env().get_attr("spec")[0].max_episode_steps
    else:  # ceil(batch_size / n_envs) vector steps, like SB3's n_steps * n_envs
        rollout = math.ceil(model.batch_size / n) * n
    assert budget <= model.num_timesteps < budget + rollout


def test_sequence_groups_start_no_context_past_the_budget():
    # K whole episodes per context: once the budget is reached no context starts, and the
    # started ones finish their K episodes (a smaller last batch, every group complete).
    budget, K = 64, 2
    model = TPO("MlpPolicy", "CartPole-v1", group_mode="sequence", n_envs=2, n_candidates=K, batch_size=50, seed=0)
    model.learn(budget)
    longest = model.get_env().get_attr("spec")[0].max_episode_steps
    assert budget <= model.num_timesteps < budget + (model.n_envs + K - 1) * longest
    batch = model.last_batch
    assert 1 <= batch.n_groups < 50 and batch.group_size == K and bool(batch.mask.all())


def test_env_steps_total_is_logged_and_counts_only_real_steps_without_branching(tmp_path):
    model = TPO("MlpPolicy", "CartPole-v1", batch_size=8, n_candidates=2, seed=0)
    model.set_logger(configure(str(tmp_path), ["json"]))
    model.learn(32)
    rows = [json.loads(line) for line in (tmp_path / "progress.json").read_text().splitlines()]
    assert rows[-1]["rollout/env_steps_total"] == model.num_timesteps == model.env_steps_total
    assert model.branch_env_steps == 0  # critic groups make no simulated steps
