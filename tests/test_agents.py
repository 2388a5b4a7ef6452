"""The SB3-API agents: learning, the SB3 API surface, callbacks, logging and bad input."""

from __future__ import annotations

import csv
import dataclasses
import glob

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from stable_baselines3.common.callbacks import BaseCallback, CheckpointCallback, EvalCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.logger import configure

import tpo_gym  # noqa: F401  (registers the ids)
from tpo_agents import DG, GRPO, PG, TPO, GroupPG, MlpPolicy
from tpo_agents.rollout import GroupBatch, GymnasiumVecEnv

pytestmark = pytest.mark.usefixtures("one_thread")  # one torch thread (conftest), restored after


def greedy_accuracy_symmetric(model, n_actions=10) -> float:
    env = gym.make("SymmetricBandit-v0", n_actions=n_actions)
    obs, _ = env.reset(seed=0)
    pi = model.policy.action_log_probs(model.policy.obs_to_tensor(np.array([obs]))[0]).exp()[0]
    return float(pi[env.unwrapped.correct_action].detach())


def greedy_accuracy_multi(model, **kwargs) -> float:
    env = gym.make("MultiContextBandit-v0", **kwargs).unwrapped
    actions, _ = model.predict(np.arange(env.n_contexts), deterministic=True)
    return float((actions == env.correct_actions).mean())


# ------------------------------------------------------------------------ learning


@pytest.mark.parametrize("cls", [TPO, DG])
def test_solves_symmetric_bandit(cls):
    model = cls("MlpPolicy", gym.make("SymmetricBandit-v0", n_actions=10), seed=0, learning_rate=3e-3)
    model.learn(10_000)
    env = gym.make("SymmetricBandit-v0", n_actions=10)
    obs, _ = env.reset(seed=1)
    action, _ = model.predict(obs, deterministic=True)
    assert int(action) == env.unwrapped.correct_action
    assert greedy_accuracy_symmetric(model) > 0.95


def test_tpo_beats_pg_on_multi_context_bandit_at_equal_updates():
    kw = dict(n_contexts=20, n_actions=10)
    acc = {}
    for cls in (TPO, PG):
        model = cls("MlpPolicy", gym.make("MultiContextBandit-v0", **kw), seed=0, n_epochs=1)
        model.learn(60 * 100)  # 60 updates of 100 contexts
        assert model._n_updates == 60
        acc[cls.__name__] = greedy_accuracy_multi(model, **kw)
    assert acc["TPO"] > acc["PG"] + 0.1, acc


@pytest.mark.slow
def test_tpo_balances_cartpole_with_sequence_groups():
    model = TPO("MlpPolicy", "CartPole-v1", seed=0, batch_size=4, logp_reduction="mean", group_mode="sequence")
    assert model.resolve_group_mode() == "sequence"
    model.learn(60_000)
    mean_return, _ = evaluate_policy(model, model.get_env(), n_eval_episodes=10, deterministic=True)
    assert mean_return >= 195, mean_return


def test_group_modes_follow_the_env():
    bandit = gym.make("SymmetricBandit-v0", n_actions=5)
    assert TPO("MlpPolicy", bandit).resolve_group_mode() == "all_actions"
    assert GRPO("MlpPolicy", bandit).resolve_group_mode() == "single"
    assert DG("MlpPolicy", bandit).resolve_group_mode() == "single"
    assert TPO("MlpPolicy", bandit, group_mode="per_state").resolve_group_mode() == "per_state"
    assert TPO("MlpPolicy", "CartPole-v1", batch_size=2).resolve_group_mode() == "critic"
    assert GRPO("MlpPolicy", "CartPole-v1", batch_size=2).resolve_group_mode() == "critic"


def test_per_state_groups_use_score_candidates_and_learn():
    model = TPO("MlpPolicy", gym.make("SymmetricBandit-v0", n_actions=10), seed=0, group_mode="per_state")
    model.learn(3000)
    assert greedy_accuracy_symmetric(model) > 0.9
    assert model._batch.group_size == 8 and model._batch.n_groups == 100


def test_group_pg_and_grpo_train():
    for model in (
        GroupPG("MlpPolicy", gym.make("SymmetricBandit-v0", n_actions=10), seed=0, learning_rate=3e-3),
        GRPO("MlpPolicy", gym.make("SymmetricBandit-v0", n_actions=10), seed=0, learning_rate=3e-3),
    ):
        model.learn(6000)
        assert greedy_accuracy_symmetric(model) > 0.5, type(model).__name__


