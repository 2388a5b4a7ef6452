"""A categorical MLP policy for ``Discrete`` action spaces (SB3 ``BasePolicy``)."""

from __future__ import annotations

from typing import Any

import torch
from gymnasium import spaces
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor, FlattenExtractor
from stable_baselines3.common.type_aliases import Schedule
from torch import nn

from tpo_agents.policies.base import CategoricalPolicy
from tpo_agents.policies.mlp_body import MlpBodyPolicy, policy_net_arch

__all__ = ["MlpPolicy", "policy_net_arch"]


class MlpPolicy(CategoricalPolicy, MlpBodyPolicy):
    """Categorical policy: features -> MLP -> logits over a ``Discrete`` action space.

    ``Box`` observations are flattened, ``Discrete`` ones one-hot encoded (SB3's
    ``preprocess_obs``). ``predict(obs, deterministic=True)`` is the greedy action.

    :param observation_space: ``Box`` or ``Discrete`` (or any space SB3's extractors take).
    :param action_space: ``Discrete``.
    :param lr_schedule: learning-rate schedule (its value at progress 1 is the start lr).
    :param net_arch: hidden layer sizes, e.g. ``[50, 50]`` for the paper's MNIST MLP
        (SB3's forms, see :func:`policy_net_arch`).
    :param activation_fn: activation class between hidden layers.
    :param features_extractor_class: SB3 features extractor (``FlattenExtractor``; SB3's
        ``NatureCNN`` for images, ``CombinedExtractor`` for ``Dict`` observations, as
        :class:`~tpo_agents.policies.inputs.CnnPolicy` and
        :class:`~tpo_agents.policies.inputs.MultiInputPolicy` default to).
    :param features_extractor_kwargs: its keyword arguments.
    :param normalize_images: divide image observations by 255 (SB3's ``preprocess_obs``).
    :param optimizer_class: ``torch.optim.Adam`` by default.
    :param optimizer_kwargs: extra optimizer arguments.
    """

    action_space_type = spaces.Discrete

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
        self.action_net = self.mlp_head(int(action_space.n))
        self.make_optimizer(lr_schedule)
