"""TPO's loss on TRL's tensors: per-token log-probs of ``num_generations`` completions per prompt.

TRL's ``GRPOTrainer`` hands its loss a flat batch of ``B`` completions with per-token
log-probs ``[B, T]`` and a completion mask ``[B, T]``; the completions of one prompt are
``num_generations`` consecutive rows. These functions turn that layout into TPO's
``[G, K]`` groups and reuse :mod:`tpo_agents.objectives` for the math:

* the sequence log-prob ``l_i`` of a completion is the sum of its masked token log-probs;
* the scores are standardized within each group (population std, zero-variance groups get
  ``u = 0``);
* the target ``q = softmax(log_softmax(l_old) + u / eta)`` is built from the rollout-time
  (old-policy) sequence log-probs and held fixed;
* the loss is the cross-entropy ``-sum_i q_i log softmax(l)_i``, summed over groups and
  divided by the number of groups, so ``dL/dl_i = (p_i - q_i) / G``.

A completion is *valid* when its score is finite (TRL marks completions that no reward
function scored with NaN) and it has at least one unmasked token (``mask_truncated_completions``
masks truncated completions entirely). Invalid completions leave their group's softmax; a
group with no valid completion contributes nothing (its loss counts as 0, not as missing,
so the loss scale does not depend on how many groups were dropped).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tpo_agents import objectives as obj

__all__ = [
    "AGGREGATIONS",
    "TPOLossOutput",
    "sequence_logps",
    "group_rows",
    "standardize_group_rewards",
    "tpo_group_loss",
    "tpo_sequence_loss",
]

AGGREGATIONS = ("sum_then_normalize", "normalize_then_sum")
"""How several reward functions combine (TRL's ``multi_objective_aggregation`` values)."""


def _check_group_size(num_generations: int) -> int:
    if (
        isinstance(num_generations, bool)
        or not isinstance(num_generations, int)
        or num_generations < 2
    ):
        raise ValueError(f"num_generations must be an int >= 2; got {num_generations!r}")
    return num_generations


def group_rows(x: torch.Tensor, num_generations: int) -> torch.Tensor:
    """Reshape ``[B, ...]`` rows into ``[B // K, K, ...]`` groups of consecutive rows.

    Raises ``ValueError`` when ``B`` is not a multiple of ``num_generations``: a group split
    across two loss computations cannot be normalised by a softmax.
    """
    k = _check_group_size(num_generations)
    if x.shape[0] % k:
        raise ValueError(
            f"the batch holds {x.shape[0]} completions, not a multiple of num_generations = {k}: "
            "TPO's loss needs every prompt's completions together (set per_device_train_batch_size "
            "and per_device_eval_batch_size to multiples of num_generations)"
        )
    return x.reshape(x.shape[0] // k, k, *x.shape[1:])


def sequence_logps(per_token_logps: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``l_i = sum_t mask[i, t] * logp[i, t]``, shape ``[B]``, in float32 at least (bf16 sums drift)."""
    if per_token_logps.shape != mask.shape or per_token_logps.dim() != 2:
        raise ValueError(
            f"per_token_logps and mask must both have shape [B, T]; got {tuple(per_token_logps.shape)} "
            f"and {tuple(mask.shape)}"
        )
    dtype = torch.promote_types(per_token_logps.dtype, torch.float32)
    return (per_token_logps.to(dtype) * mask.to(dtype)).sum(-1)


def _standardize_finite(scores: torch.Tensor) -> torch.Tensor:
    """Standardize ``[G, K]`` scores over their finite entries; NaN entries and all-NaN groups get 0."""
    finite = torch.isfinite(scores)
    has_any = finite.any(-1, keepdim=True)
    mask = torch.where(has_any, finite, torch.ones_like(finite))
    filled = torch.where(finite, scores, torch.zeros_like(scores))
    u = obj.standardize_scores(filled, mask=mask)
    return torch.where(finite, u, torch.zeros_like(u))


def standardize_group_rewards(
    rewards_per_func: torch.Tensor,
    num_generations: int,
    reward_weights: torch.Tensor | None = None,
    aggregation: str = "sum_then_normalize",
    valid: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Standardized group scores ``u`` and the scored-row mask from TRL's reward matrix.

    :param rewards_per_func: ``[B, F]`` rewards of F reward functions (NaN where a function
        returned None), rows grouped by ``num_generations``.
    :param reward_weights: ``[F]`` weights (default all 1).
    :param aggregation: ``"sum_then_normalize"``: the weighted sum of the rewards (NaN ones
        skipped) is standardized within each group; ``"normalize_then_sum"``: each function's
        rewards are standardized within the group first, the weighted sum of those is then
        standardized again (TPO needs unit-scale scores: ``eta`` is measured in their units).
    :param valid: ``[B]`` bool, rows that stay in their group (e.g. False for completions whose
        tokens are all masked); default all.
    :return: ``(u, scored)``, both ``[B]``; ``scored`` is False where every function returned
        None or ``valid`` is False; such rows get ``u = 0``, take no part in their group's
        statistics, and must be left out of the loss (its ``valid`` argument).
    """
    if rewards_per_func.dim() != 2:
        raise ValueError(
            f"rewards_per_func must have shape [B, n_reward_funcs]; got {tuple(rewards_per_func.shape)}"
        )
    n_funcs = rewards_per_func.shape[1]
    r = rewards_per_func.float()
    if reward_weights is None:
        w = torch.ones(n_funcs, dtype=r.dtype, device=r.device)
    else:
        w = reward_weights.to(device=r.device, dtype=r.dtype).flatten()
        if w.numel() != n_funcs:
            raise ValueError(
                f"reward_weights has {w.numel()} entries for {n_funcs} reward functions"
            )
    if torch.isinf(r).any():
        raise ValueError("rewards must be finite or NaN (unscored); got an infinite reward")
    scored = ~torch.isnan(r).all(dim=1)
    if valid is not None:
        if valid.shape != scored.shape:
            raise ValueError(
                f"valid must have shape {tuple(scored.shape)}; got {tuple(valid.shape)}"
            )
        scored = scored & valid.to(device=scored.device, dtype=torch.bool)
    grouped = group_rows(r, num_generations)  # [G, K, F]
    if aggregation == "sum_then_normalize":
        total = (grouped * w).nansum(-1)
    elif aggregation == "normalize_then_sum":
        per_func = torch.stack([_standardize_finite(grouped[..., f]) for f in range(n_funcs)], -1)
        total = (per_func * w).sum(-1)
    else:
        raise ValueError(f"aggregation must be one of {AGGREGATIONS}; got {aggregation!r}")
    total = torch.where(
        group_rows(scored, num_generations), total, torch.full_like(total, float("nan"))
    )
    return _standardize_finite(total).flatten(), scored


@dataclass
class TPOLossOutput:
    """The loss and what a trainer logs about it (per-group tensors carry no gradient)."""

    loss: torch.Tensor
    """Scalar: summed per-group cross-entropy / number of groups (with gradient)."""
    q: torch.Tensor
    """``[G, K]`` target (0 on invalid completions and on dropped groups)."""
    target_entropy: torch.Tensor
    """``[G_kept]`` entropy of each kept group's target."""
    kl_target_old: torch.Tensor
    """``[G_kept]`` KL(q || p_old): how far the target moved from the rollout policy."""
    kl_target_current: torch.Tensor
    """``[G_kept]`` KL(q || p): what is left to fit (0 once p = q)."""
    zero_variance: torch.Tensor
    """``[G]`` bool: the group's standardized scores are all 0."""
    kept: torch.Tensor
    """``[G]`` bool: the group has at least one valid completion."""
    active: torch.Tensor
    """``[G]`` bool: the group enters the loss (kept, and not a zero-variance group on the
    rollout policy, whose exact gradient is 0)."""
    p_minus_q: torch.Tensor
    """``[B]`` ``p_i - q_i`` on the valid rows of active groups, 0 elsewhere: ``dL/dl_i`` times
    the number of groups."""
    row_loss: torch.Tensor
    """``[B]`` ``-q_i log p_i`` on the valid rows of active groups, 0 elsewhere: each group's
    cross-entropy split over its rows (so a row subset carries its share of the loss)."""


def tpo_group_loss(
    per_token_logps: torch.Tensor,
    mask: torch.Tensor,
    u: torch.Tensor,
    num_generations: int,
    old_per_token_logps: torch.Tensor | None = None,
    valid: torch.Tensor | None = None,
    eta: float = 1.0,
    anchor: bool = True,
) -> TPOLossOutput:
    """TPO's target-matching loss over groups of ``num_generations`` consecutive completions.

    :param per_token_logps: ``[B, T]`` current log-probs of the completion tokens (with gradient).
    :param mask: ``[B, T]`` 1 on the tokens the policy generated (TRL's completion mask, times
        its tool mask in multi-turn runs), 0 on padding.
    :param u: ``[B]`` standardized group scores (:func:`standardize_group_rewards`).
    :param old_per_token_logps: ``[B, T]`` rollout-time log-probs; ``None`` means the policy has
        not changed since the rollout, so the detached current log-probs stand in for them.
    :param valid: ``[B]`` bool, completions that belong in their group (default: all with at
        least one unmasked token).
    :param eta: target temperature (> 0). :param anchor: False gives TPO-no-anchor
        (``q = softmax(u / eta)``).
    """
    logp = sequence_logps(per_token_logps, mask)
    old = None
    if old_per_token_logps is not None:
        if old_per_token_logps.shape != per_token_logps.shape:
            raise ValueError(
                f"old_per_token_logps must have shape {tuple(per_token_logps.shape)}; "
                f"got {tuple(old_per_token_logps.shape)}"
            )
        old = sequence_logps(old_per_token_logps.detach(), mask)
    has_tokens = mask.sum(-1) > 0
    valid = has_tokens if valid is None else valid.to(torch.bool) & has_tokens
    return tpo_sequence_loss(
        logp, u, num_generations, old_logp=old, valid=valid, eta=eta, anchor=anchor
    )


def tpo_sequence_loss(
    logp: torch.Tensor,
    u: torch.Tensor,
    num_generations: int,
    old_logp: torch.Tensor | None = None,
    valid: torch.Tensor | None = None,
    eta: float = 1.0,
    anchor: bool = True,
) -> TPOLossOutput:
    """:func:`tpo_group_loss` on sequence log-probs ``l_i`` (``[B]``, groups of consecutive rows).

    ``old_logp`` ``[B]`` are the anchor's sequence log-probs (``None``: the policy has not
    changed since the rollout, the detached ``logp`` stand in); ``valid`` ``[B]`` bool, default all.
    """
    k = _check_group_size(num_generations)
    old = logp.detach() if old_logp is None else old_logp.detach().to(logp.dtype)
    valid = torch.ones_like(logp, dtype=torch.bool) if valid is None else valid.to(torch.bool)
    if u.shape != logp.shape or valid.shape != logp.shape or old.shape != logp.shape:
        raise ValueError(
            f"u, valid and old_logp must have shape [B] = {tuple(logp.shape)}; got {tuple(u.shape)}, "
            f"{tuple(valid.shape)} and {tuple(old.shape)}"
        )
    logp_g, old_g = group_rows(logp, k), group_rows(old, k)
    u_g = group_rows(u.to(device=logp.device, dtype=logp.dtype), k)
    valid_g = group_rows(valid.to(logp.device), k)
    kept = valid_g.any(-1)
    n_groups = logp_g.shape[0]
    q = torch.zeros_like(logp_g)
    zero_variance = (u_g.abs() * valid_g).amax(-1) == 0
    # On the rollout policy (no old log-probs given), a zero-variance group has q = p exactly,
    # hence zero gradient; computed in floating point it leaves ulp-level noise, which Adam
    # would blow up into learning-rate-sized steps. Such groups are skipped (exact zero).
    # With old log-probs (a later iteration) their gradient p - p_old is real: they stay.
    active = kept & ~zero_variance if (old_logp is None and anchor) else kept
    if not kept.any():  # nothing scored: keep the graph, move nothing
        empty, zeros = logp_g.new_zeros(0), torch.zeros_like(logp).detach()
        return TPOLossOutput(
            (logp * 0.0).sum(), q, empty, empty, empty, zero_variance, kept, active, zeros, zeros
        )
    lg, og, ug, mg = logp_g[kept], old_g[kept], u_g[kept], valid_g[kept]
    q_kept = obj.tpo_target(og, ug, eta=eta, anchor=anchor, mask=mg)
    q[kept] = q_kept
    if active.any():
        loss = obj.tpo_loss(logp_g[active], q[active], mask=valid_g[active])
        loss = loss * (int(active.sum()) / n_groups)
    else:
        loss = (logp * 0.0).sum()
    with torch.no_grad():
        on = valid_g & active[:, None]
        log_p = torch.log_softmax(logp_g.detach().masked_fill(~valid_g, float("-inf")), dim=-1)
        log_p = log_p.masked_fill(~on, 0.0)
        zero = torch.zeros_like(q)
        return TPOLossOutput(
            loss=loss,
            q=q,
            target_entropy=obj.target_entropy(q_kept),
            kl_target_old=obj.kl_divergence(q_kept, og, mask=mg),
            kl_target_current=obj.kl_divergence(q_kept, lg.detach(), mask=mg),
            zero_variance=zero_variance,
            kept=kept,
            active=active,
            p_minus_q=torch.where(on, log_p.exp() - q, zero).flatten(),
            row_loss=torch.where(on, -q * log_p, zero).flatten(),
        )
