"""The paper's critic-free PPO: a clipped surrogate on baselined rewards, no value network."""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from tpo_agents import objectives as obj
from tpo_agents.checks import real_number
from tpo_agents.pg import PG


class CriticFreePPO(PG):
    """The paper's PPO on token tasks: clipped surrogate, no critic.

    Advantage = the token's credit (its own reward where the env scores every state, the
    reward-to-go under terminal reward; see :class:`~tpo_agents.pg.PG`) minus its batch
    mean per position; ``L = ppo_clip(rho, A)``
    with ``rho`` against the rollout snapshot; 4 epochs. (SB3's ``PPO`` with
    :class:`~tpo_agents.policies.TransformerActorCriticPolicy` is the critic-based one.)

    :param clip_range: PPO epsilon (0.2).
    """

    default_n_epochs: ClassVar[int] = 4

    def __init__(self, policy, env, *args: Any, clip_range: float = 0.2, **kwargs: Any):
        self.clip_range = real_number("clip_range", clip_range, above=0.0)
        super().__init__(policy, env, *args, **kwargs)

    def compute_loss(self, batch, logp: torch.Tensor, frozen: dict[str, torch.Tensor]) -> torch.Tensor:
        return obj.ppo_clip_loss(logp, frozen["old_logp"], frozen["advantages"], self.clip_range)
