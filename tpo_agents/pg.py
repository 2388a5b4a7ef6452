"""PG (REINFORCE with a baseline): the base of the single-sample comparators.

One sampled rollout per context (:mod:`tpo_agents.dg` and :mod:`tpo_agents.critic_free_ppo`
change only the loss). On token envs (one completion per prompt) the update is
per token, with the advantage of token t = its credit minus the batch mean of the credit
at position t (the paper's critic-free baseline). The credit (``token_credit``) is the
token's own reward where the env scores every state (bag and sequential rewards; the
paper's "reward minus the batch mean per position"), and the reward-to-go otherwise
(terminal reward: every token sees the sequence reward). Elsewhere the advantage is the
episode return minus a baseline, applied to the log-prob of the whole rollout.
"""

from __future__ import annotations

import inspect
import math
from typing import Any, ClassVar

import torch

from tpo_agents import objectives as obj
from tpo_agents.base import GroupedAlgorithm
from tpo_agents.rollout import GroupBatch, SequenceGroupBatch

BASELINES = ("batch_mean", "pi_squared", "none")
TOKEN_CREDITS = ("auto", "reward", "reward_to_go")

# The base's own defaults (one place for each): what interaction_matched scales when not given.
_BASE_DEFAULTS = {
    name: param.default
    for name, param in inspect.signature(GroupedAlgorithm.__init__).parameters.items()
    if param.default is not inspect.Parameter.empty
}


def _per_token(batch) -> bool:
    return isinstance(batch, SequenceGroupBatch)


class PG(GroupedAlgorithm):
    """REINFORCE with a baseline: ``L = -mean((R - b) log pi)``.

    Defaults to one epoch (plain REINFORCE is on-policy).

    :param baseline: ``"batch_mean"`` (mean return of the batch; per position on token
        envs), ``"pi_squared"`` (``sum_a pi(a | x)^2`` at the first state, the paper's
        MNIST baseline; one-step episodes) or ``"none"``.
    :param token_credit: on token envs, ``"reward"`` (each token's own reward),
        ``"reward_to_go"``, or ``"auto"``: ``"reward"`` when the env scores every state
        (its ``tpo_group_mode`` hint is ``per_state``), else ``"reward_to_go"``.
    :param interaction_matched: the paper's interaction-matched comparison: the batch
        becomes ``batch_size * n_candidates`` contexts and the learning rate is scaled
        by ``sqrt(n_candidates)``, so this single-sample method consumes as many rollouts
        per update as a grouped method with K candidates.
    """

    default_n_epochs: ClassVar[int] = 1

    def __init__(
        self,
        policy,
        env,
        *args: Any,
        baseline: str = "batch_mean",
        interaction_matched: bool = False,
        token_credit: str = "auto",
        **kwargs: Any,
    ):
        if baseline not in BASELINES:
            raise ValueError(f"baseline must be one of {BASELINES}; got {baseline!r}")
        if token_credit not in TOKEN_CREDITS:
            raise ValueError(f"token_credit must be one of {TOKEN_CREDITS}; got {token_credit!r}")
        self.token_credit = token_credit
        self.baseline = baseline
        self.interaction_matched = bool(interaction_matched)
        if self.interaction_matched:
            k = kwargs.get("n_candidates", _BASE_DEFAULTS["n_candidates"])
            kwargs["batch_size"] = kwargs.get("batch_size", _BASE_DEFAULTS["batch_size"]) * k
            learning_rate = kwargs.get("learning_rate", _BASE_DEFAULTS["learning_rate"])
            kwargs["learning_rate"] = _scaled(learning_rate, math.sqrt(k))
        kwargs.setdefault("group_mode", "single")
        super().__init__(policy, env, *args, **kwargs)

    def default_group_mode(self, hint: str | None, can_score: bool) -> str:
        return "single"

    def prepare(self, batch) -> dict[str, torch.Tensor]:
        if _per_token(batch):
            if self.baseline == "pi_squared":
                raise ValueError("baseline='pi_squared' needs one-step episodes; use 'batch_mean' on token envs")
            rewards = batch.step_rewards
            if self._token_credit() == "reward_to_go":
                credit = rewards.flip(-1).cumsum(-1).flip(-1)
            else:
                # Per-token rewards in per-token units: our envs pay c_t / T per step so the
                # return is a fraction; the token's own credit is c_t (this matters for DG,
                # whose gate sees the advantage's scale).
                credit = rewards * rewards.shape[-1]
            b = credit.mean(0, keepdim=True) if self.baseline == "batch_mean" else torch.zeros(())
            return {"advantages": credit - b, "old_logp": batch.old_token_logp}
        scores = batch.scores
        if self.baseline == "batch_mean":
            b = scores[batch.mask].mean()
        elif self.baseline == "pi_squared":
            b = self._pi_squared(batch).view(-1, 1)
        else:
            b = torch.zeros(())
        return {"advantages": (scores - b).masked_fill(~batch.mask, 0.0), "old_logp": batch.old_logp}

    def _token_credit(self) -> str:
        if self.token_credit != "auto":
            return self.token_credit
        metadata = self.env.get_attr("metadata", indices=[0])[0] or {}
        return "reward" if metadata.get("tpo_group_mode") == "per_state" else "reward_to_go"

    def current_log_probs(self, batch) -> torch.Tensor:
        return batch.token_log_probs(self.policy) if _per_token(batch) else batch.log_probs(self.policy)

    def _pi_squared(self, batch: GroupBatch) -> torch.Tensor:
        """``sum_a pi(a | x)^2`` at each candidate's first state (rollout policy)."""
        if not hasattr(self.policy, "action_log_probs"):
            raise ValueError(
                f"baseline='pi_squared' sums pi(a)^2 over a Discrete action space; the "
                f"{self.action_space} actions of this env have none: use baseline='batch_mean'"
            )
        first = torch.full((batch.n_groups * batch.group_size,), batch.n_steps, dtype=torch.long)
        first = first.scatter_reduce(0, batch.step_candidate, torch.arange(batch.n_steps), reduce="amin")
        obs, _ = self.policy.obs_to_tensor(batch.states)
        pi = self.policy.action_log_probs(obs).exp()
        return (pi[batch.step_state[first]] ** 2).sum(-1)

    def compute_loss(self, batch, logp: torch.Tensor, frozen: dict[str, torch.Tensor]) -> torch.Tensor:
        return obj.reinforce_loss(logp, frozen["advantages"])


def _scaled(learning_rate, factor: float):
    if callable(learning_rate):
        return lambda progress: learning_rate(progress) * factor
    return learning_rate * factor
