"""What the MLP policies share: SB3's features extractor, hidden layers from SB3's
``net_arch`` forms, the action-space check and the constructor parameters saved with a model.

:class:`~tpo_agents.policies.mlp.MlpPolicy` (``Discrete``),
:class:`~tpo_agents.policies.factorized.MultiCategoricalPolicy` /
:class:`~tpo_agents.policies.factorized.BernoulliPolicy` and
:class:`~tpo_agents.policies.gaussian.GaussianMlpPolicy` (``Box``) differ only in their head.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from gymnasium import spaces
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor, NatureCNN, create_mlp
from stable_baselines3.common.type_aliases import Schedule
from torch import nn

__all__ = ["MlpBodyPolicy", "policy_net_arch"]


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


class MlpBodyPolicy(BasePolicy):
    """Checks the action space (``action_space_type``), builds the features extractor and
    sets ``net_arch`` / ``activation_fn``; a subclass then builds its head with
    :meth:`mlp_head` and its optimizer with :meth:`make_optimizer`, in that order (the
    order of the random draws of the initialization)."""

    action_space_type: ClassVar[type[spaces.Space]] = spaces.Space

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        net_arch: list[int] | dict[str, list[int]] | None,
        activation_fn: type[nn.Module],
        features_extractor_class: type[BaseFeaturesExtractor],
        features_extractor_kwargs: dict[str, Any] | None,
        normalize_images: bool,
        optimizer_class: type[torch.optim.Optimizer],
        optimizer_kwargs: dict[str, Any] | None,
    ):
        if not isinstance(action_space, self.action_space_type):
            raise ValueError(
                f"{type(self).__name__} needs a {self.action_space_type.__name__} action space; got {action_space}"
            )
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

    def mlp_head(self, n_out: int) -> nn.Sequential:
        """Features -> the hidden layers of ``net_arch`` -> ``n_out`` outputs."""
        return nn.Sequential(*create_mlp(self.features_extractor.features_dim, n_out, self.net_arch, self.activation_fn))

    def make_optimizer(self, lr_schedule: Schedule) -> None:
        """``self.optimizer`` over every parameter, at the schedule's starting rate."""
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
