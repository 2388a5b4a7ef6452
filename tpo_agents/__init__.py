"""SB3-API agents for Target Policy Optimization and its comparators.

``TPO``, ``GroupPG`` (ablation), ``GRPO``, ``DG`` and ``PG`` share one grouped-algorithm
base; SB3's own ``PPO`` is the PPO comparator. The math lives in
:mod:`tpo_agents.objectives`.
"""

from tpo_agents.base import GroupedAlgorithm
from tpo_agents.grpo import GRPO
from tpo_agents.pg import DG, PG, CriticFreePPO
from tpo_agents.policies import MlpPolicy
from tpo_agents.tpo import TPO, GroupPG

__all__ = ["CriticFreePPO", "DG", "GRPO", "GroupPG", "GroupedAlgorithm", "MlpPolicy", "PG", "TPO"]
