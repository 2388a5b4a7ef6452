"""Muon for 2-D weight matrices, AdamW for everything else: the paper's transformer optimizer."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch

# torch.optim.AdamW(fused=True) runs on CPU tensors from torch 2.4.
_FUSED_ADAMW = tuple(int(v) for v in torch.__version__.split(".")[:2]) >= (2, 4)


def newton_schulz_orthogonalize(
    g: torch.Tensor, coefficients: tuple[float, float, float], steps: int, eps: float, add_eps: bool = False
) -> torch.Tensor:
    """Muon's quintic Newton-Schulz iteration (``~ U V^T`` of ``g = U S V^T``) in g's dtype.

    ``g`` is one matrix ``[m, n]`` or a stack of same-shape matrices ``[b, m, n]``, each
    orthogonalized on its own (a stack runs as batched matmuls: fewer, larger calls). The
    iteration starts from ``g / max(||g||_F, eps)`` (torch's Muon) or, with ``add_eps``,
    ``g / (||g||_F + eps)`` (optax's)."""
    if g.ndim == 2:
        return newton_schulz_orthogonalize(g.unsqueeze(0), coefficients, steps, eps, add_eps)[0]
    a, b, c = coefficients
    tall = g.shape[-2] > g.shape[-1]
    x = g.mT if tall else g
    norm = torch.linalg.vector_norm(x, dim=(-2, -1), keepdim=True)
    x = x / (norm + eps if add_eps else norm.clamp_min(eps))
    for _ in range(steps):
        gram = x @ x.mT
        x = torch.baddbmm(x, torch.baddbmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    return x.mT if tall else x


def _orthogonalize_all(
    updates: list[torch.Tensor],
    coefficients: tuple[float, float, float],
    steps: int,
    eps: float,
    add_eps: bool = False,
) -> list[torch.Tensor]:
    """Newton-Schulz of every matrix, as few batched calls as possible.

    Each matrix is taken wide (``m <= n``) and matrices with the same ``n`` are stacked,
    the shorter ones padded with zero rows up to the group's largest ``m``. Padding is
    exact: zero rows add nothing to the Gram matrix or the norm and stay zero, so each
    matrix's rows come out as if it had been orthogonalized alone."""
    wide = [u if u.shape[0] <= u.shape[1] else u.T for u in updates]
    by_width: dict[int, list[int]] = {}
    for i, w in enumerate(wide):
        by_width.setdefault(w.shape[1], []).append(i)
    out: list[torch.Tensor] = list(updates)
    for width, members in by_width.items():
        rows = max(wide[i].shape[0] for i in members)
        stack = wide[members[0]].new_zeros((len(members), rows, width), dtype=torch.float32)
        for j, i in enumerate(members):
            stack[j, : wide[i].shape[0]] = wide[i]
        ortho = newton_schulz_orthogonalize(stack, coefficients, steps, eps, add_eps)
        for j, i in enumerate(members):
            x = ortho[j, : wide[i].shape[0]]
            out[i] = x if updates[i].shape[0] <= updates[i].shape[1] else x.T
    return out


class Float32Muon(torch.optim.Muon):
    """``torch.optim.Muon``, with the Newton-Schulz iteration run in float32 for CPU
    parameters (torch runs it in bfloat16, whose matmuls are several times slower than
    float32 on CPUs; on a GPU this defers to torch's own step). Same state layout.

    The step is batched: momentum and parameter updates use torch's multi-tensor
    (``_foreach``) kernels, and matrices of one width are orthogonalized together
    (:func:`_orthogonalize_all`), which matters for small transformers, where per-call
    overhead dominates the step."""

    @torch.no_grad()
    def step(self, closure=None):
        if any(p.is_cuda for g in self.param_groups for p in g["params"]):
            return super().step(closure)
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params, grads, bufs = [], [], []
            self._init_group(group, params, grads, bufs)
            if not params:
                continue
            lr, momentum = group["lr"], group["momentum"]
            torch._foreach_lerp_(bufs, grads, 1 - momentum)
            updates = torch._foreach_lerp(grads, bufs, momentum) if group["nesterov"] else bufs
            updates = _orthogonalize_all(updates, group["ns_coefficients"], group["ns_steps"], group["eps"])
            if group["weight_decay"]:
                torch._foreach_mul_(params, 1 - lr * group["weight_decay"])
            scales = [-_muon_lr(lr, group["adjust_lr_fn"], p.shape) for p in params]
            torch._foreach_add_(params, torch._foreach_mul([u.to(p.dtype) for u, p in zip(updates, params)], scales))
        return loss


def _muon_lr(lr: float, adjust_lr_fn: str | None, shape: torch.Size) -> float:
    """torch.optim.Muon's per-matrix learning-rate adjustment."""
    A, B = shape[:2]
    if adjust_lr_fn in (None, "original"):
        return lr * math.sqrt(max(1, A / B))
    if adjust_lr_fn == "match_rms_adamw":
        return lr * 0.2 * math.sqrt(max(A, B))
    return lr


class MuonAdamW(torch.optim.Optimizer):
    """One optimizer object over two: Muon (:class:`Float32Muon`) for parameters with
    ``ndim == 2`` (weight matrices, embeddings and the head included, as in the paper's
    artifact) and ``torch.optim.AdamW`` for the rest (biases, LayerNorm gains).

    It behaves like a single torch optimizer for SB3: ``param_groups`` lists both
    optimizers' groups (so learning-rate schedules reach both), and ``state_dict`` /
    ``load_state_dict`` round-trip both states.

    :param lr: learning rate of both parts (1e-3 in the paper).
    :param adamw_lr: AdamW's learning rate when it should differ from ``lr``.
    :param weight_decay: decoupled weight decay of both parts (0 by default).
    :param momentum: Muon momentum.
    :param betas: AdamW betas.
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        lr: float = 1e-3,
        adamw_lr: float | None = None,
        weight_decay: float = 0.0,
        momentum: float = 0.95,
        betas: tuple[float, float] = (0.9, 0.999),
    ):
        params = [p for p in params if p.requires_grad]
        if not params:
            raise ValueError("MuonAdamW got no parameters that require gradients")
        matrices = [p for p in params if p.ndim == 2]
        others = [p for p in params if p.ndim != 2]
        self.parts: list[torch.optim.Optimizer] = []
        if matrices:
            self.parts.append(Float32Muon(matrices, lr=lr, weight_decay=weight_decay, momentum=momentum))
        if others:
            # The fused kernel is one call for all tensors (5x faster than the loop on CPU).
            fused = _FUSED_ADAMW and all(p.device.type in ("cpu", "cuda") for p in others)
            self.parts.append(
                torch.optim.AdamW(
                    others,
                    lr=lr if adamw_lr is None else adamw_lr,
                    betas=betas,
                    weight_decay=weight_decay,
                    fused=fused or None,
                )
            )
        # torch.optim.Optimizer's own bookkeeping is not used: the parts hold the state.
        self.defaults = dict(lr=lr)

    @property
    def param_groups(self) -> list[dict[str, Any]]:  # type: ignore[override]
        return [g for part in self.parts for g in part.param_groups]

    @property
    def state(self):  # type: ignore[override]
        merged = {}
        for part in self.parts:
            merged.update(part.state)
        return merged

    def zero_grad(self, set_to_none: bool = True) -> None:
        for part in self.parts:
            part.zero_grad(set_to_none=set_to_none)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for part in self.parts:
            part.step()
        return loss

    def state_dict(self) -> dict[str, Any]:
        return {"parts": [part.state_dict() for part in self.parts]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        parts = state_dict.get("parts")
        if parts is None or len(parts) != len(self.parts):
            raise ValueError(
                f"MuonAdamW state_dict must hold {len(self.parts)} optimizer states under 'parts'; "
                f"got {None if parts is None else len(parts)}"
            )
        for part, sd in zip(self.parts, parts):
            part.load_state_dict(sd)

    def __repr__(self) -> str:
        return "MuonAdamW(" + ", ".join(type(p).__name__ for p in self.parts) + ")"

    def __getstate__(self):
        return self.__dict__

    def __setstate__(self, state):
        self.__dict__.update(state)


OPTAX_NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)
"""optax's (and Keller Jordan's) quintic Newton-Schulz coefficients."""


class OptaxMuon(torch.optim.Optimizer):
    """``optax.contrib.muon`` with its defaults, step for step, for parameters stored in
    flax's layout (the paper's optimizer; see :mod:`tpo_agents.policies.paper_transformer`).

    Which parameters get Muon is decided by rank alone, as optax does: every ``ndim == 2``
    array (kernels ``(fan_in, fan_out)``, embeddings, and 2-D biases too), AdamW for the
    rest (1-D biases, LayerNorms, and the 3-D attention kernels). Per step ``t``:

    * Muon: ``mu <- beta mu + (1 - beta) g``; bias-corrected Nesterov
      ``m = beta mu / (1 - beta^(t+1)) + (1 - beta) g / (1 - beta^t)``; ``m / (||m||_F + eps)``
      through 5 Newton-Schulz steps (on the transpose when rows > columns); scaled by
      ``sqrt(max(1, shape[1] / shape[0]))``; ``p <- p - lr (update + weight_decay p)``.
    * AdamW (``nesterov=True``): the same bias-corrected Nesterov first moment with
      ``betas[0]``, ``v / (1 - betas[1]^t)``, ``m / (sqrt(v) + eps)``,
      ``p <- p - lr (update + adam_weight_decay p)``.

    This differs from :class:`MuonAdamW` (torch's Muon) in the momentum (bias-corrected),
    the shape scaling (optax's ``fan_out / fan_in`` on axis 0 / 1 versus torch's rows /
    columns), the normalisation (``+ eps`` versus ``max(., eps)``), and AdamW's Nesterov.

    :param lr: learning rate of both parts (the artifact: 1e-3).
    :param beta: Muon momentum (0.95).
    :param eps: Newton-Schulz normalisation and AdamW epsilon (1e-8).
    :param betas: AdamW's ``(b1, b2)``.
    :param weight_decay: Muon's decoupled weight decay (0).
    :param adam_weight_decay: AdamW's weight decay (0).
    :param ns_steps: Newton-Schulz iterations (5).
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        lr: float = 1e-3,
        beta: float = 0.95,
        eps: float = 1e-8,
        betas: tuple[float, float] = (0.9, 0.999),
        weight_decay: float = 0.0,
        adam_weight_decay: float = 0.0,
        ns_steps: int = 5,
    ):
        params = [p for p in params if p.requires_grad]
        if not params:
            raise ValueError("OptaxMuon got no parameters that require gradients")
        for name, value, ok in (
            ("lr", lr, lr >= 0),
            ("beta", beta, 0 <= beta < 1),
            ("eps", eps, eps >= 0),
            ("betas", betas, len(betas) == 2 and all(0 <= b < 1 for b in betas)),
            ("ns_steps", ns_steps, int(ns_steps) == ns_steps and ns_steps >= 0),
        ):
            if not ok:
                raise ValueError(f"OptaxMuon: invalid {name} = {value!r}")
        groups = [
            dict(params=[p for p in params if p.ndim == 2], kind="muon", weight_decay=weight_decay),
            dict(params=[p for p in params if p.ndim != 2], kind="adam", weight_decay=adam_weight_decay),
        ]
        defaults = dict(lr=lr, beta=beta, eps=eps, betas=tuple(betas), ns_steps=int(ns_steps))
        super().__init__([g for g in groups if g["params"]], defaults)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            grads = [p.grad.float() for p in params]
            states = [self.state[p] for p in params]
            for p, st in zip(params, states):
                if not st:
                    st["mu"] = torch.zeros_like(p, dtype=torch.float32)
                    if group["kind"] == "adam":
                        st["nu"] = torch.zeros_like(p, dtype=torch.float32)
            # One count per group, as optax keeps one per transform: bias corrections stay
            # in step even for a parameter that missed a gradient once.
            group["step"] = t = group.get("step", 0) + 1
            b1 = group["beta"] if group["kind"] == "muon" else group["betas"][0]
            mus = [st["mu"] for st in states]
            torch._foreach_lerp_(mus, grads, 1 - b1)
            # optax's bias-corrected Nesterov momentum: b1 mu / (1 - b1^(t+1)) + (1 - b1) g / (1 - b1^t).
            m_hat = torch._foreach_mul(mus, b1 / (1 - b1 ** (t + 1)))
            torch._foreach_add_(m_hat, grads, alpha=(1 - b1) / (1 - b1**t))
            if group["kind"] == "muon":
                updates = _orthogonalize_all(
                    m_hat, OPTAX_NS_COEFFICIENTS, group["ns_steps"], group["eps"], add_eps=True
                )
                updates = [u * math.sqrt(max(1.0, p.shape[1] / p.shape[0])) for u, p in zip(updates, params)]
            else:
                b2 = group["betas"][1]
                nus = [st["nu"] for st in states]
                torch._foreach_mul_(nus, b2)
                torch._foreach_addcmul_(nus, grads, grads, value=1 - b2)
                denom = torch._foreach_div(nus, 1 - b2**t)
                torch._foreach_sqrt_(denom)
                torch._foreach_add_(denom, group["eps"])
                updates = torch._foreach_div(m_hat, denom)
            if group["weight_decay"]:
                torch._foreach_add_(updates, params, alpha=group["weight_decay"])
            torch._foreach_add_(params, [u.to(p.dtype) for u, p in zip(updates, params)], alpha=-group["lr"])
        return loss
