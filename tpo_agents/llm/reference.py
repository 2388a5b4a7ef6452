"""KL of a language-model policy to its frozen reference model (the agents' ``ref_kl_coef``).

The estimator is TRL's (``GRPOTrainer`` with ``beta > 0``): per completion token
``exp(x) - x - 1`` with ``x = log pi_ref - log pi_theta`` (non-negative, 0 with a zero
gradient where the two agree), averaged over each completion's tokens, then over the
completions. Its gradient w.r.t. ``log pi_theta`` is ``1 - exp(x)``, which pulls every
sampled token's log-prob toward the reference's. Unlike TRL, ``x`` is clamped to
``[-20, 20]`` (:data:`~tpo_agents.objectives.KL_LOG_RATIO_CLAMP`, as the GRPO KL to the
snapshot): a token the policy has made ``e^20`` times less likely than the reference
would otherwise overflow the loss to inf in float32 (``exp(x)`` overflows past 88).

:class:`ReferenceKL` is what :meth:`~tpo_agents.base.GroupedAlgorithm.train` uses: the
reference log-probs of a batch are computed once (no gradient), and each epoch's penalty
reuses the token log-probs of the epoch's own forward pass (no second pass of the policy).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np
import torch

from tpo_agents.objectives import KL_LOG_RATIO_CLAMP

__all__ = ["ReferenceKL", "reference_kl"]


def reference_kl(
    token_logp: torch.Tensor, ref_token_logp: torch.Tensor, completion_mask: torch.Tensor
) -> torch.Tensor:
    """Mean over completions of the per-token mean of ``exp(x) - x - 1``,
    ``x = clamp(ref_token_logp - token_logp, -20, 20)`` (TRL's estimator of
    ``KL(pi_theta || pi_ref)``; the clamp keeps it finite).

    :param token_logp: ``[N, T]`` completion token log-probs under the policy (with gradient).
    :param ref_token_logp: ``[N, T]`` the same under the reference model (treated as constant).
    :param completion_mask: ``[N, T]`` True on completion tokens; padding counts nothing.
    :return: a scalar tensor, 0 when the two log-probs are equal on every token.
    """
    if token_logp.shape != ref_token_logp.shape or token_logp.shape != completion_mask.shape:
        raise ValueError(
            "token_logp, ref_token_logp and completion_mask must have the same shape; got "
            f"{tuple(token_logp.shape)}, {tuple(ref_token_logp.shape)}, "
            f"{tuple(completion_mask.shape)}"
        )
    mask = completion_mask.to(token_logp.device).bool()
    x = (ref_token_logp.detach().to(token_logp) - token_logp).clamp(
        -KL_LOG_RATIO_CLAMP, KL_LOG_RATIO_CLAMP
    )
    per_token = (torch.exp(x) - x - 1).masked_fill(~mask, 0.0)
    per_completion = per_token.sum(-1) / mask.sum(-1).clamp_min(1).to(per_token)
    return per_completion.mean()


class ReferenceKL:
    """The KL to the reference model over the epochs of one batch.

    :param policy: a :class:`~tpo_agents.policies.causal_lm.CausalLMPolicy` with a
        reference model (``has_reference``).
    :param batch: an :class:`~tpo_agents.rollout.batches.LMGroupBatch`.
    """

    def __init__(self, policy, batch):
        self.policy = policy
        self.mask = batch.completion_mask.to(policy.device).bool()
        self.ref_logp = policy.reference_log_probs(
            batch.prompt_ids, batch.prompt_mask, batch.completion_ids, batch.completion_mask
        )
        self.values: list[float] = []
        self._token_logp: torch.Tensor | None = None

    @contextlib.contextmanager
    def tracking(self) -> Iterator[None]:
        """Keep the token log-probs the policy computes inside the block (the epoch's
        ``current_log_probs``) for :meth:`penalize`."""
        with self.policy.record_log_probs() as record:
            yield
        if len(record) != 1:
            raise RuntimeError(
                "the KL to the reference model needs exactly one completion_log_probs call per "
                f"epoch; the agent's current_log_probs made {len(record)}"
            )
        self._token_logp = record[0]

    def penalize(self, loss: torch.Tensor | None, coef: float) -> torch.Tensor | None:
        """``loss + coef * KL`` (the KL is recorded whatever ``coef``).

        ``coef == 0`` returns ``loss`` itself (monitoring only). When the objective has
        nothing to learn (``loss`` None) the step is on the KL alone, unless the KL is 0
        (the policy still equals the reference on these tokens: a zero gradient).
        """
        if self._token_logp is None:
            raise RuntimeError("penalize() needs the epoch's log-probs: call it after tracking()")
        kl = reference_kl(self._token_logp, self.ref_logp, self.mask)
        self._token_logp = None
        self.values.append(kl.item())
        if coef == 0:
            return loss
        if loss is None:
            return coef * kl if self.values[-1] > 0 else None
        return loss + coef * kl

    def mean(self) -> float:
        """Mean KL over the epochs taken so far (0 before any)."""
        return float(np.mean(self.values)) if self.values else 0.0