def test_no_anchor_target_ignores_the_old_policy():
    model = TPO("MlpPolicy", gym.make("SymmetricBandit-v0", n_actions=10), seed=0, anchor=False, learning_rate=3e-3)
    model.learn(6000)
    frozen = model.prepare(model._batch)
    assert torch.allclose(frozen["q"], torch.softmax(frozen["u"], -1))
    assert greedy_accuracy_symmetric(model) > 0.2  # learns, but plateaus (q never sharpens)


# ------------------------------------------------------------------- env inputs


def test_accepts_id_env_vector_env_and_sb3_vec_env():
    by_id = TPO("MlpPolicy", "SymmetricBandit-v0", n_envs=10)
    assert isinstance(by_id.get_env().venv, GymnasiumVecEnv) and by_id.n_envs == 10
    single = TPO("MlpPolicy", gym.make("SymmetricBandit-v0"))
    assert single.n_envs == 100  # rebuilt natively from the spec: one step = one batch
    vector = TPO("MlpPolicy", gym.make_vec("MultiContextBandit-v0", num_envs=7))
    assert vector.n_envs == 7
    sb3 = TPO("MlpPolicy", make_vec_env("SymmetricBandit-v0", n_envs=3))
    assert sb3.n_envs == 3
    for model in (by_id, single, vector, sb3):
        model.learn(200)
        assert model.num_timesteps >= 200


# ----------------------------------------------------------------- SB3 API


def test_save_load_round_trip_and_continue(tmp_path):
    env = gym.make("MultiContextBandit-v0", n_contexts=10)
    model = TPO("MlpPolicy", env, seed=0, eta=0.5, n_epochs=2)
    model.learn(1000)
    path = tmp_path / "tpo_model"
    model.save(path)
    loaded = TPO.load(path, env=gym.make("MultiContextBandit-v0", n_contexts=10))
    obs = np.arange(10)
    assert np.array_equal(model.predict(obs, deterministic=True)[0], loaded.predict(obs, deterministic=True)[0])
    assert loaded.eta == 0.5 and loaded.n_epochs == 2 and loaded.num_timesteps == model.num_timesteps
    for p1, p2 in zip(model.policy.parameters(), loaded.policy.parameters()):
        assert torch.equal(p1, p2)
    loaded.learn(500, reset_num_timesteps=False)
    assert loaded.num_timesteps > model.num_timesteps
    # A different env with the same spaces is accepted (other task, same shapes).
    TPO.load(path, env=gym.make("MultiContextBandit-v0", n_contexts=10, task_seed=5)).learn(100)
    with pytest.raises(ValueError, match="[Oo]bservation spaces do not match"):
        TPO.load(path, env=gym.make("MultiContextBandit-v0", n_contexts=11))
    params = model.get_parameters()
    fresh = TPO("MlpPolicy", gym.make("MultiContextBandit-v0", n_contexts=10))
    fresh.set_parameters(params)
    assert np.array_equal(fresh.predict(obs, deterministic=True)[0], model.predict(obs, deterministic=True)[0])


def test_same_seed_gives_identical_learning_curves(tmp_path):
    def curve(run):
        model = TPO("MlpPolicy", gym.make("MultiContextBandit-v0", n_contexts=10), seed=3, n_epochs=2)
        model.set_logger(configure(str(tmp_path / run), ["csv"]))
        model.learn(2000)
        with open(tmp_path / run / "progress.csv") as f:
            rows = list(csv.DictReader(f))
        return [(r["train/loss"], r["train/mean_score"]) for r in rows], model.policy.state_dict()

    (c1, s1), (c2, s2) = curve("a"), curve("b")
    assert len(c1) == 20 and c1 == c2
    assert all(torch.equal(s1[k], s2[k]) for k in s1)


def test_policy_aliases_and_class():
    assert TPO.policy_aliases["MlpPolicy"] is MlpPolicy
    model = TPO(MlpPolicy, "SymmetricBandit-v0", policy_kwargs={"net_arch": [16]})
    assert model.policy.net_arch == [16]


def test_discrete_observations_are_one_hot():
    model = TPO("MlpPolicy", gym.make("MultiContextBandit-v0", n_contexts=6))
    assert model.policy.features_extractor.features_dim == 6


def _bandit_tpo(**kwargs) -> TPO:
    return TPO("MlpPolicy", gym.make("MultiContextBandit-v0", n_contexts=5), seed=0, batch_size=20, **kwargs)


def _parameters(model) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.policy.parameters()]


