"""A learned critic that scores every action of a visited state: TPO on any discrete env.

Envs that cannot score candidates themselves (no ``score_candidates``) and give no group
hint, such as CartPole, get ``critic`` groups: at each visited state the agent follows one
sampled action, and the group is every action, scored by ``Q(s, a)``. The critic is a small
MLP trained off-policy on a replay of recent transitions toward expected-SARSA targets
``r + gamma * (1 - terminated) * sum_a' pi(a' | s') Q_target(s', a')`` (Polyak-averaged
target network). TPO's target and cross-entropy are unchanged: only the scores come from
the critic.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.preprocessing import get_flattened_obs_dim, preprocess_obs
from torch import nn

from tpo_agents.checks import int_at_least

__all__ = ["QCritic"]


class QCritic:
    """``Q(s, .)`` for a ``Discrete`` action space, with its replay, optimizer and target net.

    :param observation_space: the env's observation space (any SB3 preprocessable space).
    :param n_actions: the number of actions.
    :param gamma: discount.
    :param net_arch: hidden layer sizes.
    :param learning_rate: Adam's learning rate for the critic.
    :param buffer_size: transitions kept (the most recent).
    :param batch_size: transitions per critic gradient step.
    :param updates_per_step: critic gradient steps per collected transition.
    :param tau: Polyak coefficient of the target network.
    :param relative_floor: the advantages' scale is at least this fraction of the mean |V|.
    :param learning_starts: transitions the critic trains on before its advantages move the
        policy (until then they are 0, so the agent keeps its initial, exploratory policy):
        an unconverged critic's small, consistent errors can otherwise steer the policy into
        a corner it never leaves (non-slippery FrozenLake needs about 20,000).
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        n_actions: int,
        device: torch.device | str = "cpu",
        gamma: float = 0.99,
        net_arch: tuple[int, ...] = (64, 64),
        learning_rate: float = 1e-3,
        buffer_size: int = 50_000,
        batch_size: int = 256,
        updates_per_step: float = 0.25,
        tau: float = 0.005,
        relative_floor: float = 0.05,
        learning_starts: int = 0,
        seed: int | None = None,
    ):
        self.observation_space, self.n_actions, self.device = observation_space, n_actions, torch.device(device)
        self.gamma, self.batch_size, self.updates_per_step, self.tau = gamma, batch_size, updates_per_step, tau
        self.relative_floor = relative_floor
        self.learning_starts = int_at_least("learning_starts", learning_starts, 0)
        self.n_seen = 0
        """Transitions added so far."""
        dim = get_flattened_obs_dim(observation_space)
        layers: list[nn.Module] = []
        for width in net_arch:
            layers += [nn.Linear(dim, width), nn.ReLU()]
            dim = width
        self.q = nn.Sequential(*layers, nn.Linear(dim, n_actions)).to(self.device)
        self.q_target = copy.deepcopy(self.q).requires_grad_(False)
        self.optimizer = torch.optim.Adam(self.q.parameters(), lr=learning_rate)
        self.rng = np.random.default_rng(seed)
        self.buffer_size = buffer_size
        self._data: dict[str, np.ndarray] | None = None
        self._n = 0
        self._pos = 0
        self._pending = 0

    # ---------------------------------------------------------------- replay
    def _features(self, obs: Any) -> torch.Tensor:
        t = torch.as_tensor(np.asarray(obs), device=self.device)
        return preprocess_obs(t, self.observation_space).float().flatten(1)

    def add(self, obs, actions, rewards, next_obs, terminated) -> None:
        """Store one vector step of transitions (``next_obs``: the true next observations,
        terminal ones included)."""
        obs, next_obs = np.asarray(obs), np.asarray(next_obs)
        n = len(actions)
        if self._data is None:
            shape = (self.buffer_size, *obs.shape[1:])
            self._data = {
                "obs": np.zeros(shape, dtype=obs.dtype),
                "next_obs": np.zeros(shape, dtype=obs.dtype),
                "actions": np.zeros(self.buffer_size, dtype=np.int64),
                "rewards": np.zeros(self.buffer_size, dtype=np.float32),
                "terminated": np.zeros(self.buffer_size, dtype=np.float32),
            }
        idx = (self._pos + np.arange(n)) % self.buffer_size
        d = self._data
        d["obs"][idx], d["next_obs"][idx] = obs, next_obs
        d["actions"][idx], d["rewards"][idx], d["terminated"][idx] = actions, rewards, terminated
        self._pos = int((self._pos + n) % self.buffer_size)
        self._n = min(self._n + n, self.buffer_size)
        self._pending += n
        self.n_seen += n

    # ---------------------------------------------------------------- learning
    def update(self, policy) -> float:
        """Critic gradient steps for the transitions added since the last update; the mean
        TD loss."""
        steps = int(self._pending * self.updates_per_step)
        self._pending = 0
        if self._n < self.batch_size or steps == 0:
            return 0.0
        d, losses = self._data, []
        for _ in range(steps):
            i = self.rng.integers(0, self._n, size=self.batch_size)
            s, s2 = self._features(d["obs"][i]), self._features(d["next_obs"][i])
            with torch.no_grad():
                obs2, _ = policy.obs_to_tensor(d["next_obs"][i])
                pi2 = policy.action_log_probs(obs2).exp().to(self.device)
                v2 = (pi2 * self.q_target(s2)).sum(-1)
                r = torch.as_tensor(d["rewards"][i], device=self.device)
                done = torch.as_tensor(d["terminated"][i], device=self.device)
                y = r + self.gamma * (1 - done) * v2
            a = torch.as_tensor(d["actions"][i], device=self.device)
            q = self.q(s).gather(1, a[:, None]).squeeze(1)
            loss = nn.functional.smooth_l1_loss(q, y)
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            with torch.no_grad():
                for p, pt in zip(self.q.parameters(), self.q_target.parameters()):
                    pt.mul_(1 - self.tau).add_(p, alpha=self.tau)
            losses.append(loss.item())
        return float(np.mean(losses))

    @torch.no_grad()
    def advantages(self, obs, policy) -> torch.Tensor:
        """``(Q(s, a) - V(s)) / sigma`` for every action, ``V = sum_a pi(a | s) Q(s, a)`` and
        ``sigma`` the std of those advantages over the whole batch: one scale for all states,
        so a state whose actions the critic can hardly tell apart moves the policy little
        (standardizing each state's own few actions would turn any gap into +-1)."""
        q = self.scores(obs)
        if self.n_seen < self.learning_starts:
            return torch.zeros_like(q)  # the critic is still learning: no policy update yet
        obs_t, _ = policy.obs_to_tensor(obs)
        pi = policy.action_log_probs(obs_t).exp().float().cpu()
        v = (pi * q).sum(-1, keepdim=True)
        adv = q - v
        # Floor the scale at a fraction of the values' size: once the critic can hardly tell
        # actions apart (a good policy, values all alike), its noise must not be blown up
        # to unit-size scores.
        floor = self.relative_floor * v.abs().mean()
        return adv / torch.maximum(adv.std(), floor).clamp_min(1e-8)

    @torch.no_grad()
    def scores(self, obs) -> torch.Tensor:
        """``Q(s, a)`` for every action, ``[N, n_actions]`` (CPU float32)."""
        return self.q(self._features(obs)).float().cpu()
