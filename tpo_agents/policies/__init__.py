"""Policies for the grouped agents: every policy maps observations to action logits."""

from tpo_agents.policies.mlp import CategoricalPolicy, MlpPolicy

__all__ = ["CategoricalPolicy", "MlpPolicy"]