def test_last_batch_and_n_updates_are_read_only_and_follow_learning(tmp_path):
    model = _bandit_tpo(n_epochs=2)
    assert model.last_batch is None and model.n_updates == 0
    model.learn(20)  # one iteration: one batch of 20 groups, two epochs
    first = model.last_batch
    assert isinstance(first, GroupBatch) and first.n_groups == 20
    assert model.n_updates == 2
    model.learn(20, reset_num_timesteps=False)
    assert model.last_batch is not first and model.last_batch.n_groups == 20
    assert model.n_updates == 4
    with pytest.raises(AttributeError):
        model.last_batch = first
    with pytest.raises(AttributeError):
        model.n_updates = 0
    model.save(tmp_path / "agent")
    loaded = TPO.load(tmp_path / "agent")
    assert loaded.n_updates == 4 and loaded.last_batch is None  # the batch is not saved


def test_train_runs_on_the_batch_it_is_given():
    def collected() -> TPO:
        model = _bandit_tpo(n_epochs=2)
        model.learn(20)
        return model

    plain, given, flat = collected(), collected(), collected()
    for a, b in zip(_parameters(plain), _parameters(given)):
        assert torch.equal(a, b)
    # The collected batch passed explicitly: exactly what train() does with no argument.
    plain.train()
    given.train(given.last_batch)
    for a, b in zip(_parameters(plain), _parameters(given)):
        assert torch.equal(a, b)
    assert plain.n_updates == given.n_updates == 4
    # A batch with every group's scores equal teaches nothing: TPO takes no step on it,
    # although the collected batch would move the weights.
    batch = flat.last_batch
    before = _parameters(flat)
    flat.train(dataclasses.replace(batch, scores=torch.zeros_like(batch.scores)))
    assert flat.last_batch is batch  # a given batch does not replace the collected one
    assert flat.n_updates == 2 and flat.last_train_stats["skipped_epochs"] == 2
    for a, b in zip(before, _parameters(flat)):
        assert torch.equal(a, b)
    flat.train()
    assert flat.n_updates == 4
    assert any(not torch.equal(a, b) for a, b in zip(before, _parameters(flat)))


def test_train_without_a_batch_says_so():
    with pytest.raises(RuntimeError, match="collect_rollouts"):
        _bandit_tpo().train()


# -------------------------------------------------------- callbacks and logging


class EventCounter(BaseCallback):
    def __init__(self, stop_after: int | None = None):
        super().__init__()
        self.events: list[str] = []
        self.stop_after = stop_after

    def _on_training_start(self):
        self.events.append("training_start")

    def _on_rollout_start(self):
        self.events.append("rollout_start")

    def _on_rollout_end(self):
        self.events.append("rollout_end")

    def _on_step(self):
        self.events.append("step")
        return self.stop_after is None or self.n_calls < self.stop_after

    def _on_training_end(self):
        self.events.append("training_end")


def test_callback_events_fire_like_sb3():
    cb = EventCounter()
    model = TPO("MlpPolicy", "SymmetricBandit-v0", n_envs=25, batch_size=50)
    model.learn(200, callback=cb)
    assert cb.events[0] == "training_start" and cb.events[-1] == "training_end"
    assert cb.events.count("rollout_start") == cb.events.count("rollout_end") == 4
    assert cb.events.count("step") == 8  # two vector steps of 25 envs per 50-context batch
    one_iter = cb.events[1:5]
    assert one_iter == ["rollout_start", "step", "step", "rollout_end"]


def test_callback_returning_false_stops_training():
    cb = EventCounter(stop_after=3)
    model = TPO("MlpPolicy", "SymmetricBandit-v0", n_envs=10, batch_size=50)
    model.learn(10_000, callback=cb)
    assert cb.events.count("step") == 3
    assert model.num_timesteps == 30
    assert model._n_updates == 0


def test_evaluate_policy_eval_and_checkpoint_callbacks(tmp_path):
    model = DG("MlpPolicy", gym.make("SymmetricBandit-v0", n_actions=10), seed=0, learning_rate=3e-3)
    eval_cb = EvalCallback(
        gym.make("SymmetricBandit-v0", n_actions=10), eval_freq=20, n_eval_episodes=20,
        log_path=str(tmp_path / "eval"), best_model_save_path=str(tmp_path / "best"), verbose=0,
    )
    ckpt_cb = CheckpointCallback(save_freq=20, save_path=str(tmp_path / "ckpt"), name_prefix="dg")
    model.learn(6000, callback=[eval_cb, ckpt_cb])
    evaluations = np.load(tmp_path / "eval" / "evaluations.npz")
    assert evaluations["results"].shape[0] == 3  # at 2000, 4000, 6000 timesteps
    assert evaluations["results"][-1].mean() > 0.9
    assert (tmp_path / "best" / "best_model.zip").exists()
    checkpoints = sorted(glob.glob(str(tmp_path / "ckpt" / "dg_*_steps.zip")))
    assert len(checkpoints) == 3
    DG.load(checkpoints[-1])
    mean_reward, _ = evaluate_policy(model, gym.make("SymmetricBandit-v0", n_actions=10), n_eval_episodes=50)
    assert mean_reward > 0.9


