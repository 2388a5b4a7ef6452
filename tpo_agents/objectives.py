"""The math of TPO and its comparators, as small pure torch functions.

Every function is batched over groups: tensors of shape ``[G, K]`` hold G groups
(contexts) of K candidates each. An optional boolean ``mask`` of the same shape
marks valid candidates (padded candidates are ``False``); an optional float
``weights`` tensor gives each candidate a non-negative weight, which turns a sample
mean into an expectation (the exact tabular studies pass ``weights = pi``).

Losses are *minimised*. Reductions are weighted means over valid candidates
(single-sample losses) or means over groups (the TPO cross-entropy), so their
scale does not depend on padding.

Notation (docs/algorithms.md, section 1): ``s`` raw scores, ``u`` standardized scores,
``l`` log pi(y_i | x) of each candidate (for a sequence, the sum of its token
log-probs), ``p = softmax(l)`` over the group, ``q`` the TPO target.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

__all__ = [
    "ZERO_VARIANCE_EPS",
    "GRPO_STD_EPS",
    "KL_LOG_RATIO_CLAMP",
    "standardize_scores",
    "zero_variance_groups",
    "tpo_target",
    "floor_target",
    "uniform_floor_loss",
    "tpo_loss",
    "group_pg_loss",
    "reinforce_loss",
    "ppo_clip_loss",
    "grpo_advantages",
    "grpo_kl",
    "grpo_loss",
    "dg_loss",
    "cross_entropy_loss",
    "target_entropy",
    "kl_divergence",
]

ZERO_VARIANCE_EPS = 1e-6
"""A group whose population std is at or below this counts as zero-variance (u = 0)."""

ZERO_VARIANCE_ULPS = 8
"""...or at or below this many units of float rounding of its largest |score|: equal scores
(31.6228 seven times, times 1.5) give a mean that is off by an ulp and a std of rounding
residue, which standardizing would blow up into +-1 scores."""

GRPO_STD_EPS = 1e-8
"""GRPO's advantage denominator is ``std + GRPO_STD_EPS``."""

KL_LOG_RATIO_CLAMP = 20.0
"""GRPO's per-sample KL estimator clamps the log ratio to +-this value."""


# --------------------------------------------------------------------------- checks


def _check_finite(name: str, x: torch.Tensor, mask: torch.Tensor | None = None) -> None:
    values = x if mask is None else x[mask]
    if not torch.isfinite(values).all():
        bad = values[~torch.isfinite(values)].flatten()[:3].tolist()
        raise ValueError(f"{name} must be finite; got non-finite values such as {bad}")


def _as_float(name: str, value: object) -> float:
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number; got {value!r}") from None


def _check_positive(name: str, value: object) -> None:
    v = _as_float(name, value)
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"{name} must be a finite number > 0; got {value!r}")


def _check_group(name: str, x: torch.Tensor, *, min_k: int = 1) -> None:
    if x.dim() != 2:
        raise ValueError(
            f"{name} must have shape [n_groups, K] (2-D); got shape {tuple(x.shape)}"
        )
    if x.shape[1] < min_k:
        raise ValueError(
            f"{name} needs K >= {min_k} candidates per group; got K = {x.shape[1]} "
            f"(shape {tuple(x.shape)})"
        )


def _check_same_shape(ref_name: str, ref: torch.Tensor, **others: torch.Tensor | None) -> None:
    for name, t in others.items():
        if t is not None and t.shape != ref.shape:
            raise ValueError(
                f"{name} must have the same shape as {ref_name} {tuple(ref.shape)}; "
                f"got {tuple(t.shape)}"
            )


