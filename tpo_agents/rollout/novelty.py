"""A novelty bonus for the critic's reward: random network distillation (Burda et al., 2018).

Where no action's value differs before a first success (MountainCar: -1 on every step until
the goal), a critic scores every candidate alike, TPO's target is the old policy and the
policy does not move. The bonus gives the critic something to tell actions apart by: a fixed,
randomly initialised network ``f`` embeds each next observation, a predictor ``g`` is trained
to match it on the observations the critic trains on, and ``||g(x) - f(x)||^2`` is large
where the agent has rarely been. The critic's TD target adds ``novelty * bonus(s')`` to the
env's reward (``critic_kwargs={"novelty": ...}``), the bonus divided by the running root
mean square of the bonuses so ``novelty`` is on the scale of one reward unit whatever the env.
Inputs are standardised by running statistics of the observations seen (a velocity of at
most 0.07 counts as much as a position).
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["RandomNetworkNovelty"]


def _mlp(in_dim: int, width: int, out_dim: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(in_dim, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, out_dim))


class RandomNetworkNovelty:
    """How novel a batch of (flat) observations is, ``[N]``, learned from the batches trained on.

    :param in_dim: the flattened observation's size.
    :param seed: seeds both networks' initialisations (the fixed one decides what "alike" means).
    :param width: hidden width of both networks.
    :param out_dim: the embedding's size.
    :param learning_rate: the predictor's Adam learning rate.
    :param decay: weight of the past in the running root mean square of the bonus.
    """

    def __init__(
        self,
        in_dim: int,
        device: torch.device | str = "cpu",
        seed: int | None = None,
        width: int = 64,
        out_dim: int = 32,
        learning_rate: float = 1e-3,
        decay: float = 0.99,
    ):
        self.device = torch.device(device)
        # Drawn on CPU from a forked generator: the agent's own draws (CPU and CUDA) do not shift.
        with torch.random.fork_rng(devices=[]):
            if seed is not None:
                torch.random.default_generator.manual_seed(seed)
            self.fixed = _mlp(in_dim, width, out_dim).requires_grad_(False).to(self.device)
            self.predictor = _mlp(in_dim, width, out_dim).to(self.device)
        # foreach: a few calls for all six tensors instead of about ten per tensor, with the
        # numbers of the default per-tensor loop bitwise (tested).
        self.optimizer = torch.optim.Adam(self.predictor.parameters(), lr=learning_rate, foreach=True)
        self.decay = decay
        self.count = 0
        self.mean = torch.zeros(in_dim, device=self.device)
        self.m2 = torch.zeros(in_dim, device=self.device)
        """Sum of squared deviations from ``mean`` (Chan et al.'s parallel update)."""
        self.bonus_ms = None
        """Running mean square of the raw bonus (None until the first batch)."""

    def observe(self, x: torch.Tensor) -> None:
        """Fold a batch of observations ``[N, in_dim]`` into the running input statistics."""
        x = x.to(self.device, torch.float32)
        n, mean = len(x), x.mean(0)
        delta = mean - self.mean
        total = self.count + n
        self.m2 += ((x - mean) ** 2).sum(0) + delta**2 * self.count * n / total
        self.mean += delta * n / total
        self.count = total

    def _standardized(self, x: torch.Tensor) -> torch.Tensor:
        std = (self.m2 / max(self.count, 1)).sqrt().clamp_min(1e-6)
        return ((x.to(self.device, torch.float32) - self.mean) / std).clamp(-5.0, 5.0)

    def _error(self, x: torch.Tensor) -> torch.Tensor:
        z = self._standardized(x)
        return (self.predictor(z) - self.fixed(z)).pow(2).mean(-1)

    @torch.no_grad()
    def bonus(self, x: torch.Tensor, batches: int = 1) -> torch.Tensor:
        """The batch's novelty ``[N]``, over the running root mean square of past bonuses.
        ``batches``: how many of the batches the running mean's ``decay`` counts this one as
        (a critic update scores all its steps' batches at once: the past's weight is
        ``decay ** batches``, as if each had been scored in turn)."""
        raw = self._error(x)
        ms = float(raw.pow(2).mean())
        past = self.decay**batches
        self.bonus_ms = ms if self.bonus_ms is None else past * self.bonus_ms + (1 - past) * ms
        return raw / max(self.bonus_ms, 1e-12) ** 0.5

    def train(self, x: torch.Tensor) -> float:
        """One predictor step toward the fixed network on ``x``; its loss."""
        loss = self._error(x).mean()
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        return float(loss.detach())
