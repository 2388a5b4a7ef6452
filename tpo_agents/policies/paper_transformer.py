"""The paper's causal transformer in the paper's own parameter layout (the "paper" substrate).

The paper's JAX artifact builds its Token Reversal network from flax.linen modules, and its
optimizer (``optax.contrib.muon``) decides Muon or AdamW *by the rank of each array in that
layout*. To train the same network step for step, :class:`PaperCausalTransformer` stores every
parameter with flax's shape, axis order and initialization:

====================================  =============  ============================  =========
parameter                             shape          initialization                optimizer
====================================  =============  ============================  =========
token embedding                       (V, d)         N(0, 1/d)                     Muon
positional embedding                  (2H, d)        N(0, 0.02^2)                  Muon
attention query/key/value kernels     (d, h, d/h)    lecun normal (fan_in d)       AdamW
attention query/key/value biases      (h, d/h)       0                             Muon
attention output kernel               (h, d/h, d)    lecun normal (fan_in d)       AdamW
attention output bias, FFN/head bias  (n,)           0                             AdamW
FFN and head kernels                  (in, out)      lecun normal (fan_in in)      Muon
LayerNorm scale / offset (eps 1e-6)   (d,)           1 / 0                         AdamW
====================================  =============  ============================  =========

Lecun normal is flax's: a normal truncated at two standard deviations, rescaled to variance
1/fan_in. The feed-forward GELU is the tanh approximation (flax's default). The token table has
V rows, one per action, and no padding row: padding in observations only ever follows the
position read, so it is embedded as token 0 (what the artifact's zero-filled buffer holds);
causal attention never lets it reach an earlier position.

:class:`tpo_agents.optim.OptaxMuon` is the matching optimizer. Select both with
``TransformerPolicy(..., substrate="paper")``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from tpo_agents.policies.decoder import Decoder, attend, extend_cache

POSITION_INIT_STD = 0.02
"""Standard deviation of the artifact's positional-embedding initializer."""
LAYER_NORM_EPS = 1e-6
"""flax.linen.LayerNorm's default epsilon."""
# A standard normal truncated to +-2 has this standard deviation; flax's lecun normal divides
# by it so that the truncated draw keeps variance 1 / fan_in.
_TRUNCATED_STD = 0.87962566103423978


@torch.no_grad()
def lecun_normal_(weight: torch.Tensor, fan_in: int) -> torch.Tensor:
    """flax's ``lecun_normal()``: truncated normal (+-2 std) with variance ``1 / fan_in``."""
    std = fan_in**-0.5 / _TRUNCATED_STD
    return nn.init.trunc_normal_(weight, std=std, a=-2 * std, b=2 * std)


