"""SB3's policies by observation kind: ``CnnPolicy`` (images) and ``MultiInputPolicy`` (``Dict``).

As in SB3, the two differ from ``MlpPolicy`` only in their default features extractor:
``CnnPolicy`` reads images with SB3's ``NatureCNN`` (and, as SB3's ``ActorCriticPolicy``
after a ``NatureCNN``, no hidden layers between the CNN's features and the logits by
default); ``MultiInputPolicy`` reads a ``Dict`` with SB3's ``CombinedExtractor`` (a
``NatureCNN`` per image key, the other keys flattened, all concatenated). Observations are
preprocessed by SB3's ``preprocess_obs`` (images divided by 255 with
``normalize_images=True``, ``Discrete`` keys one-hot). ``features_extractor_class`` /
``features_extractor_kwargs`` in ``policy_kwargs`` replace the default, as in SB3.

On ``Box`` actions the agents use the Gaussian policy in their place, with the same default
extractor (:func:`input_policy_kwargs`), as ``MlpPolicy`` becomes ``GaussianMlpPolicy``.
Channel-last image envs are wrapped in SB3's ``VecTransposeImage`` by the agents
(:func:`tpo_agents.rollout.envs.transpose_images`), so the networks see channel-first images;
``predict`` takes either layout (SB3's ``obs_to_tensor``).
"""

from __future__ import annotations

from typing import Any, ClassVar

from stable_baselines3.common.torch_layers import (
    BaseFeaturesExtractor,
    CombinedExtractor,
    NatureCNN,
)

from tpo_agents.policies.mlp import MlpPolicy

__all__ = ["CnnPolicy", "MultiInputPolicy", "input_policy_kwargs"]


class CnnPolicy(MlpPolicy):
    """:class:`~tpo_agents.policies.mlp.MlpPolicy` over SB3's ``NatureCNN`` features (image
    observations, channel-first as the agents' ``VecTransposeImage`` gives them). ``net_arch``
    defaults to no hidden layer after the CNN, as in SB3. Parameters as ``MlpPolicy``'s."""

    default_features_extractor: ClassVar[type[BaseFeaturesExtractor]] = NatureCNN

    def __init__(self, *args: Any, features_extractor_class: type[BaseFeaturesExtractor] = NatureCNN, **kwargs: Any):
        super().__init__(*args, features_extractor_class=features_extractor_class, **kwargs)


class MultiInputPolicy(MlpPolicy):
    """:class:`~tpo_agents.policies.mlp.MlpPolicy` over SB3's ``CombinedExtractor`` (``Dict``
    observations: a ``NatureCNN`` per image key, the other keys flattened or one-hot).
    Parameters as ``MlpPolicy``'s."""

    default_features_extractor: ClassVar[type[BaseFeaturesExtractor]] = CombinedExtractor

    def __init__(
        self, *args: Any, features_extractor_class: type[BaseFeaturesExtractor] = CombinedExtractor, **kwargs: Any
    ):
        super().__init__(*args, features_extractor_class=features_extractor_class, **kwargs)


def input_policy_kwargs(policy_class: type, policy_kwargs: dict[str, Any]) -> dict[str, Any]:
    """``policy_kwargs`` for the action-space policy that stands in for ``policy_class``
    (``GaussianMlpPolicy`` on ``Box`` actions, ...): with ``CnnPolicy``'s or
    ``MultiInputPolicy``'s default extractor, and, after ``NatureCNN``, no hidden layer
    unless ``net_arch`` is given (SB3's default); otherwise unchanged."""
    extractor = getattr(policy_class, "default_features_extractor", None)
    kwargs = dict(policy_kwargs)
    if extractor is not None:
        kwargs.setdefault("features_extractor_class", extractor)
    if kwargs.get("features_extractor_class") is NatureCNN and kwargs.get("net_arch") is None:
        kwargs["net_arch"] = []
    return kwargs
