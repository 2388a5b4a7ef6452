"""Policies for the grouped agents: categorical (action logits) and, for Box actions, Gaussian."""

from tpo_agents.policies.base import CategoricalPolicy
from tpo_agents.policies.gaussian import GaussianMlpPolicy
from tpo_agents.policies.mlp import MlpPolicy
from tpo_agents.policies.transformer import (
    CausalTransformer,
    TransformerActorCriticPolicy,
    TransformerExtractor,
    TransformerPolicy,
)

__all__ = [
    "CategoricalPolicy",
    "CausalTransformer",
    "GaussianMlpPolicy",
    "MlpPolicy",
    "TransformerActorCriticPolicy",
    "TransformerExtractor",
    "TransformerPolicy",
]
