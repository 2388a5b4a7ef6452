"""Checkpoints: atomic saves, full training state, exact resume, refusals (issue 13, items 2-3)."""

from __future__ import annotations

import zipfile

import gymnasium as gym
import numpy as np
import pytest
import torch

import tpo_gym  # noqa: F401  (registers the envs)
from tpo_agents import DG, GRPO, TPO

TOKEN_KW = dict(batch_size=4, n_candidates=4, policy_kwargs=dict(d_model=16, n_layers=1, n_heads=2))
CASES = [
    ("MlpPolicy", lambda: "MultiContextBandit-v0", dict(batch_size=8), 40 * 8, 40 * 8),
    # H = 3 terminal reward: one iteration is batch_size * K * H = 48 env steps.
    ("TransformerPolicy", lambda: gym.make("TokenReversal-terminal-v0", length=3, vocab_size=2), TOKEN_KW, 3 * 48, 2 * 48),
]


def weights(model) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.policy.parameters()]


@pytest.mark.parametrize("algo", [TPO, GRPO, DG], ids=lambda a: a.__name__)
@pytest.mark.parametrize("policy, make_env, kwargs, n1, n2", CASES, ids=["mlp", "transformer"])
def test_save_load_continue_is_bitwise_the_uninterrupted_run(tmp_path, algo, policy, make_env, kwargs, n1, n2):
    straight = algo(policy, make_env(), seed=3, **kwargs).learn(n1 + n2)

    first = algo(policy, make_env(), seed=3, **kwargs).learn(n1)
    first.save(tmp_path / "ckpt")
    torch.manual_seed(12345)  # whatever the user's code does in between
    np.random.seed(6789)
    resumed = algo.load(tmp_path / "ckpt", env=make_env(), force_reset=False)
    resumed.learn(n2, reset_num_timesteps=False)

    assert resumed.num_timesteps == straight.num_timesteps == n1 + n2
    start = weights(algo(policy, make_env(), seed=3, **kwargs))
    assert any(not torch.equal(a, b) for a, b in zip(start, weights(straight)))  # it learned
    assert all(torch.equal(a, b) for a, b in zip(weights(straight), weights(resumed)))

    # The same checkpoint continued from a fresh env (force_reset) is a different run:
    # the state restored above is what made the replay exact.
    fresh = algo.load(tmp_path / "ckpt", env=make_env())
    fresh.learn(n2, reset_num_timesteps=False)
    assert any(not torch.equal(a, b) for a, b in zip(weights(straight), weights(fresh)))


@pytest.mark.parametrize("algo", [TPO, GRPO], ids=lambda a: a.__name__)
@pytest.mark.parametrize("mode", ["critic", "branch"])
def test_cartpole_critic_and_branch_runs_resume_bitwise(tmp_path, algo, mode):
    # CartPole has no snapshot of its own: the DummyVecEnv's sub-envs are copied into the
    # checkpoint, and the critic (weights, replay, optimizer, generator) travels with the agent.
    kwargs = dict(group_mode=mode, batch_size=16, seed=3, branch_kwargs={"horizon": 4})
    straight = algo("MlpPolicy", "CartPole-v1", **kwargs).learn(96)
    first = algo("MlpPolicy", "CartPole-v1", **kwargs).learn(48)
    first.save(tmp_path / "ckpt")
    torch.manual_seed(12345)
    np.random.seed(6789)
    resumed = algo.load(tmp_path / "ckpt", env=algo("MlpPolicy", "CartPole-v1", **kwargs).get_env(), force_reset=False)
    resumed.learn(48, reset_num_timesteps=False)
    assert resumed.num_timesteps == straight.num_timesteps == 96
    assert all(torch.equal(a, b) for a, b in zip(weights(straight), weights(resumed)))
    if mode == "critic":
        for a, b in zip(straight.critic.q.parameters(), resumed.critic.q.parameters()):
            assert torch.equal(a, b)


def test_an_env_too_big_to_snapshot_is_left_out_of_the_checkpoint_with_a_warning(tmp_path):
    from tpo_agents.rollout.envs import dummy_vec_env_state

    model = TPO("MlpPolicy", "CartPole-v1", batch_size=2, n_candidates=2, seed=0).learn(20)
    assert dummy_vec_env_state(model.get_env())["env_classes"] == ["CartPoleEnv", "CartPoleEnv"]
    with pytest.warns(UserWarning, match=r"its snapshot is [0-9,]+ bytes, over the 100-byte limit"):
        assert dummy_vec_env_state(model.get_env(), limit_bytes=100) is None


def test_the_zip_holds_the_optimizer_state(tmp_path):
    model = TPO("MlpPolicy", "MultiContextBandit-v0", batch_size=8, seed=0).learn(64)
    model.save(tmp_path / "m")
    assert "policy.optimizer.pth" in zipfile.ZipFile(tmp_path / "m.zip").namelist()
    loaded = TPO.load(tmp_path / "m")
    saved, restored = model.policy.optimizer.state_dict(), loaded.policy.optimizer.state_dict()
    assert saved["state"].keys() == restored["state"].keys() and saved["state"]
    for key, moments in saved["state"].items():
        for name, value in moments.items():
            assert torch.equal(torch.as_tensor(value), torch.as_tensor(restored["state"][key][name]))


