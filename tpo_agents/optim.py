"""Muon for 2-D weight matrices, AdamW for everything else: the paper's transformer optimizer."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch

# torch.optim.AdamW(fused=True) runs on CPU tensors from torch 2.4.
_FUSED_ADAMW = tuple(int(v) for v in torch.__version__.split(".")[:2]) >= (2, 4)


def newton_schulz_orthogonalize(
    g: torch.Tensor, coefficients: tuple[float, float, float], steps: int, eps: float
) -> torch.Tensor:
    """Muon's quintic Newton-Schulz iteration (``~ U V^T`` of ``g = U S V^T``) in g's dtype.

    ``g`` is one matrix ``[m, n]`` or a stack of same-shape matrices ``[b, m, n]``, each
    orthogonalized on its own (a stack runs as batched matmuls: fewer, larger calls)."""
    if g.ndim == 2:
        return newton_schulz_orthogonalize(g.unsqueeze(0), coefficients, steps, eps)[0]
    a, b, c = coefficients
    tall = g.shape[-2] > g.shape[-1]
    x = g.mT if tall else g
    x = x / torch.linalg.vector_norm(x, dim=(-2, -1), keepdim=True).clamp_min(eps)
    for _ in range(steps):
        gram = x @ x.mT
        x = torch.baddbmm(x, torch.baddbmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    return x.mT if tall else x


def _orthogonalize_all(
    updates: list[torch.Tensor], coefficients: tuple[float, float, float], steps: int, eps: float
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
        ortho = newton_schulz_orthogonalize(stack, coefficients, steps, eps)
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
