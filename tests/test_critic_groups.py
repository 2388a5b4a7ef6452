"""Critic groups: TPO and GRPO on envs that neither score candidates nor hint a group mode."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from stable_baselines3.common.evaluation import evaluate_policy

from tpo_agents import GRPO, TPO, MlpPolicy
from tpo_agents.rollout.critic import QCritic
from tpo_agents.rollout.step import _true_next_obs


def test_the_critic_learns_which_action_pays():
    obs_space, n_actions = spaces.Discrete(4), 3
    policy = MlpPolicy(obs_space, spaces.Discrete(n_actions), lambda _: 1e-3)
    critic = QCritic(obs_space, n_actions, batch_size=64, updates_per_step=1.0, seed=0)
    rng = np.random.default_rng(0)
    for _ in range(30):  # one-step episodes: the reward is 1 for action s % 3
        s = rng.integers(0, 4, size=32)
        a = rng.integers(0, n_actions, size=32)
        critic.add(s, a, (a == s % 3).astype(np.float32), s, np.ones(32, dtype=bool))
        critic.update(policy)
    q = critic.scores(np.arange(4))
    assert q.argmax(-1).tolist() == [0, 1, 2, 0]
    torch.testing.assert_close(q.max(-1).values, torch.ones(4), atol=0.15, rtol=0)


def test_a_finished_sub_env_bootstraps_from_its_terminal_observation():
    new_obs = np.array([[0.0], [5.0]])  # sub-env 1 finished and was reset to 5
    infos = [{}, {"terminal_observation": np.array([9.0])}]
    assert _true_next_obs(new_obs, np.array([False, True]), infos).tolist() == [[0.0], [9.0]]


def test_critic_groups_are_chosen_for_envs_without_scores_or_hints():
    assert TPO("MlpPolicy", "CartPole-v1").resolve_group_mode() == "critic"
    assert GRPO("MlpPolicy", "FrozenLake-v1").resolve_group_mode() == "critic"
    assert TPO("MlpPolicy", "CartPole-v1", group_mode="sequence").resolve_group_mode() == "sequence"
    model = TPO("MlpPolicy", "CartPole-v1", batch_size=16, seed=0).learn(64)
    batch = model._batch
    assert batch.group_size == 2 and batch.n_groups >= 16  # every action of each visited state
    assert torch.equal(batch.step_action.view(-1, 2), torch.tensor([[0, 1]]).repeat(batch.n_groups, 1))


@pytest.mark.slow
def test_tpo_with_default_hyperparameters_balances_cartpole():
    model = TPO("MlpPolicy", "CartPole-v1", seed=0)
    model.learn(30_000)
    mean_return, _ = evaluate_policy(model, gym.make("CartPole-v1"), n_eval_episodes=10, deterministic=True)
    assert mean_return >= 150, mean_return  # a random policy: ~20; 500 is the maximum


@pytest.mark.slow
def test_tpo_with_default_hyperparameters_swings_up_acrobot():
    # Acrobot pays -1 per step: |V| is about 100 while the first useful advantages are about
    # 0.006. A floor on |V| held the policy at -500 for 200k steps; the default floor, on the
    # spread of V, lets it take off (measured: about -85 from 40k to 50k steps, 5 of 5 seeds).
    model = TPO("MlpPolicy", "Acrobot-v1", seed=0).learn(60_000)
    mean_return, _ = evaluate_policy(model, gym.make("Acrobot-v1"), n_eval_episodes=5, deterministic=True, warn=False)
    assert mean_return >= -200, mean_return  # a random policy: -500 (the time limit)


def test_grpo_takes_the_critics_advantages_as_they_are():
    from tpo_agents import objectives as obj

    scores = torch.tensor([[1.0, 3.0, 2.0], [0.5, 0.5, 2.0]])
    logp = torch.log_softmax(torch.randn(2, 3), -1)
    old = logp + 0.1 * torch.randn(2, 3)
    standard = obj.grpo_loss(logp, old, scores)
    given = obj.grpo_loss(logp, old, scores, advantages=obj.grpo_advantages(scores))
    torch.testing.assert_close(standard, given)
    scaled = obj.grpo_loss(logp, old, scores, advantages=0.5 * obj.grpo_advantages(scores), beta=0.0)
    torch.testing.assert_close(scaled, 0.5 * obj.grpo_loss(logp, old, scores, beta=0.0))
    model = GRPO("MlpPolicy", "CartPole-v1", batch_size=16, seed=0).learn(64)
    assert model._batch.standardized and model.resolve_group_mode() == "critic"


def test_grpo_on_critic_groups_follows_the_expected_advantage_gradient():
    # Every action of a state is a candidate: weighted by pi_old, GRPO's first-epoch gradient
    # (rho = 1, KL gradient 0) is the policy gradient -sum_a pi(a) A_a grad log pi(a), per state.
    from tpo_agents import objectives as obj

    logits = torch.randn(3, 4, requires_grad=True)
    adv = torch.randn(3, 4)
    logp = torch.log_softmax(logits, -1)
    old = logp.detach()
    loss = obj.grpo_loss(logp, old, adv, beta=0.04, weights=old.exp(), advantages=adv)
    (grad,) = torch.autograd.grad(loss, logits)
    pi = old.exp()
    expected = -(pi * (adv - (pi * adv).sum(-1, keepdim=True))) / 3  # mean over the 3 states
    torch.testing.assert_close(grad, expected)


@pytest.mark.slow
def test_grpo_with_default_hyperparameters_solves_identity_env():
    from stable_baselines3.common.envs import IdentityEnv

    model = GRPO("MlpPolicy", IdentityEnv(10), seed=0).learn(10_000)
    mean_return, _ = evaluate_policy(model, IdentityEnv(10), n_eval_episodes=5, deterministic=True, warn=False)
    assert mean_return >= 90, mean_return  # SB3's own bar; random ~10 (measured 100 at seed 0)


def test_critic_learning_starts_holds_the_policy_until_the_critic_has_trained():
    model = TPO("MlpPolicy", "CartPole-v1", batch_size=16, seed=0, critic_kwargs={"learning_starts": 300})
    start = [p.detach().clone() for p in model.policy.parameters()]
    model.learn(256)
    assert model.critic.n_seen >= 256 and model.critic._n > 0  # the critic has been trained on them
    assert all(torch.equal(a, b) for a, b in zip(start, model.policy.parameters()))  # the policy has not moved
    model.learn(256, reset_num_timesteps=False)
    assert any(not torch.equal(a, b) for a, b in zip(start, model.policy.parameters()))
    with pytest.raises(ValueError, match="learning_starts must be an integer >= 0; got -1"):
        TPO("MlpPolicy", "CartPole-v1", critic_kwargs={"learning_starts": -1}).learn(16)


@pytest.mark.slow
def test_a_critic_warm_up_lets_tpo_solve_frozen_lake():
    # Without it the policy settles on the start corner before the critic can tell the
    # actions apart (0.0); with 20k transitions of warm-up it reaches the goal (measured: 1.0
    # from 30k steps on, seeds 0 and 1).
    env = gym.make("FrozenLake-v1", is_slippery=False)
    model = TPO("MlpPolicy", env, seed=0, critic_kwargs={"learning_starts": 20_000}).learn(30_000)
    mean_return, _ = evaluate_policy(model, gym.make("FrozenLake-v1", is_slippery=False), n_eval_episodes=5, warn=False)
    assert mean_return == 1.0, mean_return


@pytest.mark.slow
def test_replayed_states_let_tpo_solve_frozen_lake_with_defaults():
    # Seed 2 settles on the start corner when only visited states are fitted (0.0 at 30k
    # steps): the state next to the goal is seen too seldom. Fitting replayed states too
    # (the default) reaches the goal (measured: 1.0 from 18k steps on).
    env = gym.make("FrozenLake-v1", is_slippery=False)
    model = TPO("MlpPolicy", env, seed=2).learn(30_000)
    mean_return, _ = evaluate_policy(model, gym.make("FrozenLake-v1", is_slippery=False), n_eval_episodes=5, warn=False)
    assert mean_return == 1.0, mean_return


def test_critic_advantages_closed_form_with_one_critic():
    from tpo_agents.rollout.critic import critic_advantages

    q = torch.tensor([[[1.0, 3.0], [2.0, 2.0], [0.0, 4.0]]])  # one critic, 3 states, 2 actions
    pi = torch.tensor([[0.5, 0.5], [0.25, 0.75], [1.0, 0.0]])
    adv = torch.tensor([[-1.0, 1.0], [0.0, 0.0], [0.0, 4.0]])  # Q - sum_a pi Q
    torch.testing.assert_close(critic_advantages(q, pi, 0.0, 0.0), adv / adv.std())
    # The floor: 10 x the mean |V| (2, 2, 0 -> 4/3) is above the advantages' std.
    torch.testing.assert_close(critic_advantages(q, pi, 10.0, 0.0), adv / (10.0 * 4 / 3))


def test_the_scale_is_at_least_a_fraction_of_the_spread_of_state_values():
    from tpo_agents.rollout.critic import critic_advantages

    q = torch.tensor([[[1.0, 3.0], [2.0, 2.0], [0.0, 4.0]]])
    pi = torch.tensor([[0.5, 0.5], [0.25, 0.75], [1.0, 0.0]])
    adv = torch.tensor([[-1.0, 1.0], [0.0, 0.0], [0.0, 4.0]])
    v_std = torch.tensor([2.0, 2.0, 0.0]).std()  # V = (2, 2, 0)
    torch.testing.assert_close(critic_advantages(q, pi, 0.0, 0.0, value_floor=10.0), adv / (10.0 * v_std))
    torch.testing.assert_close(critic_advantages(q, pi, 0.0, 0.0, value_floor=0.5), adv / adv.std())  # below
    # A constant added to every Q moves |V| but not the spread of V: the value floor ignores it.
    shifted = critic_advantages(q - 100.0, pi, 0.0, 0.0, value_floor=10.0)
    torch.testing.assert_close(shifted, adv / (10.0 * v_std))
    assert critic_advantages(q - 100.0, pi, 0.05, 0.0).abs().max() < 1.0  # the |V| floor shrinks them
    # One state: no spread, no floor from it.
    torch.testing.assert_close(critic_advantages(q[:, :1], pi[:1], 0.0, 0.0, value_floor=10.0), torch.tensor([[-1.0, 1.0]]) / 2**0.5)


def test_the_default_floors_and_bad_floors_are_named():
    assert (QCritic(spaces.Discrete(4), 2).relative_floor, QCritic(spaces.Discrete(4), 2).value_floor) == (0.0, 0.5)
    for name in ("relative_floor", "value_floor"):
        with pytest.raises(ValueError, match=name):
            QCritic(spaces.Discrete(4), 2, **{name: -0.1})


def test_critic_advantages_shrink_where_the_critics_disagree():
    from tpo_agents.rollout.critic import critic_advantages

    pi = torch.full((2, 2), 0.5)
    # State 0: both critics say +-1; state 1: they say +-1 and -+3 (mean -+1, disagreement 2*sqrt2).
    qs = torch.tensor([[[0.0, 2.0], [0.0, 2.0]], [[0.0, 2.0], [4.0, -2.0]]])
    adv = torch.tensor([[-1.0, 1.0], [1.0, -1.0]])
    assert torch.equal(critic_advantages(qs, pi, 0.0, 0.0), adv / adv.std())  # noise_scale 0: off
    disagreement = torch.tensor([[0.0], [2.0 * 2**0.5]])  # std over critics of (adv_1, adv_2)
    expected = adv / torch.maximum(adv.std(), 0.5 * disagreement)
    torch.testing.assert_close(critic_advantages(qs, pi, 0.0, 0.5), expected)
    assert critic_advantages(qs, pi, 0.0, 0.5)[0].tolist() == (adv[0] / adv.std()).tolist()  # agreed: as before


def test_the_default_critic_is_an_ensemble_and_bad_options_are_named():
    model = TPO("MlpPolicy", "CartPole-v1", batch_size=16, seed=0).learn(64)
    assert model.critic.n_critics == 4 and model.critic.q(torch.zeros(3, 4)).shape == (4, 3, 2)
    with pytest.raises(ValueError, match="n_critics"):
        QCritic(spaces.Discrete(4), 2, n_critics=0)
    with pytest.raises(ValueError, match="noise_scale"):
        QCritic(spaces.Discrete(4), 2, noise_scale=-1.0)


def test_replay_states_are_drawn_from_the_critics_replay():
    obs_space = spaces.Discrete(16)
    critic = QCritic(obs_space, 4, replay_states=2.0, seed=0)
    assert critic.replay_states(10) is None  # nothing stored yet
    seen = np.array([3, 5, 7, 11])
    critic.add(seen, np.zeros(4, dtype=np.int64), np.zeros(4), seen, np.zeros(4, dtype=bool))
    drawn = critic.replay_states(10)
    assert drawn.shape == (20,) and set(drawn.tolist()) <= set(seen.tolist())
    assert QCritic(obs_space, 4, seed=0).replay_states_ratio == 1.0  # the default
    assert QCritic(obs_space, 4, replay_states=0.0, seed=0).replay_states(10) is None  # 0: off
    with pytest.raises(ValueError, match="replay_states"):
        QCritic(obs_space, 4, replay_states=-0.5)


def test_critic_groups_fit_the_target_on_replayed_states_too():
    # By default each update fits the target on the visited states and on as many replayed
    # ones; the env-step count is the visited states' alone.
    model = TPO("MlpPolicy", "CartPole-v1", batch_size=16, seed=0).learn(64)
    batch = model._batch
    assert model.num_timesteps == 64 and batch.n_groups == 32
    replayed = batch.states[16:]
    stored = model.critic._data["obs"][: model.critic._n]
    assert all((stored == s).all(-1).any() for s in replayed)  # every replayed state was stored
    off = TPO("MlpPolicy", "CartPole-v1", batch_size=16, seed=0, critic_kwargs={"replay_states": 0.0}).learn(64)
    assert off._batch.n_groups == 16


def test_target_residual_is_the_kl_from_the_target_to_the_policy():
    from tpo_agents.rollout.critic import target_residual

    logp = torch.log(torch.tensor([[0.5, 0.5], [0.2, 0.8]]))
    u = torch.tensor([[1.0, -1.0], [0.3, 0.3]])  # state 1: constant scores, q = p
    q0 = torch.tensor([np.e, 1 / np.e]) / (np.e + 1 / np.e)
    expected0 = float((q0 * torch.log(q0 / 0.5)).sum())
    torch.testing.assert_close(target_residual(logp, u), torch.tensor([expected0, 0.0]), atol=1e-6, rtol=0)


def test_prioritized_replay_picks_the_states_whose_target_the_policy_has_not_met():
    obs_space = spaces.Discrete(16)
    policy = MlpPolicy(obs_space, spaces.Discrete(4), lambda _: 1e-3)
    critic = QCritic(obs_space, 4, replay_pool=32, seed=0)
    states = np.arange(16).repeat(10)  # every state equally often in the replay
    critic.add(states, np.zeros(160, dtype=np.int64), np.zeros(160), states, np.zeros(160, dtype=bool))

    def advantages(obs, _policy):  # only state 5 has actions that differ
        u = torch.zeros(len(obs), 4)
        u[np.asarray(obs) == 5] = torch.tensor([3.0, -1.0, -1.0, -1.0])
        return u

    critic.advantages = advantages
    drawn = critic.replay_states(4, policy)
    assert drawn.tolist() == [5, 5, 5, 5]  # 128 drawn into the pool, 8 of them state 5 on average
    uniform = QCritic(obs_space, 4, replay_pool=1, seed=0)
    uniform.add(states, np.zeros(160, dtype=np.int64), np.zeros(160), states, np.zeros(160, dtype=bool))
    assert len(set(uniform.replay_states(40, policy).tolist())) > 5
    with pytest.raises(ValueError, match="replay_pool"):
        QCritic(obs_space, 4, replay_pool=0)
