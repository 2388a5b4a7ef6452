"""TPO: fit the policy to the target q ∝ p_old · exp(u / eta) over each group."""

from __future__ import annotations

from typing import Any

import torch
from gymnasium import spaces

from tpo_agents import objectives as obj
from tpo_agents.base import GroupedAlgorithm
from tpo_agents.checks import real_number
from tpo_agents.rollout import GroupBatch


class TPO(GroupedAlgorithm):
    """Target Policy Optimization (SB3 API).

    Each iteration collects ``batch_size`` groups of candidates, standardizes their
    scores within each group (``u``), freezes the target
    ``q = softmax(log p_old + u / eta)`` and takes ``n_epochs`` cross-entropy steps
    towards it (gradient ``p - q`` w.r.t. the group logits).

    Groups (``group_mode="auto"``): all actions with sampled-feedback scores on bandit
    envs; K candidates per state scored by ``score_candidates`` when the env offers it;
    K rollouts per context from seeded resets on token envs under terminal reward (and
    where wrappers hide the env's scores); candidates played from copies of the state on
    envs whose metadata asks for it (``tpo_group_mode="branch"``; any copyable env with
    ``group_mode="branch"``); on any other env (CartPole, ...) every action of each visited
    state, scored by a learned critic (``critic``).

    :param eta: target temperature (> 0); smaller moves further from p_old.
    :param anchor: False gives TPO-no-anchor, ``q = softmax(u / eta)``. The anchor is to
        p_old, the rollout policy; language-model policies can add a KL to a frozen
        reference model with ``ref_kl_coef`` (:class:`~tpo_agents.base.GroupedAlgorithm`).
    :param target_floor: in ``[0, 1]``; the target gives each of a group's K candidates at
        least ``target_floor / K`` of its mass, ``q <- (1 - target_floor) q +
        target_floor / K`` (:func:`~tpo_agents.objectives.floor_target`). None (default):
        ``CRITIC_TARGET_FLOOR`` (0.1) on ``critic`` groups of a ``Discrete`` action space
        (every action of a state, scored by a learned critic), 0 on every other group, where
        the target is the paper's. On critic groups the policy keeps playing every action
        at a rate of about ``0.1 / n_actions`` or more, so the critic keeps data on each and
        corrects its errors about it; without the floor the policy fitted a young critic's
        small, consistent errors until an action was never played again, and the error
        that dropped it was never corrected (CartPole relapses, a non-slippery FrozenLake
        seed that stopped on the start square; docs/algorithms.md 4.5). Evaluation with
        ``deterministic=True`` takes each state's most likely action, which the floor does
        not change.
    See :class:`~tpo_agents.base.GroupedAlgorithm` for the other parameters.
    """

    CRITIC_TARGET_FLOOR: float = 0.1
    """``target_floor`` on ``critic`` groups of a ``Discrete`` action space when it is None."""

    def __init__(
        self,
        policy,
        env,
        *args: Any,
        eta: float = 1.0,
        anchor: bool = True,
        target_floor: float | None = None,
        **kwargs: Any,
    ):
        self.eta = real_number("eta", eta, above=0.0)
        self.anchor = bool(anchor)
        if target_floor is not None:
            target_floor = real_number("target_floor (or None)", target_floor, at_least=0.0)
            if target_floor > 1.0:
                raise ValueError(f"target_floor must be in [0, 1] (or None); got {target_floor!r}")
        self.target_floor = target_floor
        super().__init__(policy, env, *args, **kwargs)

    def critic_n_epochs(self, action_space: spaces.Space) -> int:
        """1 on every action of a state (``Discrete``: 4 epochs chased the critic's noise on
        CartPole, tuning seed 100: 289 against 500), the algorithm's 4 on K sampled actions
        (``Box``, ``MultiDiscrete``, ``MultiBinary``): with one step per batch Pendulum's tuning
        seeds 100 and 101 pumped and never balanced (-733, -747), with 4 they reached -199
        and -161 (docs/algorithms.md 4.5)."""
        return 1 if isinstance(action_space, spaces.Discrete) else self.default_n_epochs

    def resolved_target_floor(self, batch: GroupBatch | None = None) -> float:
        """The floor applied to ``batch``'s targets (``target_floor``, or its default; without a
        batch, to the groups this agent's mode and action space make)."""
        floor = getattr(self, "target_floor", None)  # a TPO saved before the floor existed: None
        if floor is not None:
            return floor
        if self.resolve_group_mode() != "critic":
            return 0.0
        sampled = batch.sampled if batch is not None else not isinstance(self.action_space, spaces.Discrete)
        return 0.0 if sampled else self.CRITIC_TARGET_FLOOR

    def default_group_mode(self, hint: str | None, can_score: bool) -> str:
        if hint in ("all_actions", "branch", "sequence"):
            return hint
        if can_score:
            return "per_state"
        # Scores hidden by the user's wrappers: K exact rollouts through them; an env with
        # no scores and no hint at all (CartPole, ...): every action scored by a critic.
        return "sequence" if hint == "per_state" else "critic"

    def prepare(self, batch: GroupBatch) -> dict[str, torch.Tensor]:
        if batch.group_size < 2:
            # One candidate per group (a one-action space: every action is the group): the
            # target is that candidate, as the policy is within the group, so the update is
            # exactly zero and compute_loss takes no step.
            ones = batch.mask.float()
            return {"u": torch.zeros_like(ones), "q": ones,
                    "zero_variance": torch.ones(batch.n_groups, dtype=torch.bool, device=ones.device)}
        if batch.standardized:  # critic groups: advantages on one batch-wide scale
            u = batch.scores.masked_fill(~batch.mask, 0.0)
        else:
            u = obj.standardize_scores(batch.scores, mask=batch.mask)
        q = obj.tpo_target(batch.old_logp, u, eta=self.eta, anchor=self.anchor, mask=batch.mask)
        q = obj.floor_target(q, self.resolved_target_floor(batch), mask=batch.mask)
        return {"u": u, "q": q, "zero_variance": obj.zero_variance_groups(batch.scores, mask=batch.mask)}

    def compute_loss(
        self, batch: GroupBatch, logp: torch.Tensor, frozen: dict[str, torch.Tensor]
    ) -> torch.Tensor | None:
        """TPO's cross-entropy. At the rollout parameters a zero-variance group has
        ``q = p_old = p``, an exact zero gradient that float round-off (and Adam's scaling
        of it) would turn into a step, so such groups are left out until a step has moved
        the policy; when every group is zero-variance no step is taken at all (the update
        stops by itself). With ``anchor=False`` the target does not depend on p_old and
        every group counts."""
        if batch.group_size < 2:  # q = p within a one-candidate group: nothing to learn
            return None
        zero = frozen["zero_variance"]
        if self._params_moved or not self.anchor:
            return obj.tpo_loss(logp, frozen["q"], mask=batch.mask)
        if bool(zero.all()):
            return None
        return obj.tpo_loss(logp, frozen["q"], mask=batch.mask, groups=None if not zero.any() else ~zero)

    def diagnostics(self, batch: GroupBatch, frozen: dict[str, torch.Tensor]) -> dict[str, float]:
        if batch.group_size < 2:
            return {"target_entropy": 0.0, "kl_target_old": 0.0, "zero_variance_frac": 1.0}
        q = frozen["q"]
        return {
            "target_entropy": obj.target_entropy(q).mean().item(),
            "kl_target_old": obj.kl_divergence(q, batch.old_logp, mask=batch.mask).mean().item(),
            "zero_variance_frac": obj.zero_variance_groups(batch.scores, mask=batch.mask).float().mean().item(),
        }
