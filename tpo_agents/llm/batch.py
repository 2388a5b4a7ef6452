"""Sampled completions of a language-model policy, and micro-batched gradients.

:class:`Completions` is what :meth:`CausalLMPolicy.sample_completions` returns: token ids
and masks of prompts (left-padded) and completions (right-padded), plus the decoded texts.
Their group batch, :class:`~tpo_agents.rollout.batches.LMGroupBatch`, lives with the other
batches in :mod:`tpo_agents.rollout.batches`.

:func:`rowwise_with_recompute` runs a row-wise function in micro-batches with gradient
accumulation: the value comes from a no-grad pass, and the backward pass recomputes one
micro-batch at a time, so only one micro-batch's activations are alive at once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

__all__ = ["Completions", "pad_left", "pad_right", "rowwise_with_recompute"]


def pad_left(rows: Sequence[torch.Tensor], value: int) -> torch.Tensor:
    """Concatenate ``[b_i, L_i]`` tensors along rows, left-padding to the longest ``L``."""
    width = max(r.shape[1] for r in rows)
    return torch.cat([F.pad(r, (width - r.shape[1], 0), value=value) for r in rows])


def pad_right(rows: Sequence[torch.Tensor], value: int) -> torch.Tensor:
    """Concatenate ``[b_i, L_i]`` tensors along rows, right-padding to the longest ``L``."""
    width = max(r.shape[1] for r in rows)
    return torch.cat([F.pad(r, (0, width - r.shape[1]), value=value) for r in rows])


@dataclass
class Completions:
    """``N`` sampled completions (``n`` per prompt, rows ``b * n + k``) with their prompts.

    :param prompt_ids: ``[N, P]`` prompt tokens, left-padded (each prompt repeated ``n`` times).
    :param prompt_mask: ``[N, P]`` bool, True on prompt tokens.
    :param completion_ids: ``[N, T]`` completion tokens, right-padded.
    :param completion_mask: ``[N, T]`` bool, True through the first EOS.
    :param texts: the ``N`` decoded completions (special tokens dropped).
    """

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor
    texts: list[str]

    @classmethod
    def cat(cls, parts: Sequence[Completions], pad_id: int) -> Completions:
        """Join several sampling calls into one (re-padding prompts left, completions right)."""
        if len(parts) == 1:
            return parts[0]
        return cls(
            prompt_ids=pad_left([p.prompt_ids for p in parts], pad_id),
            prompt_mask=pad_left([p.prompt_mask for p in parts], 0).bool(),
            completion_ids=pad_right([p.completion_ids for p in parts], pad_id),
            completion_mask=pad_right([p.completion_mask for p in parts], 0).bool(),
            texts=[t for p in parts for t in p.texts],
        )


# ------------------------------------------------------------ micro-batched gradients


def _rng_devices() -> list[int]:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return list(range(torch.cuda.device_count()))
    return []


def _rng_state(devices: list[int]):
    cuda = [torch.cuda.get_rng_state(d) for d in devices]
    return torch.get_rng_state(), cuda


def _set_rng_state(state, devices: list[int]) -> None:
    cpu, cuda = state
    torch.set_rng_state(cpu)
    for d, s in zip(devices, cuda):
        torch.cuda.set_rng_state(s, d)


class _RowwiseRecompute(torch.autograd.Function):
    """Value from no-grad micro-batches; backward recomputes each one with grad and
    back-propagates its slice of the incoming gradient into the parameters."""

    @staticmethod
    def forward(ctx, anchor, fn, n_rows, chunk):  # noqa: ARG004 (anchor: makes backward run)
        ctx.fn = fn
        ctx.devices = _rng_devices()
        ctx.bounds = [(s, min(s + chunk, n_rows)) for s in range(0, n_rows, chunk)]
        ctx.states, outs = [], []
        for start, stop in ctx.bounds:
            ctx.states.append(_rng_state(ctx.devices))
            outs.append(fn(start, stop))
        return torch.cat(outs)

    @staticmethod
    def backward(ctx, grad):
        for (start, stop), state in zip(ctx.bounds, ctx.states):
            with torch.random.fork_rng(devices=ctx.devices):
                _set_rng_state(state, ctx.devices)  # same dropout masks as the forward pass
                with torch.enable_grad():
                    out = ctx.fn(start, stop)
            if out.requires_grad:
                torch.autograd.backward(out, grad[start:stop])
        return None, None, None, None


def rowwise_with_recompute(
    fn: Callable[[int, int], torch.Tensor], n_rows: int, chunk: int | None
) -> torch.Tensor:
    """``torch.cat([fn(s, e) for each chunk of rows])`` with memory for one chunk only.

    ``fn(start, stop)`` computes rows ``start:stop`` (rows must not interact). With
    ``chunk`` None or >= ``n_rows`` it is one plain call. Otherwise the result carries a
    gradient whose backward pass recomputes each chunk (one extra forward per chunk, as
    gradient checkpointing) and accumulates the parameter gradients chunk by chunk.
    """
    if chunk is None or chunk >= n_rows or not torch.is_grad_enabled():
        if chunk is None or chunk >= n_rows:
            return fn(0, n_rows)
        return torch.cat([fn(s, min(s + chunk, n_rows)) for s in range(0, n_rows, chunk)])
    anchor = torch.empty(0, requires_grad=True)
    return _RowwiseRecompute.apply(anchor, fn, n_rows, chunk)
