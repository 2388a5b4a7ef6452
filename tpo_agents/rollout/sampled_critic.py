"""A learned ``Q(s, a)`` with the action as input: the scorer of ``critic`` groups of sampled candidates.

``MultiDiscrete``, ``MultiBinary`` and ``Box`` actions cannot be enumerated, so a ``critic``
group for them (docs/algorithms.md 4.5) is K actions *sampled* from the policy at a state,
each scored by :class:`SampledActionCritic`: an ensemble of MLPs over the observation's
features and an encoding of the action (one-hot per ``MultiDiscrete`` dimension, the bits of
a ``MultiBinary`` action, a ``Box`` action clipped to its bounds and rescaled to [-1, 1] where
they are finite). It is trained as the ``Discrete`` critic
(:class:`~tpo_agents.rollout.critic.QCritic`) is, off-policy on a replay of the real
transitions, toward expected-SARSA targets whose expectation over the next action is
estimated from ``n_target_actions`` actions sampled from the current policy. No state copy
is needed, so it works on any vector env (``SubprocVecEnv``, under ``VecNormalize`` or
``VecFrameStack``).

The scores of a group are :func:`~tpo_agents.rollout.critic.critic_advantages` with the
K samples as the "actions" and uniform weights: ``Q(s, a_k)`` minus the group's mean (the
samples come from the policy, so their mean estimates ``V(s)``), over one batch-wide scale.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from tpo_agents.checks import int_at_least
from tpo_agents.rollout.critic import (
    SAMPLED_BATCH_SIZE,
    SAMPLED_N_CRITICS,
    SAMPLED_N_TARGET_ACTIONS,
    SAMPLED_UPDATES_PER_STEP,
    QCritic,
    QEnsemble,
    critic_advantages,
)
from tpo_agents.rollout.observations import take_obs

__all__ = ["SAMPLED_ACTION_SPACES", "ActionEncoder", "SampledActionCritic"]

SAMPLED_ACTION_SPACES = (spaces.Box, spaces.MultiDiscrete, spaces.MultiBinary)
"""The action spaces whose ``critic`` groups are sampled candidates (``Discrete`` ones score
every action with :class:`~tpo_agents.rollout.critic.QCritic`)."""


class ActionEncoder:
    """The critic's view of an action: ``[..., d]`` actions as the policy samples them (flat)
    to ``[..., width]`` float features.

    ``MultiDiscrete``: one-hot per dimension (indices, without ``start``); ``MultiBinary``: the
    bits; ``Box``: clipped to the bounds (what the env is stepped with), then rescaled to
    [-1, 1] on the dimensions whose bounds are finite.
    """

    def __init__(self, action_space: spaces.Space):
        self.space = action_space
        if isinstance(action_space, spaces.MultiDiscrete):
            self.dims = [int(n) for n in np.asarray(action_space.nvec).ravel()]
            self.width, self.raw = sum(self.dims), len(self.dims)
        elif isinstance(action_space, spaces.MultiBinary):
            self.width = self.raw = int(np.prod(action_space.shape))
        elif isinstance(action_space, spaces.Box):
            self.width = self.raw = int(np.prod(action_space.shape))
            low = np.asarray(action_space.low, dtype=np.float64).ravel()
            high = np.asarray(action_space.high, dtype=np.float64).ravel()
            finite = np.isfinite(low) & np.isfinite(high)
            self.low, self.high = torch.as_tensor(low, dtype=torch.float32), torch.as_tensor(high, dtype=torch.float32)
            mid, half = np.where(finite, (low + high) / 2, 0.0), np.where(finite, (high - low) / 2, 1.0)
            self.mid = torch.as_tensor(mid, dtype=torch.float32)
            self.half = torch.as_tensor(np.maximum(half, 1e-8), dtype=torch.float32)
        else:
            raise ValueError(f"a critic of sampled actions cannot read {action_space}")

    def __call__(self, actions: torch.Tensor) -> torch.Tensor:
        space = self.space
        if isinstance(space, spaces.MultiDiscrete):
            idx = actions.long()
            return torch.cat([nn.functional.one_hot(idx[..., i], n) for i, n in enumerate(self.dims)], dim=-1).float()
        if isinstance(space, spaces.MultiBinary):
            return actions.float()
        dev = actions.device
        a = torch.maximum(torch.minimum(actions.float(), self.high.to(dev)), self.low.to(dev))
        return (a - self.mid.to(dev)) / self.half.to(dev)


class SampledActionCritic(QCritic):
    """``Q(s, a)`` with the action as input, for ``critic`` groups of K sampled actions.

    Takes every option of :class:`~tpo_agents.rollout.critic.QCritic` (``gamma``,
    ``net_arch``, ``learning_rate``, ``buffer_size``, ``batch_size``, ``updates_per_step``,
    ``tau``, the floors, ``n_critics``, ``noise_scale``, ``replay_states``,
    ``learning_starts``, ``bootstrap``, ``novelty``), except ``replay_pool`` (prioritized replayed states need every
    action's score; only 1 is accepted), and:

    :param action_space: the env's (single) action space, one of :data:`SAMPLED_ACTION_SPACES`.
    :param n_target_actions: next actions sampled from the current policy per transition to
        estimate ``E_{a' ~ pi} Q(s', a')`` in the expected-SARSA target (default
        :data:`~tpo_agents.rollout.critic.SAMPLED_N_TARGET_ACTIONS`, 2).
    :param n_critics: the ensemble's size; four by default (:data:`~tpo_agents.rollout.critic.SAMPLED_N_CRITICS`),
        where the ``Discrete`` critic has two.
    :param batch_size: transitions per critic step; 128 by default
        (:data:`~tpo_agents.rollout.critic.SAMPLED_BATCH_SIZE`), where the ``Discrete`` critic
        takes 256.
    :param updates_per_step: critic steps per collected transition; 0.2 by default
        (:data:`~tpo_agents.rollout.critic.SAMPLED_UPDATES_PER_STEP`), where the ``Discrete``
        critic takes 0.25.
    """

    sampled = True
    """Its groups are actions sampled from the policy (not every action)."""

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        device: torch.device | str = "cpu",
        n_target_actions: int = SAMPLED_N_TARGET_ACTIONS,
        net_arch: tuple[int, ...] = (64, 64),
        n_critics: int = SAMPLED_N_CRITICS,
        batch_size: int = SAMPLED_BATCH_SIZE,
        updates_per_step: float = SAMPLED_UPDATES_PER_STEP,
        **kwargs: Any,
    ):
        if kwargs.get("replay_pool", 1) != 1:
            raise ValueError(
                "replay_pool > 1 (prioritized replayed states) needs every action's score, which a "
                f"critic of sampled actions does not have ({action_space}); leave replay_pool at 1"
            )
        self.encoder = ActionEncoder(action_space)
        self.n_target_actions = int_at_least("n_target_actions", n_target_actions, 1)
        super().__init__(observation_space, 1, device, net_arch=net_arch, n_critics=n_critics, batch_size=batch_size,
                         updates_per_step=updates_per_step, **kwargs)
        # The observation's features as the Discrete critic reads them (its first layer's
        # input), then the action's.
        in_dim = self.q.in_dim + self.encoder.width
        self.q = QEnsemble(in_dim, 1, tuple(net_arch), self.n_critics).to(self.device)
        self.q_target = copy.deepcopy(self.q).requires_grad_(False)
        self.optimizer = self._make_optimizer(self.optimizer.param_groups[0]["lr"])
        self._actions: np.ndarray | None = None
        """The replay's actions, ``[buffer_size, d]``, at the indices of its transitions."""

    def q_values(self, net: nn.Module, features: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """``Q(s_i, a_ik)`` of every critic, ``[n_critics, N, K]``, from state features
        ``[N, f]`` and actions ``[N, K, d]``."""
        N, K = actions.shape[:2]
        s = features[:, None, :].expand(N, K, features.shape[-1])
        x = torch.cat([s, self.encoder(actions.to(self.device))], dim=-1).reshape(N * K, -1)
        return net(x).reshape(self.n_critics, N, K)

    # ---------------------------------------------------------------- replay
    def add(self, obs, actions, rewards, next_obs, terminated, ended=None) -> None:
        """Store one vector step of transitions (``actions``: ``[n_envs, d]`` as the policy
        sampled them; ``next_obs``: the true next observations, terminal ones included). The
        observations, rewards and ends are kept as the ``Discrete`` critic keeps them, the
        actions beside them."""
        n = len(actions)
        if self._actions is None:
            self._actions = np.zeros((self.buffer_size, self.encoder.raw), dtype=np.float32)
        self._actions[(self._pos + np.arange(n)) % self.buffer_size] = np.asarray(actions, dtype=np.float32).reshape(n, -1)
        super().add(obs, np.zeros(n, dtype=np.int64), rewards, next_obs, terminated, ended)

    # ---------------------------------------------------------------- learning
    def _policy_at_next(self, policy, obs2) -> torch.Tensor:
        """As :meth:`QCritic._policy_at_next`, ``n_target_actions`` next actions sampled from the
        policy per row, ``[N, n_target_actions, d]``, instead of its probabilities, drawn per
        ``batch_size`` rows as the per-step calls drew them (the chunks are whole steps)."""
        return policy.sample_actions(obs2, self.n_target_actions, block=self.batch_size)

    def _q_and_target(self, i: np.ndarray, policy, prepared=None) -> tuple[torch.Tensor, torch.Tensor]:
        """As :meth:`QCritic._q_and_target`, the next state's value averaged over
        ``n_target_actions`` actions sampled from the policy (the actions cannot be summed over)."""
        d = self._data
        window, a2 = self._prepare(i, policy) if prepared is None else prepared
        next_obs = take_obs(d["next_obs"], i if window is None else window[2])
        s, s2 = self._features(take_obs(d["obs"], i)), self._features(next_obs, target=True)
        with torch.no_grad():
            y = self._td_target(i, self.q_values(self.q_target, s2, a2).mean(-1), window)
        a = torch.as_tensor(self._actions[i], device=self.device)[:, None]
        return self.q_values(self.q, s, a)[..., 0], y

    @torch.no_grad()
    def advantages(self, obs, candidates: torch.Tensor, policy=None) -> torch.Tensor:
        """The scores of K sampled candidates per state (``candidates`` ``[N, K, d]``), ``[N, K]``:
        :func:`~tpo_agents.rollout.critic.critic_advantages` with uniform weights over the
        samples, so ``V(s)`` is their mean ``Q`` and the scale is one for the batch."""
        qs = self.q_values(self.q, self._features(obs), candidates).float().cpu()
        if self.n_seen < self.learning_starts:
            return torch.zeros_like(qs[0])
        uniform = torch.full_like(qs[0], 1.0 / qs.shape[-1])
        return critic_advantages(qs, uniform, self.relative_floor, self.noise_scale, self.value_floor)

    @torch.no_grad()
    def scores(self, obs, candidates: torch.Tensor) -> torch.Tensor:
        """``Q(s, a_k)`` of K candidates per state (the critics' mean), ``[N, K]`` (CPU float32)."""
        return self.q_values(self.q, self._features(obs), candidates).mean(0).float().cpu()
