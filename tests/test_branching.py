"""Branch groups: candidates scored by playing them from copies of the env's state."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecMonitor, VecNormalize

from tpo_agents import GRPO, TPO
from tpo_agents.rollout.branching import BranchScorer, branchable_envs


class Chain(gym.Env):
    """Positions 0..4; action 1 moves right, 0 left (floored at 0); reaching 4 pays 1 and ends."""

    observation_space = spaces.Discrete(5)
    action_space = spaces.Discrete(2)

    def __init__(self, start: int = 0):
        self.start, self.x = start, start

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.x = self.start
        return self.x, {}

    def step(self, action):
        self.x = min(4, self.x + 1) if action == 1 else max(0, self.x - 1)
        done = self.x == 4
        return self.x, float(done), done, False, {}


class AlwaysRight:
    """A stand-in policy that always samples action 1."""

    def obs_to_tensor(self, obs):
        return torch.as_tensor(obs), True

    def sample_actions(self, obs, n=1):
        return torch.ones(len(obs), n, dtype=torch.long)

    def env_actions(self, actions):
        return np.asarray(actions)


def _chain_vec(*starts: int) -> DummyVecEnv:
    vec = DummyVecEnv([lambda s=s: Chain(s) for s in starts])
    vec.reset()
    return vec


def test_branch_scores_are_discounted_lookahead_returns_and_leave_the_live_env_alone():
    vec = _chain_vec(1, 3)
    scorer = BranchScorer(vec, horizon=5, gamma=0.5)
    scores = scorer.score(np.array([[0, 1], [0, 1]]), AlwaysRight())
    # From 1: left then right x4 reaches 4 at step 5 (0.5^4); right reaches it at step 3 (0.5^2).
    # From 3: left then right reaches 4 at step 3 (0.5^2); right pays at once (1).
    np.testing.assert_allclose(scores, [[0.5**4, 0.5**2], [0.5**2, 1.0]])
    assert [env.x for env in vec.envs] == [1, 3]  # the live envs did not move
    assert scorer.env_steps == 5 + 3 + 3 + 1
    short = BranchScorer(vec, horizon=2, gamma=1.0).score(np.array([[0, 1], [0, 1]]), AlwaysRight())
    np.testing.assert_allclose(short, [[0.0, 0.0], [0.0, 1.0]])  # a 2-step lookahead ends early


class RestorableChain(Chain):
    """A chain whose state cannot be deep-copied but can be cloned and restored (as ALE)."""

    def __deepcopy__(self, memo):
        raise TypeError("a simulator handle")

    def clone_state(self):
        return {"x": self.x}

    def restore_state(self, state):
        self.x = state["x"]


def test_envs_with_clone_and_restore_state_branch_on_the_unwrapped_env():
    vec = DummyVecEnv([lambda s=s: gym.wrappers.TimeLimit(RestorableChain(s), 50) for s in (1, 3)])
    vec.reset()
    scorer = BranchScorer(vec, horizon=5, gamma=0.5)
    scores = scorer.score(np.array([[0, 1], [0, 1]]), AlwaysRight())
    np.testing.assert_allclose(scores, [[0.5**4, 0.5**2], [0.5**2, 1.0]])  # as with copies
    assert [env.unwrapped.x for env in vec.envs] == [1, 3]  # restored
    assert [env.get_wrapper_attr("_elapsed_steps") for env in vec.envs] == [0, 0]  # wrappers untouched
    assert scorer.env_steps == 5 + 3 + 3 + 1
    wrapped = DummyVecEnv([lambda: gym.wrappers.TransformObservation(RestorableChain(), lambda o: o, None)])
    wrapped.reset()
    with pytest.raises(ValueError, match="bypassing the observation wrapper TransformObservation"):
        BranchScorer(wrapped).score(np.array([[0, 1]]), AlwaysRight())


def test_branching_refuses_what_it_cannot_copy():
    with pytest.raises(ValueError, match="needs a DummyVecEnv; got SubprocVecEnv"):
        branchable_envs(SubprocVecEnv([lambda: Chain()], start_method="fork"))
    with pytest.raises(ValueError, match="cannot branch through VecNormalize"):
        branchable_envs(VecNormalize(make_vec_env("CartPole-v1", n_envs=1)))
    assert len(branchable_envs(VecMonitor(_chain_vec(0, 1)))) == 2

    class Handle(Chain):
        def __deepcopy__(self, memo):
            raise TypeError("cannot pickle a simulator handle")

    vec = DummyVecEnv([Handle])
    vec.reset()
    with pytest.raises(ValueError, match="could not copy sub-env 0 .*Handle.*simulator handle"):
        BranchScorer(vec).score(np.array([[0, 1]]), AlwaysRight())
    with pytest.raises(ValueError, match="horizon must be an integer >= 1"):
        BranchScorer(vec, horizon=0)
    with pytest.raises(ValueError, match="gamma must be a discount in"):
        BranchScorer(vec, gamma=1.5)
    with pytest.raises(ValueError, match="branch_kwargs takes 'horizon' and 'gamma'"):
        TPO("MlpPolicy", "CartPole-v1", group_mode="branch", branch_kwargs={"depth": 3})


def test_branch_groups_hold_every_action_or_k_samples_and_count_only_real_steps():
    model = TPO("MlpPolicy", "CartPole-v1", group_mode="branch", batch_size=16, seed=0,
                branch_kwargs={"horizon": 4})
    model.learn(64)
    batch = model.last_batch
    assert model.resolve_group_mode() == "branch"
    assert batch.group_size == 2  # CartPole's two actions, both scored
    assert torch.equal(batch.step_action.view(-1, 2), torch.tensor([[0, 1]]).repeat(batch.n_groups, 1))
    assert model.num_timesteps == 64 and model._branch_scorer.env_steps > 64  # simulation is not experience
    # ... but it is an env interaction: counted apart, and in the total a fair budget equalizes
    assert model.branch_env_steps == model._branch_scorer.env_steps
    assert model.env_steps_total == 64 + model.branch_env_steps
    assert 0 < batch.scores.max() <= 4  # a 4-step lookahead of reward 1 per step
    many = GRPO("MlpPolicy", gym.make("FrozenLake-v1"), group_mode="branch", n_candidates=2, batch_size=8, seed=0)
    many.learn(16)
    assert many.last_batch.group_size == 2  # 4 actions > K = 2: K sampled candidates


def test_an_env_can_ask_for_branch_groups_in_its_metadata():
    class Branchy(Chain):
        metadata = {"tpo_group_mode": "branch"}

    assert TPO("MlpPolicy", Branchy()).resolve_group_mode() == "branch"
    assert GRPO("MlpPolicy", Branchy()).resolve_group_mode() == "branch"
    with pytest.raises(ValueError, match="group_mode 'branch' is not available for TransformerPolicy"):
        TPO("TransformerPolicy", "TokenReversal-terminal-v0", group_mode="branch", batch_size=2).learn(8)


def test_a_branching_agent_saves_loads_and_continues(tmp_path):
    model = TPO("MlpPolicy", "CartPole-v1", group_mode="branch", batch_size=8, seed=0, branch_kwargs={"horizon": 3})
    model.learn(32)
    model.save(tmp_path / "m.zip")
    loaded = TPO.load(tmp_path / "m.zip", env=make_vec_env("CartPole-v1", n_envs=2))
    assert loaded.branch_kwargs == {"horizon": 3}
    loaded.learn(16)
    assert loaded.resolve_group_mode() == "branch" and len(loaded._branch_scorer.envs) == 2


@pytest.mark.slow
def test_tpo_balances_cartpole_by_branching():
    model = TPO("MlpPolicy", "CartPole-v1", group_mode="branch", seed=0)
    model.learn(20_000)
    mean_return, _ = evaluate_policy(model, gym.make("CartPole-v1"), n_eval_episodes=10, deterministic=True)
    assert mean_return >= 200, mean_return  # a random policy: ~20 (measured: 424 at seed 0)


# ----------------------------------------------------------------------------- Box actions


class Reach(gym.Env):
    """One-step episodes: the observation is a target in [-1, 1], the reward -(a - target)^2."""

    observation_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = spaces.Box(-2.0, 2.0, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.target = self.np_random.uniform(-1, 1, size=1).astype(np.float32)
        return self.target, {}

    def step(self, action):
        reward = -float(((np.asarray(action) - self.target) ** 2).sum())
        return self.target, reward, True, False, {}


def test_the_gaussian_policy_samples_scores_and_clips_like_a_diagonal_normal():
    from tpo_agents.policies import GaussianMlpPolicy

    policy = GaussianMlpPolicy(spaces.Box(-1, 1, (3,)), spaces.Box(-1.0, 1.0, (2,), np.float32), lambda _: 1e-3,
                               log_std_init=-0.5)
    obs = torch.randn(4, 3)
    actions = policy.sample_actions(obs, 5)
    assert actions.shape == (4, 5, 2)
    rows = torch.tensor([0, 3, 3])
    picked = torch.randn(3, 2)
    mean = torch.tanh(policy.mean_net(obs))[rows]  # the mean kept inside the bounds [-1, 1]
    std = torch.exp(torch.tensor(-0.5))
    by_hand = (-((picked - mean) ** 2) / (2 * std**2) - torch.log(std) - 0.5 * np.log(2 * np.pi)).sum(-1)
    torch.testing.assert_close(policy.step_log_probs(obs, rows, picked), by_hand)
    assert policy.env_actions(np.array([[3.0, -0.5]])).tolist() == [[1.0, -0.5]]
    with pytest.raises(ValueError, match="needs a Box action space"):
        GaussianMlpPolicy(spaces.Box(-1, 1, (3,)), spaces.Discrete(2), lambda _: 1e-3)


def test_tpo_learns_box_actions_from_branch_groups_and_saves(tmp_path):
    model = TPO("MlpPolicy", Reach(), seed=0, batch_size=32, group_mode="branch", branch_kwargs={"horizon": 1})
    assert type(model.policy).__name__ == "GaussianMlpPolicy" and model.resolve_group_mode() == "branch"
    obs = np.linspace(-1, 1, 9, dtype=np.float32)[:, None]
    before = np.abs(model.predict(obs, deterministic=True)[0] - obs).mean()
    model.learn(4000)
    assert model._batch.step_action.shape[1:] == (1,) and model._batch.group_size == 8
    after = np.abs(model.predict(obs, deterministic=True)[0] - obs).mean()
    assert after < 0.2 < before, (before, after)  # the mean action tracks the target
    model.save(tmp_path / "box.zip")
    loaded = TPO.load(tmp_path / "box.zip", env=Reach())
    np.testing.assert_allclose(loaded.predict(obs, deterministic=True)[0], model.predict(obs, deterministic=True)[0])
    loaded.learn(64)


def test_box_actions_take_the_modes_of_sampled_actions():
    # Box actions: branch, critic (a learned Q(s, a)), sequence or single groups
    # (tests/test_action_spaces.py); the modes that enumerate Discrete actions are refused.
    from tpo_agents import DG

    with pytest.raises(ValueError, match="group_mode='all_actions' enumerates or scores Discrete actions.*'critic'"):
        TPO("MlpPolicy", Reach(), group_mode="all_actions")
    assert DG("MlpPolicy", Reach()).resolve_group_mode() == "single"

    class Planar(Reach):
        action_space = spaces.Box(-1.0, 1.0, (2, 2), np.float32)

    model = TPO("MlpPolicy", Planar(), group_mode="branch", batch_size=4, branch_kwargs={"horizon": 1})
    model.learn(8)
    assert model.last_batch.step_action.shape[1:] == (4,)  # flattened inside the policy


def test_verbose_agents_say_which_group_mode_auto_chose_and_why(capsys):
    TPO("MlpPolicy", "CartPole-v1", verbose=1)
    TPO("MlpPolicy", "Pendulum-v1", verbose=1)
    GRPO("MlpPolicy", "CartPole-v1", group_mode="branch", verbose=1)
    TPO("MlpPolicy", "CartPole-v1")  # verbose=0: silent
    out = capsys.readouterr().out
    assert "TPO: group_mode='auto' chose 'critic' on CartPole-v1: the env neither scores candidates" in out
    assert "TPO: group_mode='auto' chose 'critic' on Pendulum-v1: K actions sampled per state are scored" in out
    assert "GRPO: group_mode='branch' as given, on CartPole-v1" in out
    assert out.count("group_mode=") == 3
