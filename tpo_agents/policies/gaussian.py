"""A diagonal-Gaussian MLP policy for ``Box`` action spaces (SB3 ``BasePolicy``).

Continuous actions have no finite candidate set, so a group is K actions *sampled* from the
policy at a visited state (``branch`` groups, docs/algorithms.md 4.6), and a candidate's
log-probability is its Gaussian log-density. TPO's target over the group is then
``q_k ∝ p_old(a_k) exp(u_k)`` renormalized over the K samples, as for sampled sequences.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.torch_layers import (
    BaseFeaturesExtractor,
    FlattenExtractor,
)
from stable_baselines3.common.type_aliases import PyTorchObs, Schedule
from torch import nn

from tpo_agents.policies.base import draw_in_blocks
from tpo_agents.policies.mlp_body import MlpBodyPolicy

__all__ = ["GaussianMlpPolicy"]


def _normal(mean: torch.Tensor, std: torch.Tensor) -> torch.distributions.Normal:
    """``Normal(mean, std)`` without torch's argument validation, which costs more than the
    policy's forward at one env (about 0.1 ms a call, every env step and critic step); the
    one check that can fail here, a non-finite mean (from a non-finite observation), is made
    once, with a message that says so. Samples and log-densities are the validated ones."""
    if not bool(torch.isfinite(mean).all()):
        raise ValueError(
            "the Gaussian policy's action mean is not finite (NaN or inf): an observation holds "
            "NaN or inf, or the policy diverged; check the env's observations"
        )
    return torch.distributions.Normal(mean, std, validate_args=False)


class GaussianMlpPolicy(MlpBodyPolicy):
    """Features -> MLP -> the mean of a diagonal Gaussian; a learned, state-independent
    log standard deviation (SB3's parametrisation). Actions are not squashed: they are clipped
    to the ``Box`` bounds when the env is stepped and by ``predict``, as SB3's PPO does.
    ``predict(obs, deterministic=True)`` is the mean.

    The *mean* is kept inside the bounds (``squash_mean``): on each dimension with finite
    bounds it is ``center + half_width * tanh(x)`` of the network's output ``x``. An
    unbounded mean can walk past a bound, and then most of a group's K samples are clipped
    to the same action, score the same, and give the target nothing to pull the mean back
    with (Pendulum, tuning seed 102: by 10,000 steps 89 % of the visited states had their
    mean beyond +-2 and 57 % of the groups had no spread in their scores; the run stayed
    near -1500; docs/algorithms.md 4.6).

    :param observation_space: any space SB3's extractors take.
    :param action_space: a bounded or unbounded ``Box`` of any shape (flattened to ``d``
        dimensions inside the policy; a candidate's log-density sums over them).
    :param lr_schedule: learning-rate schedule (its value at progress 1 is the start lr).
    :param net_arch: hidden layer sizes of the mean network (SB3's forms,
        :func:`~tpo_agents.policies.mlp_body.policy_net_arch`).
    :param activation_fn: activation class between hidden layers.
    :param log_std_init: the initial log standard deviation of every action dimension.
    :param squash_mean: keep the mean inside the bounds of each dimension whose bounds are
        finite (``center + half_width * tanh``); False gives SB3's unbounded linear mean.
        The agents write it into their ``policy_kwargs``; an agent saved before it existed
        loads with False, the mean it was trained with.
    :param optimizer_class: ``torch.optim.Adam`` by default.
    :param optimizer_kwargs: extra optimizer arguments.
    """

    action_space_type = spaces.Box

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        lr_schedule: Schedule,
        net_arch: list[int] | dict[str, list[int]] | None = None,
        activation_fn: type[nn.Module] = nn.Tanh,
        log_std_init: float = 0.0,
        squash_mean: bool = True,
        features_extractor_class: type[BaseFeaturesExtractor] = FlattenExtractor,
        features_extractor_kwargs: dict[str, Any] | None = None,
        normalize_images: bool = True,
        optimizer_class: type[torch.optim.Optimizer] = torch.optim.Adam,
        optimizer_kwargs: dict[str, Any] | None = None,
    ):
        super().__init__(
            observation_space, action_space, net_arch, activation_fn, features_extractor_class,
            features_extractor_kwargs, normalize_images, optimizer_class, optimizer_kwargs,
        )
        self.log_std_init = float(log_std_init)
        dim = int(np.prod(action_space.shape))  # a multi-dimensional Box is flattened
        self.mean_net = self.mlp_head(dim)
        self.log_std = nn.Parameter(torch.full((dim,), self.log_std_init))
        self.squash_mean = bool(squash_mean)
        low = np.asarray(action_space.low, dtype=np.float64).reshape(-1)
        high = np.asarray(action_space.high, dtype=np.float64).reshape(-1)
        bounded = np.isfinite(low) & np.isfinite(high)
        # center + half_width * tanh(x) where both bounds are finite; x itself elsewhere. Not
        # persistent: the bounds come from the action space, and older saves load unchanged.
        center, half_width = np.where(bounded, (low + high) / 2, 0.0), np.where(bounded, (high - low) / 2, 0.0)
        self.register_buffer("_mean_center", torch.tensor(center, dtype=torch.float32), persistent=False)
        self.register_buffer("_mean_half_width", torch.tensor(half_width, dtype=torch.float32), persistent=False)
        self.register_buffer("_mean_bounded", torch.tensor(bounded), persistent=False)
        self.make_optimizer(lr_schedule)

    def _mean(self, raw: torch.Tensor) -> torch.Tensor:
        if not self.squash_mean:
            return raw
        squashed = self._mean_center + self._mean_half_width * torch.tanh(raw)
        return torch.where(self._mean_bounded, squashed, raw)

    def distribution(self, obs: PyTorchObs) -> torch.distributions.Normal:
        """The action distribution at each observation (batch shape ``[N, d]``)."""
        mean = self._mean(self.mean_net(self.extract_features(obs, self.features_extractor)))
        return _normal(mean, self.log_std.exp().expand_as(mean))

    def sample_actions(self, obs: PyTorchObs, n: int = 1, block: int | None = None) -> torch.Tensor:
        """``n`` actions per observation, shape ``[N, n, d]``; ``block``: drawn for each run of
        that many observations in turn (:func:`~tpo_agents.policies.base.draw_in_blocks`)."""
        dist = self.distribution(obs)
        return draw_in_blocks(
            len(dist.loc), block, lambda rows: _normal(dist.loc[rows], dist.scale[rows]).sample((n,)).transpose(0, 1)
        )

    def step_log_probs(self, obs: PyTorchObs, rows: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Log-density of ``actions[i]`` (``[M, d]``) at observation ``rows[i]``, ``[M]``."""
        dist = self.distribution(obs)
        mean, std = dist.loc[rows.to(dist.loc.device)], dist.scale[rows.to(dist.loc.device)]
        return _normal(mean, std).log_prob(actions.to(mean)).sum(-1)

    def env_actions(self, actions: np.ndarray) -> np.ndarray:
        """Actions (``[..., d]``) as the env takes them: in the ``Box``'s shape, clipped to its bounds."""
        actions = np.asarray(actions, dtype=self.action_space.dtype)
        actions = actions.reshape(*actions.shape[:-1], *self.action_space.shape)
        return np.clip(actions, self.action_space.low, self.action_space.high)

    def forward(self, obs: PyTorchObs, deterministic: bool = False) -> torch.Tensor:
        return self._predict(obs, deterministic)

    def _predict(self, observation: PyTorchObs, deterministic: bool = False) -> torch.Tensor:
        dist = self.distribution(observation)
        return dist.mean if deterministic else dist.sample()

    def _get_constructor_parameters(self) -> dict[str, Any]:
        return {**super()._get_constructor_parameters(), "log_std_init": self.log_std_init,
                "squash_mean": self.squash_mean}
