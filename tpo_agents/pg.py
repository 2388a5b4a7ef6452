"""Single-sample comparators: PG (REINFORCE) and DG (Delightful Policy Gradient)."""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from tpo_agents import objectives as obj
from tpo_agents.base import GroupedAlgorithm
from tpo_agents.groups import GroupBatch

BASELINES = ("batch_mean", "pi_squared", "none")


class PG(GroupedAlgorithm):
    """REINFORCE with a baseline: ``L = -mean((R - b) log pi(trajectory))``.

    One sampled rollout per context (``group_mode="single"``); ``R`` is the episode
    return. Defaults to one epoch (multiple epochs of plain REINFORCE are off-policy).

    :param baseline: ``"batch_mean"`` (mean return of the batch), ``"pi_squared"``
        (``sum_a pi(a | x)^2`` at the first state, the paper's MNIST baseline; one-step
        episodes) or ``"none"``.
    """

    default_n_epochs: ClassVar[int] = 1

    def __init__(self, policy, env, *args: Any, baseline: str = "batch_mean", **kwargs: Any):
        if baseline not in BASELINES:
            raise ValueError(f"baseline must be one of {BASELINES}; got {baseline!r}")
        self.baseline = baseline
        kwargs.setdefault("group_mode", "single")
        super().__init__(policy, env, *args, **kwargs)

    def default_group_mode(self, hint: str | None, can_score: bool) -> str:
        return "single"

    def prepare(self, batch: GroupBatch) -> dict[str, torch.Tensor]:
        scores = batch.scores
        if self.baseline == "batch_mean":
            b = scores[batch.mask].mean()
        elif self.baseline == "pi_squared":
            b = self._pi_squared(batch).view(-1, 1)
        else:
            b = torch.zeros(())
        return {"advantages": (scores - b).masked_fill(~batch.mask, 0.0)}

    def _pi_squared(self, batch: GroupBatch) -> torch.Tensor:
        """``sum_a pi(a | x)^2`` at each candidate's first state (rollout policy)."""
        first = torch.full((batch.n_groups * batch.group_size,), batch.n_steps, dtype=torch.long)
        first = first.scatter_reduce(0, batch.step_candidate, torch.arange(batch.n_steps), reduce="amin")
        obs, _ = self.policy.obs_to_tensor(batch.states)
        pi = self.policy.action_log_probs(obs).exp()
        return (pi[batch.step_state[first]] ** 2).sum(-1)

    def compute_loss(self, batch: GroupBatch, logp: torch.Tensor, frozen: dict[str, torch.Tensor]) -> torch.Tensor:
        return obj.reinforce_loss(logp, frozen["advantages"], mask=batch.mask)


class DG(PG):
    """Delightful Policy Gradient: REINFORCE gated by ``sigmoid(A * surprisal / dg_eta)``.

    ``L = -mean(sigmoid(A * (-log pi) / dg_eta) * A * log pi)`` with the gate held fixed.
    One epoch by default (the paper: it diverges with more).

    :param dg_eta: gate temperature (> 0).
    """

    def __init__(self, policy, env, *args: Any, dg_eta: float = 1.0, **kwargs: Any):
        if not dg_eta > 0:
            raise ValueError(f"dg_eta must be > 0; got {dg_eta!r}")
        self.dg_eta = float(dg_eta)
        super().__init__(policy, env, *args, **kwargs)

    def compute_loss(self, batch: GroupBatch, logp: torch.Tensor, frozen: dict[str, torch.Tensor]) -> torch.Tensor:
        return obj.dg_loss(logp, frozen["advantages"], eta=self.dg_eta, mask=batch.mask)