class Dense(nn.Module):
    """``y = x @ kernel + bias`` with the kernel stored ``(in, out)``, as flax's ``Dense``."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.kernel = nn.Parameter(lecun_normal_(torch.empty(in_features, out_features), in_features))
        self.bias = nn.Parameter(torch.zeros(out_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.kernel.t(), self.bias)


class SelfAttention(nn.Module):
    """flax's ``SelfAttention`` (``qkv_features = d``): per-projection kernels ``(d, h, d/h)``
    and biases ``(h, d/h)``, output kernel ``(h, d/h, d)``, causal, with a key/value cache.

    The three projections run as one matmul over their concatenated kernels (the parameters
    stay separate arrays, which is what the optimizer partition depends on)."""

    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        self.n_heads, dh = n_heads, d_model // n_heads
        for name in ("query", "key", "value"):
            kernel = lecun_normal_(torch.empty(d_model, n_heads, dh), d_model)
            self.register_parameter(f"{name}_kernel", nn.Parameter(kernel))
            self.register_parameter(f"{name}_bias", nn.Parameter(torch.zeros(n_heads, dh)))
        self.out_kernel = nn.Parameter(lecun_normal_(torch.empty(n_heads, dh, d_model), d_model))
        self.out_bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x: torch.Tensor, cache=None):
        B, T, D = x.shape
        kernel = torch.cat([self.query_kernel.view(D, D), self.key_kernel.view(D, D), self.value_kernel.view(D, D)], 1)
        bias = torch.cat([self.query_bias.view(D), self.key_bias.view(D), self.value_bias.view(D)])
        qkv = F.linear(x, kernel.t(), bias).view(B, T, 3, self.n_heads, D // self.n_heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        k, v = extend_cache(cache, k, v)
        out = attend(q, k, v).transpose(1, 2).reshape(B, T, D)
        return F.linear(out, self.out_kernel.view(D, D).t(), self.out_bias), (k, v)


class PaperBlock(nn.Module):
    """Pre-LayerNorm block: LayerNorm, attention, residual; LayerNorm, Dense, tanh-GELU,
    Dense, residual."""

    def __init__(self, d_model: int, n_heads: int, ffn_mult: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model, eps=LAYER_NORM_EPS)
        self.attn = SelfAttention(d_model, n_heads)
        self.ln2 = nn.LayerNorm(d_model, eps=LAYER_NORM_EPS)
        self.up = Dense(d_model, ffn_mult * d_model)
        self.down = Dense(ffn_mult * d_model, d_model)

    def forward(self, x, cache=None):
        a, cache = self.attn(self.ln1(x), cache)
        x = x + a
        return x + self.down(F.gelu(self.up(self.ln2(x)), approximate="tanh")), cache


class PaperCausalTransformer(Decoder):
    """The artifact's decoder, parameter for parameter (see the module docstring).

    :param n_actions: vocabulary V (token rows and head outputs).
    :param n_positions: longest sequence, ``2H`` (learned positions).
    :param pad_id: the observation padding id (>= V), embedded as token 0.
    """

    def __init__(
        self,
        n_actions: int,
        n_positions: int,
        pad_id: int,
        d_model: int = 64,
        n_layers: int = 2,
        n_heads: int = 2,
        ffn_mult: int = 4,
    ):
        super().__init__()
        if pad_id < n_actions:
            raise ValueError(f"pad_id must be >= the vocabulary size {n_actions}; got {pad_id}")
        self.n_positions, self.pad_id = n_positions, pad_id
        self.tok_emb = nn.Parameter(torch.randn(n_actions, d_model) / math.sqrt(d_model))
        self.pos_emb = nn.Parameter(torch.randn(n_positions, d_model) * POSITION_INIT_STD)
        self.blocks = nn.ModuleList(PaperBlock(d_model, n_heads, ffn_mult) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model, eps=LAYER_NORM_EPS)
        self.head = Dense(d_model, n_actions)

    def embed(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        tokens = tokens.masked_fill(tokens == self.pad_id, 0)
        return F.embedding(tokens, self.tok_emb) + self.pos_emb[positions]

    def flax_params(self, of=None) -> dict:
        """The parameters as the artifact's flax parameter tree, with its names and shapes
        (numpy arrays); ``of(param)`` picks another tensor per parameter, e.g. its ``.grad``."""
        of = of or (lambda p: p)
        t = lambda p: of(p).detach().cpu().numpy()  # noqa: E731
        tree: dict = {"Embed_0": {"embedding": t(self.tok_emb)}, "pos_emb": t(self.pos_emb)}
        for i, block in enumerate(self.blocks):
            a = block.attn
            tree[f"SelfAttention_{i}"] = {
                **{n: {"kernel": t(getattr(a, f"{n}_kernel")), "bias": t(getattr(a, f"{n}_bias"))}
                   for n in ("query", "key", "value")},
                "out": {"kernel": t(a.out_kernel), "bias": t(a.out_bias)},
            }
            for j, ln in enumerate((block.ln1, block.ln2)):
                tree[f"LayerNorm_{2 * i + j}"] = {"scale": t(ln.weight), "bias": t(ln.bias)}
            for j, dense in enumerate((block.up, block.down)):
                tree[f"Dense_{2 * i + j}"] = {"kernel": t(dense.kernel), "bias": t(dense.bias)}
        n = len(self.blocks)
        tree[f"LayerNorm_{2 * n}"] = {"scale": t(self.ln_f.weight), "bias": t(self.ln_f.bias)}
        tree[f"Dense_{2 * n}"] = {"kernel": t(self.head.kernel), "bias": t(self.head.bias)}
        return {"params": tree}