def test_a_crash_during_save_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    import stable_baselines3.common.base_class as base_class

    model = TPO("MlpPolicy", "MultiContextBandit-v0", batch_size=8, seed=0)
    model.save(tmp_path / "m")
    good = (tmp_path / "m.zip").read_bytes()
    real = base_class.save_to_zip_file

    def crash_half_way(save_path, *args, **kwargs):
        with open(save_path, "wb") as f:
            f.write(good[: len(good) // 3])  # a truncated archive, then the process "dies"
        raise KeyboardInterrupt

    monkeypatch.setattr(base_class, "save_to_zip_file", crash_half_way)
    model.learn(64)
    with pytest.raises(KeyboardInterrupt):
        model.save(tmp_path / "m")
    assert (tmp_path / "m.zip").read_bytes() == good
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.zip"]  # no temporary left behind
    monkeypatch.setattr(base_class, "save_to_zip_file", real)
    TPO.load(tmp_path / "m")  # still a valid checkpoint


def test_loading_another_algorithms_file_is_refused(tmp_path):
    TPO("MlpPolicy", "MultiContextBandit-v0").save(tmp_path / "tpo")
    with pytest.raises(ValueError, match=r"holds a TPO agent, not a GRPO: load it with TPO.load"):
        GRPO.load(tmp_path / "tpo")


def test_learn_after_load_without_an_env_says_what_to_do(tmp_path):
    TPO("MlpPolicy", "MultiContextBandit-v0").save(tmp_path / "tpo")
    model = TPO.load(tmp_path / "tpo")
    with pytest.raises(ValueError, match=r"has no env .*pass env= to TPO.load\(\.\.\.\) or call model.set_env"):
        model.learn(100)
    model.set_env("MultiContextBandit-v0")
    assert model.learn(100).num_timesteps >= 100


def test_resume_into_an_env_that_cannot_take_the_state_warns_and_resets(tmp_path):
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import DummyVecEnv

    model = TPO("MlpPolicy", "CartPole-v1", batch_size=2, n_candidates=2, seed=0).learn(50)
    model.save(tmp_path / "cp")
    with pytest.warns(UserWarning, match=r"the env has 3 sub-envs, the saved run had 2; training continues from a reset"):
        loaded = TPO.load(tmp_path / "cp", env=make_vec_env("CartPole-v1", n_envs=3), force_reset=False)
    assert loaded._last_obs is None  # starts from a reset instead of a stale observation

    class Handle(gym.Wrapper):
        def __deepcopy__(self, memo):
            raise TypeError("a simulator handle")

        def __reduce__(self):
            raise TypeError("a simulator handle")

    model = TPO("MlpPolicy", Handle(gym.make("CartPole-v1")), n_envs=1, batch_size=2, n_candidates=2, seed=0).learn(50)
    with pytest.warns(UserWarning, match="holds no env snapshot: its sub-envs cannot be pickled"):
        model.save(tmp_path / "handle")
    with pytest.warns(UserWarning, match="no env state was saved with the agent"):
        TPO.load(tmp_path / "handle", env=DummyVecEnv([lambda: Handle(gym.make("CartPole-v1"))]), force_reset=False)


def test_checkpoint_callback_checkpoints_resume(tmp_path):
    from stable_baselines3.common.callbacks import CheckpointCallback

    model = TPO("MlpPolicy", "MultiContextBandit-v0", batch_size=8, seed=1)
    model.learn(160, callback=CheckpointCallback(save_freq=10, save_path=str(tmp_path), name_prefix="tpo"))
    saved = sorted(tmp_path.glob("tpo_*_steps.zip"))
    assert saved and not list(tmp_path.glob(".*.tmp"))  # written through the atomic save
    resumed = TPO.load(saved[-1], env="MultiContextBandit-v0", force_reset=False)
    assert resumed.num_timesteps > 0 and resumed._last_obs is not None
    resumed.learn(16, reset_num_timesteps=False)


def test_an_mnist_env_snapshot_leaves_out_the_dataset_and_round_trips():
    env = gym.make_vec("MNISTBandit-v0", num_envs=3, vectorization_mode="vector_entry_point", dataset="digits")
    env.reset(seed=0)
    state = env.unwrapped.get_state()
    assert "_images" not in state["attributes"] and "_labels" not in state["attributes"]
    first = env.step(np.zeros(3, dtype=np.int64))[0]
    after = env.step(np.zeros(3, dtype=np.int64))[0]
    env.unwrapped.set_state(state)
    assert np.array_equal(env.step(np.zeros(3, dtype=np.int64))[0], first)
    assert np.array_equal(env.step(np.zeros(3, dtype=np.int64))[0], after)
    other = gym.make_vec("MNISTBandit-v0", num_envs=2, vectorization_mode="vector_entry_point", dataset="digits")
    with pytest.raises(ValueError, match="num_envs=3; this env has num_envs=2"):
        other.unwrapped.set_state(state)
