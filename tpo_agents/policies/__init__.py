"""Policies for the grouped agents: every policy maps observations to action logits."""

from tpo_agents.policies.base import CategoricalPolicy
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
    "MlpPolicy",
    "TransformerActorCriticPolicy",
    "TransformerExtractor",
    "TransformerPolicy",
]
