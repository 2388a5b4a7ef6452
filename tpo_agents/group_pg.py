"""Group PG: the ablation that keeps TPO's candidates and standardized scores but
replaces the fit to the target with a REINFORCE step."""

from __future__ import annotations

import torch

from tpo_agents import objectives as obj
from tpo_agents.rollout import GroupBatch
from tpo_agents.tpo import TPO


class GroupPG(TPO):
    """Group PG ablation: TPO's candidates and standardized scores, REINFORCE-weighted.

    ``L = -mean_i u_i log pi(y_i)`` instead of the cross-entropy to the target.
    """

    def compute_loss(
        self, batch: GroupBatch, logp: torch.Tensor, frozen: dict[str, torch.Tensor]
    ) -> torch.Tensor | None:
        if bool(frozen["zero_variance"].all()):  # u = 0 everywhere: no gradient, no step
            return None
        return obj.group_pg_loss(logp, frozen["u"], mask=batch.mask)
