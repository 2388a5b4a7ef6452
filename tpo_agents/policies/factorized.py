"""Factorized policies for ``MultiDiscrete`` and ``MultiBinary`` action spaces (SB3 ``BasePolicy``).

These spaces have too many joint actions to enumerate, so, as for ``Box`` actions
(:class:`~tpo_agents.policies.gaussian.GaussianMlpPolicy`), a group is K actions *sampled*
from the policy at a visited state and a candidate's log-probability is that of the joint
action: the sum over dimensions of one categorical per ``MultiDiscrete`` dimension
(:class:`MultiCategoricalPolicy`) or of one Bernoulli per ``MultiBinary`` bit
(:class:`BernoulliPolicy`), as SB3's ``MultiCategoricalDistribution`` and
``BernoulliDistribution`` do. Both share the Gaussian policy's interface:
``sample_actions(obs, n) -> [N, n, d]``, ``step_log_probs(obs, rows, actions) -> [M]`` and
``env_actions(actions)`` (the actions as the env takes them).
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

__all__ = ["BernoulliPolicy", "MultiCategoricalPolicy"]


class _FactorizedPolicy(MlpBodyPolicy):
    """Features -> MLP -> ``n_logits`` logits; subclasses say how the logits are read."""

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        lr_schedule: Schedule,
        net_arch: list[int] | dict[str, list[int]] | None = None,
        activation_fn: type[nn.Module] = nn.Tanh,
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
        self.action_net = self.mlp_head(self.n_logits)
        self.make_optimizer(lr_schedule)

    @property
    def n_logits(self) -> int:
        raise NotImplementedError

    def action_logits(self, obs: PyTorchObs) -> torch.Tensor:
        """The network's output, ``[N, n_logits]``."""
        return self.action_net(self.extract_features(obs, self.features_extractor))

    def forward(self, obs: PyTorchObs, deterministic: bool = False) -> torch.Tensor:
        return self._predict(obs, deterministic)


class MultiCategoricalPolicy(_FactorizedPolicy):
    """One categorical per ``MultiDiscrete`` dimension, all from one MLP (a joint action's
    log-probability is the sum of its dimensions'). Actions are the per-dimension indices
    ``0 .. n_i - 1`` inside the agent (``[..., d]``, ``d`` the number of dimensions, a
    multi-dimensional ``nvec`` flattened) and ``index + start`` in the env's shape outside.
    ``predict(obs, deterministic=True)`` is the most likely value of each dimension.
    """

    action_space_type = spaces.MultiDiscrete

    @property
    def n_logits(self) -> int:
        return int(np.asarray(self.action_space.nvec).sum())

    def _dims(self) -> list[int]:
        return [int(n) for n in np.asarray(self.action_space.nvec).ravel()]

    def dimension_log_probs(self, obs: PyTorchObs) -> list[torch.Tensor]:
        """``log pi_i(. | obs)`` of each dimension ``i``, ``[N, n_i]`` each."""
        return [torch.log_softmax(x, dim=-1) for x in torch.split(self.action_logits(obs), self._dims(), dim=-1)]

    def sample_actions(self, obs: PyTorchObs, n: int = 1, block: int | None = None) -> torch.Tensor:
        """``n`` joint actions per observation, ``[N, n, d]`` (indices, int64); ``block``: drawn
        for each run of that many observations in turn (:func:`~tpo_agents.policies.base.draw_in_blocks`)."""
        probs = [lp.exp() for lp in self.dimension_log_probs(obs)]
        return draw_in_blocks(
            len(probs[0]), block, lambda rows: torch.stack([torch.multinomial(p[rows], n, replacement=True) for p in probs], dim=-1)
        )

    def step_log_probs(self, obs: PyTorchObs, rows: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """``log pi(actions[i] | obs[rows[i]])`` (``actions`` ``[M, d]``), summed over dimensions, ``[M]``."""
        per_dim = self.dimension_log_probs(obs)
        rows = rows.to(per_dim[0].device)
        actions = actions.to(per_dim[0].device).long()
        return torch.stack([lp[rows, actions[:, i]] for i, lp in enumerate(per_dim)], dim=-1).sum(-1)

    def _start(self) -> np.ndarray:
        return np.asarray(getattr(self.action_space, "start", 0)).ravel()

    def env_actions(self, actions: np.ndarray) -> np.ndarray:
        """``[..., d]`` indices as the env takes them: ``index + start``, ``[..., *nvec.shape]``."""
        actions = np.asarray(actions)
        env = (actions + self._start()).astype(self.action_space.dtype)
        return env.reshape(*actions.shape[:-1], *self.action_space.shape)

    def _predict(self, observation: PyTorchObs, deterministic: bool = False) -> torch.Tensor:
        if deterministic:
            picks = torch.stack([lp.argmax(-1) for lp in self.dimension_log_probs(observation)], dim=-1)
        else:
            picks = self.sample_actions(observation, 1)[:, 0]
        return picks + torch.as_tensor(self._start(), device=picks.device)


class BernoulliPolicy(_FactorizedPolicy):
    """One Bernoulli per ``MultiBinary`` bit, all from one MLP (a joint action's log-probability
    is the sum of its bits'). Actions are float 0/1 vectors ``[..., d]`` inside the agent (a
    multi-dimensional ``MultiBinary`` flattened) and ``int8`` arrays of the space's shape
    outside. ``predict(obs, deterministic=True)`` sets the bits whose probability is above 1/2.
    """

    action_space_type = spaces.MultiBinary

    @property
    def n_logits(self) -> int:
        return int(np.prod(self.action_space.shape))

    def sample_actions(self, obs: PyTorchObs, n: int = 1, block: int | None = None) -> torch.Tensor:
        """``n`` joint actions per observation, ``[N, n, d]`` (float 0/1); ``block``: drawn for
        each run of that many observations in turn (:func:`~tpo_agents.policies.base.draw_in_blocks`)."""
        probs = torch.sigmoid(self.action_logits(obs))
        return draw_in_blocks(len(probs), block, lambda rows: torch.bernoulli(probs[rows, None, :].expand(-1, n, -1)))

    def step_log_probs(self, obs: PyTorchObs, rows: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """``log pi(actions[i] | obs[rows[i]])`` (``actions`` ``[M, d]``), summed over bits, ``[M]``."""
        logits = self.action_logits(obs)
        logits = logits[rows.to(logits.device)]
        bits = actions.to(logits)
        return -nn.functional.binary_cross_entropy_with_logits(logits, bits, reduction="none").sum(-1)

    def env_actions(self, actions: np.ndarray) -> np.ndarray:
        """``[..., d]`` bits as the env takes them: ``int8``, ``[..., *shape]``."""
        actions = np.asarray(actions)
        return actions.astype(self.action_space.dtype).reshape(*actions.shape[:-1], *self.action_space.shape)

    def _predict(self, observation: PyTorchObs, deterministic: bool = False) -> torch.Tensor:
        if deterministic:
            return (self.action_logits(observation) > 0).to(torch.int8)
        return self.sample_actions(observation, 1)[:, 0].to(torch.int8)
