"""GRPO: group-standardized advantages in a clipped surrogate with a KL to the snapshot."""

from __future__ import annotations

from typing import Any

import torch
from gymnasium import spaces

from tpo_agents import objectives as obj
from tpo_agents.base import GroupedAlgorithm
from tpo_agents.checks import real_number
from tpo_agents.rollout import GroupBatch, SequenceGroupBatch


class GRPO(GroupedAlgorithm):
    """Group Relative Policy Optimization (SB3 API).

    Loss: PPO clipped surrogate of the group z-scored advantages plus
    ``beta * (exp(-r) + r - 1)``, ``r = log pi_theta - log pi_old`` (the rollout snapshot).

    Groups (``group_mode="auto"``): on bandit envs one sampled action per context and
    the whole batch standardized as one group (the paper's single-sample GRPO);
    K candidates per state with ``score_candidates``; K rollouts per context on token envs
    under terminal reward; every action scored by a learned critic on any other env.

    :param clip_range: PPO epsilon (0.2).
    :param beta: KL coefficient (0.04); 0 gives GRPO (no KL). The KL is to the rollout
        snapshot; for TRL's KL to a frozen reference model (language-model policies) use
        ``ref_kl_coef`` (:class:`~tpo_agents.base.GroupedAlgorithm`).
    :param mask_zero_variance: drop groups whose scores are all equal.
    :param policy_floor: in ``[0, 1]``, or ``None`` for the default; on critic groups of a
        ``Discrete`` action space (every action of a state) adds ``policy_floor`` times the
        cross-entropy from the uniform distribution to the policy
        (:func:`~tpo_agents.objectives.uniform_floor_loss`), the term TPO's target floor adds
        to TPO's loss, so the policy keeps playing every action. ``None`` resolves to
        :attr:`CRITIC_POLICY_FLOOR` (0.1) there and to 0 on every other group
        (:meth:`resolved_policy_floor`); an explicit value above 0 elsewhere is an error.
        Without it GRPO's policy on MountainCar collapses to one action in every state and
        never reaches the goal (tuning seeds 100, 101: -200; with 0.1, -133.2 and -134.9;
        docs/algorithms.md 4.5).
    :param ratio_level: for sequence candidates of token policies, ``"token"`` (standard
        GRPO: per-token ratios and KL, each token carrying its sequence's advantage) or
        ``"sequence"`` (one ratio of whole-sequence probabilities per candidate).
    """

    def __init__(
        self,
        policy,
        env,
        *args: Any,
        clip_range: float = 0.2,
        beta: float = 0.04,
        mask_zero_variance: bool = False,
        ratio_level: str = "token",
        policy_floor: float | None = None,
        **kwargs: Any,
    ):
        if policy_floor is not None:
            policy_floor = real_number("policy_floor (or None)", policy_floor, at_least=0.0)
            if policy_floor > 1.0:
                raise ValueError(f"policy_floor must be in [0, 1] (or None); got {policy_floor!r}")
        self.policy_floor = policy_floor
        if ratio_level not in ("token", "sequence"):
            raise ValueError(f"ratio_level must be 'token' or 'sequence'; got {ratio_level!r}")
        self.ratio_level = ratio_level
        self.clip_range = real_number("clip_range", clip_range, above=0.0)
        self.beta = real_number("beta", beta, at_least=0.0)
        self.mask_zero_variance = bool(mask_zero_variance)
        super().__init__(policy, env, *args, **kwargs)
        mode = getattr(self, "_group_mode", None)  # None until an env is set (load)
        if (policy_floor or 0.0) > 0 and mode is not None and not self._every_action_groups():
            raise ValueError(
                f"policy_floor applies to critic groups of a Discrete action space (every action of a "
                f"state); this agent makes {mode!r} groups on {self.action_space}: got policy_floor="
                f"{policy_floor!r}; leave it at None (the default, no floor here) or 0"
            )

    #: ``policy_floor``'s default on every action of a ``Discrete`` state (critic groups),
    #: chosen on tuning seeds (docs/algorithms.md 4.5).
    CRITIC_POLICY_FLOOR = 0.1

    def _every_action_groups(self) -> bool:
        return self.resolve_group_mode() == "critic" and isinstance(self.action_space, spaces.Discrete)

    def resolved_policy_floor(self) -> float:
        """The floor this agent applies: ``policy_floor``, or its default (0.1 on critic groups
        of a ``Discrete`` action space, 0 on any other group, where no floor applies)."""
        floor = getattr(self, "policy_floor", 0.0)  # a GRPO saved before the floor existed: 0
        if floor is not None:
            return floor
        return self.CRITIC_POLICY_FLOOR if self._every_action_groups() else 0.0

    def critic_n_epochs(self, action_space: spaces.Space) -> int:
        """2 on every action of a state (``Discrete``): with one step per batch the policy
        lagged the critic by about half the budget (IdentityEnv(10), tuning seeds 100-104:
        98.0, worst 89.9, against 100 on every seed with 2; 4 oscillated, 88.8); 1 on K
        sampled actions (Pendulum, :meth:`GroupedAlgorithm.critic_n_epochs`)."""
        return 2 if isinstance(action_space, spaces.Discrete) else 1

    def default_group_mode(self, hint: str | None, can_score: bool) -> str:
        if hint == "all_actions":
            return "single"
        if hint in ("branch", "sequence"):
            return hint
        if can_score:
            return "per_state"
        return "sequence" if hint == "per_state" else "critic"

    @staticmethod
    def _as_groups(batch: GroupBatch, x: torch.Tensor) -> torch.Tensor:
        """Single-sample batches ([G, 1]) form one group of G across the batch."""
        return x.T if batch.group_size == 1 else x

    def _per_token(self, batch) -> bool:
        return self.ratio_level == "token" and isinstance(batch, SequenceGroupBatch) and batch.group_size > 1

    def prepare(self, batch) -> dict[str, torch.Tensor]:
        if self._per_token(batch):
            return {"old_logp": batch.old_token_logp.view(batch.n_groups, batch.group_size, -1)}
        return {"old_logp": batch.old_logp}

    def current_log_probs(self, batch) -> torch.Tensor:
        if self._per_token(batch):
            return batch.token_log_probs(self.policy).view(batch.n_groups, batch.group_size, -1)
        return batch.log_probs(self.policy)

    def compute_loss(
        self, batch: GroupBatch, logp: torch.Tensor, frozen: dict[str, torch.Tensor]
    ) -> torch.Tensor | None:
        """GRPO's loss; ``None`` (no step) when every group is zero-variance and the policy
        is still the rollout snapshot: the advantages are 0 and the KL's gradient at
        ``r = 0`` is exactly 0, so any step would come from round-off."""
        g = self._as_groups
        zero = obj.zero_variance_groups(g(batch, batch.scores), mask=g(batch, batch.mask))
        if not self._params_moved and bool(zero.all()):
            return None
        # Critic groups hold every action of a state, not samples: weighting each by pi_old
        # makes the surrogate the expected advantage sum_a pi_old(a) rho_a A_a = sum_a pi(a) A_a
        # (a uniform sum over actions is not a policy gradient and unlearned IdentityEnv).
        # Sampled candidates (MultiDiscrete, MultiBinary, Box) are already drawn from pi_old:
        # their uniform mean is that expectation.
        weights = frozen["old_logp"].exp() if batch.standardized and not getattr(batch, "sampled", False) else None
        loss = obj.grpo_loss(
            g(batch, logp),
            g(batch, frozen["old_logp"]),
            g(batch, batch.scores),
            clip_range=self.clip_range,
            beta=self.beta,
            mask_zero_variance=self.mask_zero_variance,
            mask=g(batch, batch.mask),
            weights=weights,
            advantages=g(batch, batch.scores) if batch.standardized else None,
        )
        floor = self.resolved_policy_floor() if weights is not None else 0.0
        if floor > 0:  # every action of a state: logp is the policy's
            loss = loss + obj.uniform_floor_loss(logp, floor, mask=batch.mask)
        return loss

    def diagnostics(self, batch: GroupBatch, frozen: dict[str, torch.Tensor]) -> dict[str, float]:
        scores = self._as_groups(batch, batch.scores)
        mask = self._as_groups(batch, batch.mask)
        return {"zero_variance_frac": obj.zero_variance_groups(scores, mask=mask).float().mean().item()}
