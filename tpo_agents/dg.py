"""DG: Delightful Policy Gradient, REINFORCE gated by how surprising a good action was."""

from __future__ import annotations

from typing import Any

import torch

from tpo_agents import objectives as obj
from tpo_agents.checks import real_number
from tpo_agents.pg import PG


class DG(PG):
    """Delightful Policy Gradient: REINFORCE gated by ``sigmoid(A * surprisal / dg_eta)``.

    ``L = -mean(sigmoid(A * (-log pi) / dg_eta) * A * log pi)`` with the gate held fixed.
    One epoch by default (the paper: it diverges with more).

    :param dg_eta: gate temperature (> 0).
    """

    def __init__(self, policy, env, *args: Any, dg_eta: float = 1.0, **kwargs: Any):
        self.dg_eta = real_number("dg_eta", dg_eta, above=0.0)
        super().__init__(policy, env, *args, **kwargs)

    def compute_loss(self, batch, logp: torch.Tensor, frozen: dict[str, torch.Tensor]) -> torch.Tensor:
        return obj.dg_loss(logp, frozen["advantages"], eta=self.dg_eta)
