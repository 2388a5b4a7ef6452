"""Muon for 2-D weight matrices, AdamW for everything else: the paper's transformer optimizer."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch


def newton_schulz_orthogonalize(
    g: torch.Tensor, coefficients: tuple[float, float, float], steps: int, eps: float
) -> torch.Tensor:
    """Muon's quintic Newton-Schulz iteration (``~ U V^T`` of ``g = U S V^T``) in g's dtype."""
    a, b, c = coefficients
    x = g.T if g.shape[0] > g.shape[1] else g
    x = x / x.norm().clamp_min(eps)
    for _ in range(steps):
        gram = x @ x.T
        x = torch.addmm(x, torch.addmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    return x.T if g.shape[0] > g.shape[1] else x


class Float32Muon(torch.optim.Muon):
    """``torch.optim.Muon``, with the Newton-Schulz iteration run in float32 for CPU
    parameters (torch runs it in bfloat16, whose matmuls are several times slower than
    float32 on CPUs; on a GPU this defers to torch's own step). Same state layout."""

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
            lr, momentum = group["lr"], group["momentum"]
            for param, grad, buf in zip(params, grads, bufs):
                buf.lerp_(grad, 1 - momentum)
                update = grad.lerp(buf, momentum) if group["nesterov"] else buf
                update = newton_schulz_orthogonalize(
                    update.float(), group["ns_coefficients"], group["ns_steps"], group["eps"]
                )
                A, B = param.shape[:2]
                scale = {None: math.sqrt(max(1, A / B)), "original": math.sqrt(max(1, A / B))}.get(
                    group["adjust_lr_fn"], 0.2 * math.sqrt(max(A, B))
                )
                param.mul_(1 - lr * group["weight_decay"])
                param.add_(update.to(param.dtype), alpha=-lr * scale)
        return loss


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
            self.parts.append(
                torch.optim.AdamW(others, lr=lr if adamw_lr is None else adamw_lr, betas=betas, weight_decay=weight_decay)
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
