"""The decoder machinery both transformer substrates share: causal attention, key/value
caches and the decoder loop.

:class:`Decoder` runs the embeddings, the blocks (each ``block(x, cache) -> (x, (k, v))``)
and the final LayerNorm and head over a token sequence that may continue a cache: a list
of per-layer ``(k, v)`` tensors (:data:`KVCache`, with gradient) or a preallocated
:class:`KVBuffer` (sampling without gradient, written in place). Blocks call
:func:`extend_cache` and :func:`attend`. :class:`~tpo_agents.policies.transformer.CausalTransformer`
(torch layout) and :class:`~tpo_agents.policies.paper_transformer.PaperCausalTransformer`
(the paper's flax layout) are the two decoders built on it.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["Decoder", "KVBuffer", "KVCache", "attend", "extend_cache", "gather_rows"]

KVCache = list[tuple[torch.Tensor, torch.Tensor]]


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal attention of ``T`` new queries ``[B, h, T, dh]`` over ``S >= T`` keys and values
    whose last ``T`` positions are the queries' own (earlier ones come from a cache).

    Written out (scores, masked softmax, weighted sum) rather than through
    ``F.scaled_dot_product_attention``: for the short contexts of token tasks (S <= 2H) on a
    CPU, the explicit batched matmuls run about twice as fast forward and backward as the
    fused kernel, whose per-(row, head) blocking overhead dominates at these sizes.
    """
    T, S = q.shape[2], k.shape[2]
    future = None
    if T > 1:
        future = torch.ones(T, S, dtype=torch.bool, device=q.device).triu_(S - T + 1)
    weights = _ScaledMaskedSoftmax.apply(torch.matmul(q, k.transpose(-1, -2)), q.shape[-1] ** -0.5, future)
    return torch.matmul(weights, v)


class _ScaledMaskedSoftmax(torch.autograd.Function):
    """``softmax(scale * scores)`` over the last dim, with ``mask`` (True = excluded) set to
    ``-inf`` first: one autograd node with an explicit backward ``scale * p * (g - <g, p>)``.

    ``torch.softmax`` over a last dim this short (S <= 2H) is about 5x slower on CPUs than
    these few whole-tensor operations (its kernel vectorizes along the softmax dim)."""

    @staticmethod
    def forward(ctx, scores: torch.Tensor, scale: float, mask: torch.Tensor | None) -> torch.Tensor:
        p = scores * scale
        if mask is not None:
            p.masked_fill_(mask, float("-inf"))
        p.sub_(p.amax(-1, keepdim=True)).exp_()
        p.div_(p.sum(-1, keepdim=True))
        ctx.save_for_backward(p)
        ctx.scale = scale
        return p

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (p,) = ctx.saved_tensors
        g = grad * p
        g.sub_(p * g.sum(-1, keepdim=True)).mul_(ctx.scale)
        return g, None, None


