"""A categorical MLP policy for ``Discrete`` action spaces (SB3 ``BasePolicy``)."""

from __future__ import annotations

from typing import Any

import torch
from gymnasium import spaces
from stable_baselines3.common.torch_layers import (
    BaseFeaturesExtractor,
    FlattenExtractor,
    NatureCNN,
    create_mlp,
)
from stable_baselines3.common.type_aliases import Schedule
from torch import nn

from tpo_agents.policies.base import CategoricalPolicy


def policy_net_arch(net_arch: list[int] | dict[str, list[int]] | None, features_extractor_class: type) -> list[int]:
    """The hidden sizes of a policy network from SB3's ``net_arch`` forms.

    ``None``: ``[64, 64]``, or none (``[]``) after SB3's ``NatureCNN``, as SB3's
    ``ActorCriticPolicy`` defaults; a list of sizes as is; SB3's actor-critic form
    ``dict(pi=[...], vf=[...])``: its ``pi`` sizes (these policies have no value network;
    ``vf`` / ``qf`` sizes are accepted and unused; the learned critic of ``critic`` groups
    takes its own from ``critic_kwargs``).
    """
    if net_arch is None:
        return [] if features_extractor_class is NatureCNN else [64, 64]
    if isinstance(net_arch, dict):
        unknown = set(net_arch) - {"pi", "vf", "qf"}
        if unknown:
            raise ValueError(f"net_arch as a dict takes 'pi' (and SB3's 'vf' / 'qf', unused here); got {sorted(unknown)}")
        return list(net_arch.get("pi", [64, 64]))
    return list(net_arch)


class MlpPolicy(CategoricalPolicy):
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
        if not isinstance(action_space, spaces.Discrete):
            raise ValueError(f"MlpPolicy needs a Discrete action space; got {action_space}")
        super().__init__(
            observation_space,
            action_space,
            features_extractor_class,
            features_extractor_kwargs,
            optimizer_class=optimizer_class,
            optimizer_kwargs=optimizer_kwargs,
            normalize_images=normalize_images,
        )
        self.net_arch = policy_net_arch(net_arch, features_extractor_class)
        self.activation_fn = activation_fn
        self.features_extractor = self.make_features_extractor()
        layers = create_mlp(self.features_extractor.features_dim, int(action_space.n), self.net_arch, activation_fn)
        self.action_net = nn.Sequential(*layers)
        self.optimizer = self.optimizer_class(self.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs)

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        data.update(
            lr_schedule=self._dummy_schedule,  # not needed to load the policy alone
            net_arch=self.net_arch,
            activation_fn=self.activation_fn,
            features_extractor_class=self.features_extractor_class,
            features_extractor_kwargs=self.features_extractor_kwargs,
            normalize_images=self.normalize_images,
            optimizer_class=self.optimizer_class,
            optimizer_kwargs=self.optimizer_kwargs,
        )
        return data