def _validity(
    ref: torch.Tensor, mask: torch.Tensor | None, weights: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (bool mask, float weights) with invalid candidates weighted 0."""
    if mask is None:
        mask = torch.ones_like(ref, dtype=torch.bool)
    elif mask.dtype != torch.bool:
        raise ValueError(f"mask must be a bool tensor; got dtype {mask.dtype}")
    if weights is None:
        w = mask.to(ref.dtype)
    else:
        if (weights < 0).any() or not torch.isfinite(weights).all():
            raise ValueError("weights must be finite and >= 0")
        w = weights.to(ref.dtype) * mask.to(ref.dtype)
    return mask, w


def _weighted_mean(values: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    total = w.sum()
    if total <= 0:
        raise ValueError("no valid candidate: the mask (or weights) selects nothing")
    return (values * w).sum() / total


# ------------------------------------------------------------------ standardization


def _group_moments(
    scores: torch.Tensor, w: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Weighted mean and population std per group (weights normalised within group)."""
    wsum = w.sum(dim=-1, keepdim=True)
    if (wsum <= 0).any():
        raise ValueError("every group needs at least one valid candidate")
    s = torch.where(w > 0, scores, torch.zeros_like(scores))
    mean = (w * s).sum(-1, keepdim=True) / wsum
    var = (w * (s - mean) ** 2).sum(-1, keepdim=True) / wsum
    std = var.clamp_min(0).sqrt()
    overflowed = ~(torch.isfinite(mean) & torch.isfinite(std)).squeeze(-1)
    if overflowed.any():
        # Finite scores whose sum or squared deviations exceed the dtype (e.g. 1e20 in
        # float32): redo those groups in float64 on scores scaled into [-1, 1]. Other
        # groups keep the plain computation above, bit for bit.
        mean, std = mean.double(), std.double()
        mean[overflowed], std[overflowed] = _scaled_moments(s[overflowed], w[overflowed])
    return mean, std


def _scaled_moments(s: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Float64 mean and population std of ``[g, K]`` groups, computed as
    ``scale * moments(s / scale)`` with ``scale = max |s|`` so nothing can overflow."""
    s, w = s.double(), w.double()
    scale = s.abs().amax(-1, keepdim=True).clamp_min(torch.finfo(torch.float64).tiny)
    x = s / scale
    wsum = w.sum(-1, keepdim=True)
    mean = (w * x).sum(-1, keepdim=True) / wsum
    var = (w * (x - mean) ** 2).sum(-1, keepdim=True) / wsum
    return mean * scale, var.clamp_min(0).sqrt() * scale


def _flat(scores: torch.Tensor, mask: torch.Tensor, std: torch.Tensor, eps: float) -> torch.Tensor:
    """``[G, 1]``: groups whose std is within ``eps`` or within float rounding
    (:data:`ZERO_VARIANCE_ULPS`) of their largest valid |score|: all scores equal."""
    magnitude = torch.where(mask, scores.abs(), torch.zeros_like(scores)).amax(-1, keepdim=True)
    rounding = ZERO_VARIANCE_ULPS * torch.finfo(scores.dtype).eps * magnitude
    return std <= eps + rounding.to(std.dtype)


def standardize_scores(
    scores: torch.Tensor,
    mask: torch.Tensor | None = None,
    weights: torch.Tensor | None = None,
    eps: float = ZERO_VARIANCE_EPS,
) -> torch.Tensor:
    """Within-group standardization ``u_i = (s_i - mean(s)) / std(s)``.

    ``std`` is the *population* std (divide by K, or by the total weight when
    ``weights`` are given). A group with ``std <= eps`` (or within float rounding of its
    largest |score|, :data:`ZERO_VARIANCE_ULPS`) is zero-variance and gets ``u = 0`` everywhere; invalid (masked) candidates get ``u = 0``. Finite scores of
    any magnitude (up to the dtype's maximum) standardize without overflow.
    Raises ``ValueError`` on NaN/inf scores (among valid candidates).
    """
    _check_group("scores", scores, min_k=2)
    _check_same_shape("scores", scores, mask=mask, weights=weights)
    mask, w = _validity(scores, mask, weights)
    _check_finite("scores", scores, mask)
    mean, std = _group_moments(scores, w)
    flat = _flat(scores, mask, std, eps)
    u = (scores - mean) / torch.where(flat, torch.ones_like(std), std)
    u = torch.where(flat | ~mask, torch.zeros_like(u), u)
    return u.to(scores.dtype)


def zero_variance_groups(
    scores: torch.Tensor,
    mask: torch.Tensor | None = None,
    eps: float = ZERO_VARIANCE_EPS,
) -> torch.Tensor:
    """Bool ``[G]``: True where all valid scores of a group are equal (std <= eps, or
    within float rounding of the largest |score|)."""
    _check_group("scores", scores)
    _check_same_shape("scores", scores, mask=mask)
    mask, w = _validity(scores, mask, None)
    _check_finite("scores", scores, mask)
    return _flat(scores, mask, _group_moments(scores, w)[1], eps).squeeze(-1)


# ----------------------------------------------------------------------------- TPO


def tpo_target(
    old_logp: torch.Tensor | None,
    u: torch.Tensor,
    eta: float = 1.0,
    anchor: bool = True,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """The TPO target ``q = softmax(log_softmax(l_old) + u / eta)`` over each group.

    Equivalently ``q_i = p_old_i exp(u_i / eta) / sum_j p_old_j exp(u_j / eta)``,
    the unique maximiser of ``sum_i r_i u_i - eta KL(r || p_old)`` over the simplex.
    With ``anchor=False`` (TPO-no-anchor) ``q = softmax(u / eta)`` and ``old_logp``
    is ignored (may be None). ``old_logp`` are the rollout-time log pi(y_i | x); only
    their within-group differences matter. Masked candidates get ``q = 0``.
    The result carries no gradient.
    """
    _check_positive("eta", eta)
    _check_group("u", u, min_k=2)
    _check_same_shape("u", u, old_logp=old_logp if anchor else None, mask=mask)
    mask, _ = _validity(u, mask, None)
    _check_finite("u", u, mask)
    if anchor:
        if old_logp is None:
            raise ValueError("tpo_target with anchor=True needs old_logp; got None")
        _check_finite("old_logp", old_logp, mask)
        z = old_logp.detach() + u.detach() / eta
    else:
        z = u.detach() / eta
    z = z.masked_fill(~mask, float("-inf"))
    return torch.softmax(z, dim=-1)


def floor_target(q: torch.Tensor, floor: float, mask: torch.Tensor | None = None) -> torch.Tensor:
    """``(1 - floor) q + floor / K_valid`` over each group: every valid candidate keeps at
    least ``floor / K_valid`` of the target's mass, and masked ones stay at 0.

    ``floor`` in ``[0, 1]``; 0 returns ``q`` itself. A mixture of ``q`` with the uniform
    distribution over the valid candidates, so the argmax is ``q``'s: a policy fitted to it
    keeps sampling every candidate (every action, on critic groups), so a learned critic
    keeps seeing each and can correct its errors about it (docs/algorithms.md 4.5).
    """
    floor = _as_float("floor", floor)
    if not 0.0 <= floor <= 1.0:
        raise ValueError(f"floor must be in [0, 1]; got {floor!r}")
    _check_group("q", q)
    _check_same_shape("q", q, mask=mask)
    if floor == 0.0:
        return q
    valid = torch.ones_like(q, dtype=torch.bool) if mask is None else mask
    uniform = valid.to(q.dtype) / valid.sum(-1, keepdim=True).clamp_min(1).to(q.dtype)
    return (1.0 - floor) * q + floor * uniform


def uniform_floor_loss(logp: torch.Tensor, floor: float, mask: torch.Tensor | None = None) -> torch.Tensor:
    """``floor`` times the cross-entropy from the uniform distribution over each group's valid
    candidates to ``softmax(logp)``: ``floor * tpo_loss(logp, uniform)``, so
    ``dL/dl_i = floor * (p_i - 1 / K_valid) / G``.

    The term TPO's target floor adds to TPO's loss (the cross-entropy to
    ``(1 - f) q + f / K`` is ``(1 - f) CE(q) + f CE(uniform)``), for losses with no target
    (GRPO's ``policy_floor``): it pulls the policy toward uniform in proportion to how far
    it has left it, so no action's probability goes to 0 while another loss term is finite.
    """
    floor = _as_float("floor", floor)
    if not 0.0 <= floor <= 1.0:
        raise ValueError(f"floor must be in [0, 1]; got {floor!r}")
    if floor == 0.0:
        return logp.new_zeros(())
    return floor * tpo_loss(logp, floor_target(torch.zeros_like(logp), 1.0, mask=mask), mask=mask)


def tpo_loss(
    logp: torch.Tensor,
    q: torch.Tensor,
    mask: torch.Tensor | None = None,
    groups: torch.Tensor | None = None,
) -> torch.Tensor:
    """TPO's cross-entropy ``L = -mean_groups sum_i q_i log softmax(l)_i``.

    ``logp`` [G, K] are the current log pi(y_i | x) (with gradient); ``q`` the frozen
    target. The group softmax renormalises over the K candidates, so
    ``dL/dl_i = (p_i - q_i) / G``: the update stops by itself when p = q.
    ``groups`` (bool ``[G]``, optional) selects the groups that enter the loss; the others
    contribute exactly zero to the loss and its gradient (the mean still divides by G, so
    the selected groups' gradients are unchanged).
    """
    _check_group("logp", logp, min_k=2)
    _check_same_shape("logp", logp, q=q, mask=mask)
    if groups is not None and (groups.dtype != torch.bool or groups.shape != logp.shape[:1]):
        raise ValueError(
            f"groups must be a bool tensor of shape {tuple(logp.shape[:1])}; "
            f"got {groups.dtype} of shape {tuple(groups.shape)}"
        )
    mask, _ = _validity(logp, mask, None)
    _check_finite("logp", logp, mask)
    log_p = torch.log_softmax(logp.masked_fill(~mask, float("-inf")), dim=-1)
    per_group = -(q.detach() * log_p.masked_fill(~mask, 0.0)).sum(-1)
    if groups is not None:
        per_group = torch.where(groups, per_group, torch.zeros_like(per_group))
    return per_group.mean()


def group_pg_loss(
    logp: torch.Tensor,
    u: torch.Tensor,
    mask: torch.Tensor | None = None,
    weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """Group PG ablation: REINFORCE on the same candidates weighted by standardized scores.

    ``L = -mean_i u_i log pi(y_i | x)`` (mean over valid candidates); ``u`` held fixed.
    """
    return reinforce_loss(logp, u, mask=mask, weights=weights)


# ----------------------------------------------------------------- single-sample


def reinforce_loss(
    logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor | None = None,
    weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """REINFORCE / PG: ``L = -mean(A * log pi(a))`` with ``A`` held fixed.

    ``A = reward - baseline`` is computed by the caller. Any shape; ``mask`` and
    ``weights`` as in the module docstring.
    """
    _check_same_shape("logp", logp, advantages=advantages, mask=mask, weights=weights)
    mask, w = _validity(logp, mask, weights)
    _check_finite("advantages", advantages, mask)
    return _weighted_mean(-(advantages.detach() * logp), w)


def ppo_clip_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    clip_range: float = 0.2,
    mask: torch.Tensor | None = None,
    weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """PPO clipped surrogate: ``L = -mean(min(rho A, clip(rho, 1-eps, 1+eps) A))``.

    ``rho = exp(log pi_theta(a) - log pi_old(a))``; ``old_logp`` and ``A`` held fixed.
    """
    _check_positive("clip_range", clip_range)
    _check_same_shape(
        "logp", logp, old_logp=old_logp, advantages=advantages, mask=mask, weights=weights
    )
    mask, w = _validity(logp, mask, weights)
    _check_finite("advantages", advantages, mask)
    ratio = torch.exp(logp - old_logp.detach())
    adv = advantages.detach()
    surrogate = torch.minimum(ratio * adv, ratio.clamp(1 - clip_range, 1 + clip_range) * adv)
    return _weighted_mean(-surrogate, w)


def dg_loss(
    logp: torch.Tensor,
    advantages: torch.Tensor,
    eta: float = 1.0,
    mask: torch.Tensor | None = None,
    weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """Delightful PG: ``L = -mean(sigmoid(A * (-log pi(a)) / eta) * A * log pi(a))``.

    The gate ``sigmoid(A * surprisal / eta)`` is held fixed (no gradient through it),
    so the gradient is the gated REINFORCE gradient.
    """
    _check_positive("eta", eta)
    _check_same_shape("logp", logp, advantages=advantages, mask=mask, weights=weights)
    mask, w = _validity(logp, mask, weights)
    _check_finite("advantages", advantages, mask)
    adv = advantages.detach()
    gate = torch.sigmoid(adv * (-logp.detach()) / eta)
    return _weighted_mean(-(gate * adv * logp), w)


def cross_entropy_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Supervised oracle: ``L = -mean log softmax(logits)[label]``."""
    if logits.dim() != 2 or labels.shape != logits.shape[:1]:
        raise ValueError(
            f"cross_entropy_loss expects logits [N, A] and labels [N]; got "
            f"{tuple(logits.shape)} and {tuple(labels.shape)}"
        )
    return F.cross_entropy(logits, labels)


# ---------------------------------------------------------------------------- GRPO


def grpo_advantages(
    scores: torch.Tensor,
    mask: torch.Tensor | None = None,
    weights: torch.Tensor | None = None,
    eps: float = GRPO_STD_EPS,
) -> torch.Tensor:
    """GRPO's group advantage ``A_i = (s_i - mean(s)) / (std(s) + eps)`` (population std).

    A zero-variance group (population std <= ``ZERO_VARIANCE_EPS``, or within float rounding
    of its largest |score|, as :func:`zero_variance_groups` says) gets ``A = 0`` exactly.
    Finite scores of any magnitude are standardized without overflow.
    """
    _check_group("scores", scores, min_k=2)
    _check_same_shape("scores", scores, mask=mask, weights=weights)
    mask, w = _validity(scores, mask, weights)
    _check_finite("scores", scores, mask)
    mean, std = _group_moments(scores, w)
    adv = (scores - mean) / (std + eps)
    # Equal scores can leave a rounding residue in ``s - mean`` (3 x 0.1 does not sum to 0.3):
    # a zero-variance group's advantage is exactly 0.
    adv = torch.where(mask & ~_flat(scores, mask, std, ZERO_VARIANCE_EPS), adv, torch.zeros_like(adv))
    return adv.to(scores.dtype)


def grpo_kl(logp: torch.Tensor, old_logp: torch.Tensor) -> torch.Tensor:
    """Per-sample reverse-KL estimate to the rollout snapshot: ``exp(-r) + r - 1``.

    ``r = clamp(log pi_theta - log pi_old, -20, 20)``; non-negative, zero at r = 0.
    """
    r = (logp - old_logp.detach()).clamp(-KL_LOG_RATIO_CLAMP, KL_LOG_RATIO_CLAMP)
    return torch.exp(-r) + r - 1


def grpo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    scores: torch.Tensor,
    clip_range: float = 0.2,
    beta: float = 0.04,
    mask_zero_variance: bool = False,
    mask: torch.Tensor | None = None,
    weights: torch.Tensor | None = None,
    advantages: torch.Tensor | None = None,
) -> torch.Tensor:
    """GRPO: ``L = ppo_clip(rho, A) + beta * mean(exp(-r) + r - 1)`` over [G, K] groups.

    ``advantages`` (``[G, K]``, optional) replaces ``grpo_advantages(scores)`` when the
    scores are already advantages on a common scale (critic groups).

    ``A = grpo_advantages(scores)``, ``r = log pi_theta - log pi_old``. ``beta = 0``
    gives GRPO (no KL). With ``mask_zero_variance`` the candidates of zero-variance
    groups are dropped from both terms (their advantage is 0 anyway, so only the KL
    term and the normalisation change).

    ``logp`` / ``old_logp`` are ``[G, K]`` (one ratio per candidate) or ``[G, K, T]``:
    per-token log-probs of sequence candidates, the standard GRPO form, where every
    token of candidate i shares its advantage A_i and the surrogate and KL terms
    average over all tokens.
    """
    b = _as_float("beta", beta)
    if not (math.isfinite(b) and b >= 0):
        raise ValueError(f"beta must be a finite number >= 0; got {beta!r}")
    _check_group("scores", scores)
    _check_same_shape("scores", scores, mask=mask)
    if logp.shape[:2] != scores.shape or logp.dim() not in (2, 3) or old_logp.shape != logp.shape:
        raise ValueError(
            f"logp and old_logp must have shape {tuple(scores.shape)} or {tuple(scores.shape)} + (T,); "
            f"got {tuple(logp.shape)} and {tuple(old_logp.shape)}"
        )
    mask, w = _validity(scores, mask, weights)
    if advantages is None:
        adv = grpo_advantages(scores, mask=mask, weights=weights)
    else:
        _check_same_shape("scores", scores, advantages=advantages)
        _check_finite("advantages", advantages, mask)
        adv = torch.where(mask, advantages, torch.zeros_like(advantages))
    if mask_zero_variance:
        keep = ~zero_variance_groups(scores, mask=mask)
        mask = mask & keep.unsqueeze(-1)
        w = w * keep.unsqueeze(-1).to(w.dtype)
        if w.sum() <= 0:
            # Every group is zero-variance: nothing to learn, but keep the graph.
            return (logp * 0.0).sum()
    if logp.dim() == 3:  # share each candidate's advantage, mask and weight with its tokens
        adv, mask, w = (x.unsqueeze(-1).expand_as(logp) for x in (adv, mask, w))
    loss = ppo_clip_loss(logp, old_logp, adv, clip_range, mask=mask, weights=w)
    if beta > 0:
        loss = loss + beta * _weighted_mean(grpo_kl(logp, old_logp), w)
    return loss


# ------------------------------------------------------------------ diagnostics


def target_entropy(q: torch.Tensor) -> torch.Tensor:
    """Entropy ``-sum q log q`` of each group's target, shape [G]."""
    return -(q * torch.log(q.clamp_min(1e-30))).sum(-1)


def kl_divergence(q: torch.Tensor, logp: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """``KL(q || p)`` per group, with ``p = softmax(logp)`` over the valid candidates."""
    mask, _ = _validity(logp, mask, None)
    log_p = torch.log_softmax(logp.masked_fill(~mask, float("-inf")), dim=-1)
    log_q = torch.log(q.clamp_min(1e-30))
    return (q * (log_q - log_p.masked_fill(~mask, 0.0))).sum(-1)