def test_progress_bar_and_tensorboard(tmp_path, capsys):
    pytest.importorskip("tensorboard")
    model = TPO("MlpPolicy", "SymmetricBandit-v0", tensorboard_log=str(tmp_path), verbose=1)
    model.learn(500, progress_bar=True, tb_log_name="tpo_run")
    events = glob.glob(str(tmp_path / "tpo_run_1" / "events.out.tfevents.*"))
    assert events
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(events[0])
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    for tag in ("train/loss", "train/grad_norm", "train/target_entropy", "train/zero_variance_frac", "train/kl_target_old"):
        assert tag in tags
    out = capsys.readouterr().out
    assert "target_entropy" in out and "zero_variance_frac" in out  # stdout logger


# --------------------------------------------------------------------- bad input


class NaNRewardEnv(gym.Env):
    observation_space = spaces.Box(-1, 1, (2,), np.float32)
    action_space = spaces.Discrete(3)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        reward = float("nan") if self.t == 3 else 1.0
        return np.zeros(2, np.float32), reward, self.t >= 5, False, {}


def test_nan_reward_names_the_step():
    model = PG("MlpPolicy", NaNRewardEnv(), batch_size=4)
    with pytest.raises(ValueError, match=r"non-finite reward nan at timestep 3 \(sub-env 0\)"):
        model.learn(100)


def test_box_actions_take_the_gaussian_policy_and_critic_groups_by_default():
    model = TPO("MlpPolicy", "Pendulum-v1")
    assert type(model.policy).__name__ == "GaussianMlpPolicy" and model.resolve_group_mode() == "critic"
    # branch groups take Box actions on request (tests/test_branching.py)
    assert GRPO("MlpPolicy", "Pendulum-v1", group_mode="branch").resolve_group_mode() == "branch"
    with pytest.raises(ValueError, match=r"group_mode='all_actions' enumerates or scores Discrete actions"):
        GRPO("MlpPolicy", "Pendulum-v1", group_mode="all_actions")


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"n_candidates": 1}, "n_candidates must be an integer >= 2; got 1"),
        ({"batch_size": 0}, "batch_size must be an integer >= 1; got 0"),
        ({"n_epochs": 0}, "n_epochs must be an integer >= 1; got 0"),
        ({"eta": 0.0}, "eta must be a finite number > 0; got 0.0"),
        ({"group_mode": "everything"}, "group_mode must be 'auto' or one of"),
        ({"logp_reduction": "max"}, "logp_reduction must be one of"),
    ],
)
def test_bad_hyperparameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TPO("MlpPolicy", "SymmetricBandit-v0", **kwargs)


def test_bad_comparator_hyperparameters():
    with pytest.raises(ValueError, match="clip_range must be a finite number > 0; got 0"):
        GRPO("MlpPolicy", "SymmetricBandit-v0", clip_range=0)
    with pytest.raises(ValueError, match="beta must be a finite number >= 0; got -0.1"):
        GRPO("MlpPolicy", "SymmetricBandit-v0", beta=-0.1)
    with pytest.raises(ValueError, match="dg_eta must be a finite number > 0; got 0"):
        DG("MlpPolicy", "SymmetricBandit-v0", dg_eta=0)
    with pytest.raises(ValueError, match="baseline must be one of"):
        PG("MlpPolicy", "SymmetricBandit-v0", baseline="median")


def test_learning_rate_schedule_and_set_env(tmp_path):
    model = TPO("MlpPolicy", "SymmetricBandit-v0", learning_rate=lambda progress: 1e-3 * progress, n_epochs=1)
    model.set_logger(configure(str(tmp_path), ["csv"]))
    model.learn(1000)
    with open(tmp_path / "progress.csv") as f:
        rates = [float(r["train/learning_rate"]) for r in csv.DictReader(f)]
    assert rates[0] == pytest.approx(9e-4) and rates[-1] == pytest.approx(0.0, abs=1e-12)
    assert all(a > b for a, b in zip(rates, rates[1:]))
    model.set_env(gym.make("SymmetricBandit-v0", correct_action=3))
    assert model.get_env().num_envs == 100  # rebuilt natively, as the constructor does
    model.learn(100)
    with pytest.raises(ValueError, match="[Aa]ction spaces do not match"):
        model.set_env(gym.make("SymmetricBandit-v0", n_actions=7))
