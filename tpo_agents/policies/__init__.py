"""Policies for the grouped agents: categorical (action logits); for Box actions Gaussian; for
MultiDiscrete and MultiBinary actions factorized (one categorical per dimension, one Bernoulli per bit)."""

from tpo_agents.policies.base import CategoricalPolicy
from tpo_agents.policies.factorized import BernoulliPolicy, MultiCategoricalPolicy
from tpo_agents.policies.gaussian import GaussianMlpPolicy
from tpo_agents.policies.inputs import CnnPolicy, MultiInputPolicy
from tpo_agents.policies.mlp import MlpPolicy
from tpo_agents.policies.transformer import (
    CausalTransformer,
    TransformerActorCriticPolicy,
    TransformerExtractor,
    TransformerPolicy,
)

__all__ = [
    "BernoulliPolicy",
    "CategoricalPolicy",
    "CausalTransformer",
    "CnnPolicy",
    "GaussianMlpPolicy",
    "MlpPolicy",
    "MultiCategoricalPolicy",
    "MultiInputPolicy",
    "TransformerActorCriticPolicy",
    "TransformerExtractor",
    "TransformerPolicy",
]