class _GatherRows(torch.autograd.Function):
    """``x.index_select(0, index)`` whose backward makes the incoming gradient contiguous
    before the scatter-add (the gradient of a cached key arrives as a slice of the
    concatenated keys' gradient, and index_add on such a slice is several times slower)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(index)
        ctx.rows = x.shape[0]
        return x.index_select(0, index)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (index,) = ctx.saved_tensors
        out = grad.new_zeros((ctx.rows, *grad.shape[1:]))
        return out.index_add_(0, index, grad.contiguous()), None


def gather_rows(x: torch.Tensor, index: torch.Tensor | int) -> torch.Tensor:
    """``x[index]`` along dim 0; an int ``n`` means every row ``n`` times in a row."""
    if isinstance(index, int):
        index = torch.arange(x.shape[0], device=x.device).repeat_interleave(index)
    return _GatherRows.apply(x, index)


class KVBuffer:
    """Keys and values of every layer in preallocated ``[B, h, capacity, dh]`` tensors, for
    sampling without gradient: each new token is written in place and attention reads the
    filled prefix, instead of concatenating the whole cache at every step.

    :param cache: the prompts' keys/values per layer, ``[G, h, P, dh]``.
    :param capacity: the longest sequence the buffer will hold.
    :param repeats: rows per prompt (rows ``g * repeats + k`` start from prompt ``g``).
    """

    def __init__(self, cache: KVCache, capacity: int, repeats: int = 1):
        G, h, P, dh = cache[0][0].shape
        if P > capacity:
            raise ValueError(f"a cache of {P} positions does not fit a buffer of capacity {capacity}")
        self.length = P
        self.layers: list[tuple[torch.Tensor, torch.Tensor]] = []
        for k, v in cache:
            kb, vb = (t.new_empty(G * repeats, h, capacity, dh) for t in (k, v))
            kb.view(G, repeats, h, capacity, dh)[:, :, :, :P] = k.unsqueeze(1)
            vb.view(G, repeats, h, capacity, dh)[:, :, :, :P] = v.unsqueeze(1)
            self.layers.append((kb, vb))

    def __getitem__(self, layer: int) -> _BufferedLayer:
        return _BufferedLayer(self, layer)


class _BufferedLayer:
    """One layer's view of a :class:`KVBuffer`: appends new keys/values at its length."""

    def __init__(self, buffer: KVBuffer, layer: int):
        self.buffer, self.layer = buffer, layer

    def extend(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        kb, vb = self.buffer.layers[self.layer]
        start, end = self.buffer.length, self.buffer.length + k.shape[2]
        if end > kb.shape[2]:
            raise ValueError(f"sequence of {end} tokens exceeds the buffer capacity {kb.shape[2]}")
        kb[:, :, start:end] = k
        vb[:, :, start:end] = v
        return kb[:, :, :end], vb[:, :, :end]


def extend_cache(
    cache: tuple[torch.Tensor, torch.Tensor] | _BufferedLayer | None, k: torch.Tensor, v: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys and values ``[B, h, S, dh]`` of the cached positions followed by the new ``k, v``
    (a :class:`KVBuffer` layer is written in place; a tuple cache is concatenated)."""
    if isinstance(cache, _BufferedLayer):
        return cache.extend(k, v)
    if cache is not None:
        return torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
    return k, v


class Decoder(nn.Module):
    """What every decoder here shares: positions, cached self-attention blocks, a final
    LayerNorm and a head. Subclasses build ``blocks``, ``ln_f``, ``head``, set
    ``n_positions`` and define :meth:`embed`."""

    n_positions: int

    def embed(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def hidden(
        self, tokens: torch.Tensor, cache: KVCache | KVBuffer | None = None
    ) -> tuple[torch.Tensor, KVCache | KVBuffer]:
        """Final-LayerNorm hidden states ``[B, T, d]`` for ``tokens`` following ``cache``;
        returns them with the grown cache (a :class:`KVBuffer` grows in place)."""
        if cache is None:
            start = 0
        else:
            start = cache.length if isinstance(cache, KVBuffer) else cache[0][0].shape[2]
        T = tokens.shape[1]
        if start + T > self.n_positions:
            raise ValueError(f"sequence of {start + T} tokens exceeds n_positions = {self.n_positions}")
        x = self.embed(tokens, torch.arange(start, start + T, device=tokens.device))
        new_cache: KVCache = []
        for i, block in enumerate(self.blocks):
            x, kv = block(x, None if cache is None else cache[i])
            new_cache.append(kv)
        if isinstance(cache, KVBuffer):
            cache.length += T
            return self.ln_f(x), cache
        return self.ln_f(x), new_cache

    def forward(
        self, tokens: torch.Tensor, cache: KVCache | KVBuffer | None = None
    ) -> tuple[torch.Tensor, KVCache | KVBuffer]:
        h, cache = self.hidden(tokens, cache)
        return self.head(h), cache
