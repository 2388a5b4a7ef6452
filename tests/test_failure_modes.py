"""Nothing silent (issue 13): wrappers that train, guarded numerics, clear errors."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.wrappers import TransformReward

import tpo_gym  # noqa: F401  (registers the envs)
from tpo_agents import DG, GRPO, PG, TPO


class CountSteps(gym.Wrapper):
    def __init__(self, env):
        super().__init__(env)
        self.calls = 0

    def step(self, action):
        self.calls += 1
        return self.env.step(action)


class ConstantReward(gym.Wrapper):
    def __init__(self, env, value):
        super().__init__(env)
        self.value = value

    def step(self, action):
        obs, _, terminated, truncated, info = self.env.step(action)
        return obs, self.value, terminated, truncated, info


def sub_envs(model):
    return model.env.unwrapped.envs


def weights(model):
    return [p.detach().clone() for p in model.policy.parameters()]


# ------------------------------------------------------------------ the user's wrappers train


@pytest.mark.parametrize("env_id, kwargs", [("MultiContextBandit-v0", {}), ("CartPole-v1", dict(batch_size=2, n_candidates=2))])
def test_a_wrapped_instance_is_what_trains(env_id, kwargs):
    model = TPO("MlpPolicy", CountSteps(gym.make(env_id)), seed=0, **kwargs)
    model.learn(40)
    copies = sub_envs(model)
    assert len(copies) == model.n_envs > 1
    counters = [e.get_wrapper_attr("calls") for e in copies]
    assert sum(counters) == model.num_timesteps and min(counters) > 0  # every copy stepped


def test_a_reward_wrapper_shapes_the_scores_that_are_learned_from():
    plain = TPO("MlpPolicy", "MultiContextBandit-v0", batch_size=8, seed=0).learn(8)
    shifted = TPO("MlpPolicy", TransformReward(gym.make("MultiContextBandit-v0"), lambda r: r + 100.0), batch_size=8, seed=0)
    shifted.learn(8)
    # all_actions groups score the sampled action (r - sum pi^2): r + 100 shows up in them.
    assert plain._batch.scores.max() <= 1.0 < 99.0 <= shifted._batch.scores.max()


def test_per_state_scoring_past_a_reward_wrapper_is_refused():
    env = TransformReward(gym.make("TokenReversal-bag-v0", length=3), lambda r: 2 * r)
    with pytest.raises(ValueError, match=r"would bypass your wrappers \['TransformReward'\]"):
        TPO("MlpPolicy", env, group_mode="per_state", batch_size=2).learn(10)
    auto = TPO("MlpPolicy", env, batch_size=2, n_candidates=2)  # auto: K rollouts through the wrapper
    auto.learn(30)
    assert auto.resolve_group_mode() == "sequence"


def test_transformer_refuses_to_drop_wrappers_of_a_token_env():
    env = TransformReward(gym.make("TokenReversal-terminal-v0", length=3), lambda r: -r)
    with pytest.raises(ValueError, match=r"your wrappers \['TransformReward'\] around .* would be dropped"):
        TPO("TransformerPolicy", env)


# ----------------------------------------------------------------------------- numerics


def test_an_overflowing_gradient_raises_and_leaves_the_weights():
    model = PG("MlpPolicy", ConstantReward(gym.make("CartPole-v1"), 1e30), batch_size=2, seed=0)
    before = weights(model)
    with pytest.raises(FloatingPointError, match=r"gradient norm is inf .* parameters are unchanged"):
        model.learn(2000)
    assert all(torch.equal(a, b) for a, b in zip(before, weights(model)))


def test_a_step_that_makes_weights_non_finite_is_undone():
    model = TPO("MlpPolicy", "MultiContextBandit-v0", batch_size=8, seed=0, learning_rate=1e-3)
    model.learn(8)
    before, state = weights(model), model.policy.optimizer.state_dict()
    moments = {k: {n: v.clone() for n, v in s.items()} for k, s in state["state"].items()}
    real_step = model.policy.optimizer.step

    def overflowing_step(*args, **kwargs):  # an optimizer whose update overflows
        real_step(*args, **kwargs)
        with torch.no_grad():
            next(model.policy.parameters()).view(-1)[0] = float("inf")

    model.policy.optimizer.step = overflowing_step
    with pytest.raises(FloatingPointError, match=r"step made parameters non-finite .* step was undone"):
        model.learn(8, reset_num_timesteps=False)
    assert all(torch.equal(a, b) for a, b in zip(before, weights(model)))
    after = model.policy.optimizer.state_dict()["state"]
    assert all(torch.equal(moments[k][n], after[k][n]) for k in moments for n in moments[k])



def test_an_undone_first_step_leaves_the_optimizer_without_state():
    # The very first policy step creates Adam's moments; undone, there must be none, so the
    # next step is a first step again (not one from moments of the overflowed update).
    model = TPO("MlpPolicy", "MultiContextBandit-v0", batch_size=8, seed=0, learning_rate=1e-3)
    before = weights(model)
    real_step = model.policy.optimizer.step

    def overflowing_step(*args, **kwargs):
        real_step(*args, **kwargs)
        with torch.no_grad():
            next(model.policy.parameters()).view(-1)[0] = float("inf")

    model.policy.optimizer.step = overflowing_step
    with pytest.raises(FloatingPointError, match=r"step was undone"):
        model.learn(8)
    assert all(torch.equal(a, b) for a, b in zip(before, weights(model)))
    assert len(model.policy.optimizer.state) == 0

@pytest.mark.parametrize("algo", [TPO, GRPO], ids=lambda a: a.__name__)
def test_all_equal_rewards_leave_the_weights_bitwise_unchanged(algo):
    # H = 10 terminal reward: a random policy never reverses 10 tokens, so every group's
    # rewards are all 0 (zero-variance), several iterations in a row, with Adam momentum.
    env = gym.make("TokenReversal-terminal-v0", length=10)
    model = algo("TransformerPolicy", env, batch_size=4, n_candidates=4, n_epochs=4, seed=0,
                 policy_kwargs=dict(d_model=16, n_layers=1, n_heads=2))
    before = weights(model)
    model.learn(3 * 4 * 4 * 10)
    assert model.last_train_stats["skipped_epochs"] == 4
    assert all(torch.equal(a, b) for a, b in zip(before, weights(model)))


def test_mlp_sequence_mode_on_native_vector_envs_replays_contexts():
    for env_id in ("MultiContextBandit-v0", "TokenReversal-terminal-v0"):
        model = TPO("MlpPolicy", env_id, group_mode="sequence", batch_size=4, n_candidates=3, seed=0)
        model.learn(1)
        batch = model._batch
        states = np.asarray(batch.states)[batch.step_state.numpy()]
        first = {}
        for s, c in zip(states, batch.step_candidate.numpy()):
            first.setdefault(c, s)
        starts = np.array([first[c] for c in range(4 * 3)]).reshape(4, 3, -1)
        assert (starts == starts[:, :1]).all()  # the K candidates of a group share a context
        assert len({tuple(g[0].ravel()) for g in starts}) > 1  # groups differ


def test_score_candidates_of_the_wrong_shape_is_named():
    class BadScores(gym.vector.VectorEnv):
        pass

    from tpo_agents.rollout import score_candidates as vec_score_candidates

    class Env:
        def score_candidates(self, actions):
            return np.zeros((actions.shape[0], actions.shape[1] + 1))

    with pytest.raises(ValueError, match=r"must return one score per candidate, shape \(2, 4\).*got shape \(2, 5\)"):
        vec_score_candidates(Env(), np.zeros((2, 4), dtype=np.int64))


# ------------------------------------------------------------------------- clear errors


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: TPO("MlpPolicy", "MultiContextBandit-v0", n_envs=0), "n_envs must be an integer >= 1; got 0"),
        (lambda: TPO("MlpPolicy", "MultiContextBandit-v0", stats_window_size=0), "stats_window_size must be an integer >= 1; got 0"),
        (lambda: TPO("MlpPolicy", "MultiContextBandit-v0").learn(-5), "total_timesteps must be a whole number of env steps >= 0; got -5"),
        (lambda: TPO("MlpPolicy", "MultiContextBandit-v0").learn(2.5), "total_timesteps .* got 2.5"),
        (lambda: TPO("MlpPolicy", "MultiContextBandit-v0", eta="1"), r"eta must be a finite number > 0; got '1' \(str\)"),
        (lambda: TPO("MlpPolicy", "MultiContextBandit-v0", learning_rate=float("inf")), "learning_rate must be a finite number >= 0; got inf"),
        (lambda: TPO("MlpPolicy", "MultiContextBandit-v0", learning_rate=lambda p: 1e-3 if p > 0.5 else float("inf"), batch_size=8).learn(64), r"learning rate at progress 0\.\d+ must be a finite number >= 0; got inf"),
        (lambda: GRPO("MlpPolicy", "MultiContextBandit-v0", beta="0.1"), "beta must be a finite number >= 0"),
        (lambda: DG("MlpPolicy", "MultiContextBandit-v0", dg_eta=float("nan")), "dg_eta must be a finite number > 0; got nan"),
        (lambda: TPO("TransformerPolicy", gym.make("MultiContextBandit-v0")), "TransformerPolicy needs"),
        (lambda: TPO("MlpPolicy", "TinyArithmetic-v0"), r"MlpPolicy cannot read the Text observations of TinyArithmetic-v0 .*use CausalLMPolicy"),
        (lambda: TPO("MlpPolicy", "CartPole-v1", group_mode="per_state").learn(10), r"group_mode='per_state' needs an env that scores K candidates .*CartPole"),
        (lambda: TPO("MlpPolicy", ConstantReward(gym.make("CartPole-v1"), 1e39), batch_size=2, n_candidates=2).learn(50), r"reward of 1e\+39, beyond float32's range"),
    ],
)
def test_bad_input_is_named(make, match):
    with pytest.raises(ValueError, match=match):
        make()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message of a machine without CUDA")
def test_cuda_without_cuda_is_named():
    # SB3 falls back to the CPU (tests/test_sb3_dropin.py); the warning names why.
    with pytest.warns(UserWarning, match=r"device='cuda' but CUDA is not available.*using the CPU"):
        model = TPO("MlpPolicy", "MultiContextBandit-v0", device="cuda")
    assert model.device.type == "cpu"


def test_numpy_integer_seed_is_accepted():
    a = TPO("MlpPolicy", "MultiContextBandit-v0", seed=np.int64(3), batch_size=8).learn(64)
    b = TPO("MlpPolicy", "MultiContextBandit-v0", seed=3, batch_size=8).learn(64)
    assert all(torch.equal(x, y) for x, y in zip(weights(a), weights(b)))
