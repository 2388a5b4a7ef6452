"""SB3-API agents for Target Policy Optimization and its comparators.

``TPO``, ``GroupPG`` (ablation), ``GRPO``, ``DG``, ``PG`` and ``CriticFreePPO`` (one
module each) share one grouped-algorithm base (:mod:`tpo_agents.base`) and one rollout
layer (:mod:`tpo_agents.rollout`); SB3's own ``PPO`` is the critic-based PPO comparator.
The math lives in :mod:`tpo_agents.objectives` and is written out in docs/algorithms.md.
"""

from tpo_agents.base import GroupedAlgorithm
from tpo_agents.critic_free_ppo import CriticFreePPO
from tpo_agents.dg import DG
from tpo_agents.group_pg import GroupPG
from tpo_agents.grpo import GRPO
from tpo_agents.pg import PG
from tpo_agents.policies import MlpPolicy
from tpo_agents.tpo import TPO

__all__ = ["CriticFreePPO", "DG", "GRPO", "GroupPG", "GroupedAlgorithm", "MlpPolicy", "PG", "TPO"]
