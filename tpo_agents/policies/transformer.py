"""The paper's decoder-only causal transformer, as a TPO policy and as an SB3 extractor.

Observations are token sequences of fixed length ``2H``: the prompt, the tokens emitted
so far, then padding (``pad_id``, by default the action count V, the first id past the
vocabulary). The next-token distribution is read at the last non-padding position.

Sampling runs with a key/value cache: the prompt is encoded once, its cache is shared by
the K candidates drawn for it, and each new token costs one single-position forward
pass. The log-probabilities of whole sequences come from one teacher-forced forward pass.

The attention, the caches and the decoder loop are shared with the paper substrate
(:mod:`~tpo_agents.policies.decoder`); this module holds our (torch-layout) blocks and the
policies, which build either substrate's network.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from gymnasium import spaces
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from stable_baselines3.common.type_aliases import PyTorchObs, Schedule
from torch import nn

from tpo_agents.policies.base import CategoricalPolicy
from tpo_agents.policies.decoder import Decoder, KVBuffer, attend, extend_cache, gather_rows
from tpo_agents.policies.paper_transformer import PaperCausalTransformer


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention that can append to a key/value cache."""

    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(
        self, x: torch.Tensor, cache: tuple[torch.Tensor, torch.Tensor] | None = None
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        B, T, D = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_heads, D // self.n_heads).permute(2, 0, 3, 1, 4)
        k, v = extend_cache(cache, k, v)
        out = attend(q, k, v)
        return self.proj(out.transpose(1, 2).reshape(B, T, D)), (k, v)


class Block(nn.Module):
    """Pre-LayerNorm transformer block: attention then a 4x GELU feed-forward."""

    def __init__(self, d_model: int, n_heads: int, ffn_mult: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads)
        self.ln2 = nn.LayerNorm(d_model)
        self.ffn = nn.Sequential(
            nn.Linear(d_model, ffn_mult * d_model), nn.GELU(), nn.Linear(ffn_mult * d_model, d_model)
        )

    def forward(self, x, cache=None):
        a, cache = self.attn(self.ln1(x), cache)
        x = x + a
        return x + self.ffn(self.ln2(x)), cache


INITS = ("torch", "haiku", "flax")
DEFAULT_INIT = "haiku"
"""The paper's Token Reversal numbers are reproduced with haiku's initialization scales
(see ``CausalTransformer``), so they are the default."""

# A standard normal truncated to +-2 has standard deviation 0.8796; jax's truncated-normal
# variance scaling divides by it so the truncated draw keeps the requested variance.
_TRUNCATED_STD = 0.87962566103423978


@torch.no_grad()
def _jax_library_init(module: nn.Module, library: str) -> None:
    """The default initialization of ``library`` ("haiku" or "flax") for one module (see
    ``CausalTransformer``); LayerNorms start at scale 1, offset 0 everywhere."""
    if isinstance(module, nn.Embedding):
        if library == "haiku":
            nn.init.trunc_normal_(module.weight, std=1.0, a=-2.0, b=2.0)
        else:
            nn.init.normal_(module.weight, std=module.embedding_dim**-0.5)
    elif isinstance(module, nn.Linear):
        # haiku truncates N(0, 1/fan_in) at two standard deviations; flax rescales the
        # truncated draw back to variance 1/fan_in.
        std = module.in_features**-0.5 / (_TRUNCATED_STD if library == "flax" else 1.0)
        nn.init.trunc_normal_(module.weight, std=std, a=-2 * std, b=2 * std)
        if module.bias is not None:
            module.bias.zero_()


class CausalTransformer(Decoder):
    """Decoder-only transformer: token + learned position embeddings, pre-LN blocks,
    final LayerNorm, linear head.

    :param n_tokens: input vocabulary (including padding).
    :param n_outputs: size of the output head (the action count).
    :param n_positions: longest sequence (learned positions).
    :param init: parameter initialization, the defaults of one library (:data:`INITS`):
        ``"torch"`` (embeddings N(0, 1); linear weights and biases U(+-1/sqrt(fan_in))),
        ``"haiku"`` (embeddings N(0, 1) and linear weights N(0, 1/fan_in), both truncated at
        two standard deviations; zero biases) or ``"flax"`` (embeddings N(0, 1/d_model);
        linear weights truncated normal rescaled to variance 1/fan_in; zero biases).
        Under Muon, whose steps have a fixed size, the initial scale sets how far each
        step moves the network: on Table 1 ``"haiku"`` (the default) takes off within 10%
        of the paper's JAX artifact, ``"torch"`` 1.1-1.4x later and ``"flax"`` about 1.3x
        earlier (``docs/results/README.md``).
    """

    def __init__(
        self,
        n_tokens: int,
        n_outputs: int,
        n_positions: int,
        d_model: int = 64,
        n_layers: int = 2,
        n_heads: int = 2,
        ffn_mult: int = 4,
        init: str = DEFAULT_INIT,
    ):
        super().__init__()
        if init not in INITS:
            raise ValueError(f"init must be one of {INITS}; got {init!r}")
        self.n_positions = n_positions
        self.tok_emb = nn.Embedding(n_tokens, d_model)
        self.pos_emb = nn.Embedding(n_positions, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_heads, ffn_mult) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, n_outputs)
        if init != "torch":
            self.apply(functools.partial(_jax_library_init, library=init))

    def embed(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return self.tok_emb(tokens) + self.pos_emb(positions)


def _layout(observation_space: spaces.Space, action_space: spaces.Space, pad_id: int | None):
    if not isinstance(action_space, spaces.Discrete):
        raise ValueError(f"TransformerPolicy needs a Discrete action space (tokens); got {action_space}")
    if not (isinstance(observation_space, spaces.Box | spaces.MultiDiscrete) and len(observation_space.shape) == 1):
        raise ValueError(
            "TransformerPolicy needs 1-D token observations (Box or MultiDiscrete of shape "
            f"[prompt + generated]); got {observation_space}"
        )
    n_actions = int(action_space.n)
    pad = n_actions if pad_id is None else int(pad_id)
    return n_actions, pad, int(observation_space.shape[0])


def _tokens_from_obs(obs: torch.Tensor, observation_space: spaces.Space, n_tokens: int) -> torch.Tensor:
    """Token ids ``[B, L]`` from raw or SB3-preprocessed (one-hot MultiDiscrete) observations."""
    L = observation_space.shape[0]
    if obs.dim() == 2 and obs.shape[1] == L:
        return obs.long()
    if isinstance(observation_space, spaces.MultiDiscrete) and obs.shape[-1] == int(observation_space.nvec.sum()):
        return obs.view(obs.shape[0], L, -1).argmax(-1)
    raise ValueError(f"cannot read token ids from observations of shape {tuple(obs.shape)}")


def _last_positions(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Index of the last non-padding token of each row (the position to predict from)."""
    return ((tokens != pad_id).sum(1) - 1).clamp_min(0)


SUBSTRATES = ("ours", "paper")
DEFAULT_SUBSTRATE = "ours"
"""What ``TransformerPolicy`` trains on unless told otherwise (see its docstring)."""


class TransformerPolicy(CategoricalPolicy):
    """Causal-transformer policy over a token vocabulary (the paper's Token Reversal policy).

    The architecture is the paper's: d_model 64, 2 layers, 2 heads, pre-LayerNorm blocks
    with a 4x GELU feed-forward, learned positions over the observation length (2H), final
    LayerNorm, linear head to V. ``substrate`` picks how its parameters are laid out,
    initialized and optimized, which decides how the paper's sparse-reward results come out
    (``docs/substrates.md``):

    * ``"ours"`` (default): torch layout (one fused QKV matrix and the output projection
      under Muon), haiku's initialization scales (``init``), torch's Muon + AdamW
      (:class:`tpo_agents.optim.MuonAdamW`). Every method learns fast and reliably on it,
      which is what a user training a policy wants.
    * ``"paper"``: the paper's JAX artifact exactly: flax's parameter layout and
      initialization, LayerNorm eps 1e-6, tanh GELU, and ``optax.contrib.muon``'s update
      rule on that layout (:class:`tpo_agents.policies.paper_transformer.PaperCausalTransformer`,
      :class:`tpo_agents.optim.OptaxMuon`). ``python -m zoo.reproduce`` uses it.

    :param d_model, n_layers, n_heads, ffn_mult: network sizes.
    :param substrate: ``"ours"`` or ``"paper"`` (see above).
    :param init: for ``substrate="ours"``: ``"haiku"`` (default), ``"torch"`` or ``"flax"``
        (see :class:`CausalTransformer`); the paper substrate has its own (flax's) and
        takes none.
    :param pad_id: padding id in observations (default: the action count V).
    :param optimizer_class: default: the substrate's (see above); any torch optimizer works.
    """

    autoregressive = True

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        lr_schedule: Schedule,
        d_model: int = 64,
        n_layers: int = 2,
        n_heads: int = 2,
        ffn_mult: int = 4,
        init: str | None = None,
        pad_id: int | None = None,
        optimizer_class: type[torch.optim.Optimizer] | None = None,
        optimizer_kwargs: dict[str, Any] | None = None,
        substrate: str = DEFAULT_SUBSTRATE,
    ):
        from tpo_agents.optim import MuonAdamW, OptaxMuon

        if substrate not in SUBSTRATES:
            raise ValueError(f"substrate must be one of {SUBSTRATES}; got {substrate!r}")
        if substrate == "paper" and init is not None:
            raise ValueError(
                f"substrate='paper' uses the artifact's own (flax's) initialization; got init={init!r} "
                "(init applies to substrate='ours')"
            )
        n_actions, pad, length = _layout(observation_space, action_space, pad_id)
        default_optimizer = OptaxMuon if substrate == "paper" else MuonAdamW
        super().__init__(
            observation_space,
            action_space,
            optimizer_class=default_optimizer if optimizer_class is None else optimizer_class,
            optimizer_kwargs=optimizer_kwargs,
            normalize_images=False,
        )
        sizes = dict(d_model=d_model, n_layers=n_layers, n_heads=n_heads, ffn_mult=ffn_mult)
        self.pad_id = pad
        self.n_tokens = max(n_actions, pad) + 1
        if substrate == "paper":
            self.arch = dict(sizes, substrate=substrate)
            self.net = PaperCausalTransformer(n_actions, length, pad, **sizes)
        else:
            self.arch = dict(sizes, init=init or DEFAULT_INIT, substrate=substrate)
            self.net = CausalTransformer(self.n_tokens, n_actions, length, **sizes, init=init or DEFAULT_INIT)
        self.optimizer = self.optimizer_class(self.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs)

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        data.update(
            lr_schedule=self._dummy_schedule,
            pad_id=self.pad_id,
            optimizer_class=self.optimizer_class,
            optimizer_kwargs=self.optimizer_kwargs,
            **self.arch,
        )
        return data

    # -- one step (SB3 predict, generic collectors) ---------------------------
    def action_logits(self, obs: PyTorchObs) -> torch.Tensor:
        tokens = _tokens_from_obs(obs, self.observation_space, self.n_tokens)
        logits, _ = self.net(tokens)
        last = _last_positions(tokens, self.pad_id)
        return logits[torch.arange(len(tokens), device=tokens.device), last]

    # -- whole sequences --------------------------------------------------------
    def token_log_probs(
        self,
        prompts: torch.Tensor,
        completions: torch.Tensor,
        n_samples: int = 1,
        prompt_index: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``log pi(. | prompt, completion[:t])`` for every completion position, ``[N, T, V]``.

        Teacher-forced: one pass over the prompts, one over the rows. Completion row ``r`` continues prompt
        ``prompt_index[r]``; by default row ``r`` continues prompt ``r // n_samples``
        (``n_samples`` rows per prompt, rows ``b * n + k``). Each prompt is encoded once
        and its keys/values are shared by its rows (with gradient through both).
        """
        G, H, T = *prompts.shape, completions.shape[1]
        if prompt_index is None and n_samples == 1:
            logits, _ = self.net(torch.cat([prompts, completions[:, :-1]], dim=1))
            return torch.log_softmax(logits[:, H - 1 : H - 1 + T], dim=-1)
        if prompt_index is None:
            if completions.shape[0] != G * n_samples:
                raise ValueError(
                    f"completions must have {n_samples} rows per prompt: expected "
                    f"{G * n_samples}, got {completions.shape[0]}"
                )
            prompt_index = n_samples
        elif prompt_index.shape != completions.shape[:1]:
            raise ValueError(
                f"prompt_index needs one entry per completion row ({completions.shape[0]}); "
                f"got shape {tuple(prompt_index.shape)}"
            )
        elif completions.shape[0] <= G:
            # No more rows than prompts: encoding the prompts apart saves nothing, so each
            # row goes through whole in one pass (the same values).
            return self.token_log_probs(prompts[prompt_index], completions)
        h_prompt, cache = self.net.hidden(prompts)
        first = gather_rows(self.net.head(h_prompt[:, -1]), prompt_index).unsqueeze(1)
        if T == 1:
            return torch.log_softmax(first, dim=-1)
        cache = [(gather_rows(k, prompt_index), gather_rows(v, prompt_index)) for k, v in cache]
        h_rest, _ = self.net.hidden(completions[:, :-1], cache)
        return torch.log_softmax(torch.cat([first, self.net.head(h_rest)], dim=1), dim=-1)

    @torch.no_grad()
    def start(self, prompts: torch.Tensor, n_samples: int = 1) -> tuple[torch.Tensor, KVBuffer]:
        """Encode the prompts once; return next-token log-probs and the cache, each
        repeated ``n_samples`` times per prompt (rows ``b * n_samples + k``). The cache is
        a :class:`KVBuffer` with room for the longest sequence the policy reads."""
        logits, cache = self.net(prompts)
        log_probs = torch.log_softmax(logits[:, -1], dim=-1)
        if n_samples > 1:
            log_probs = log_probs.repeat_interleave(n_samples, dim=0)
        return log_probs, KVBuffer(cache, self.net.n_positions, n_samples)

    @torch.no_grad()
    def advance(self, tokens: torch.Tensor, cache: KVBuffer) -> tuple[torch.Tensor, KVBuffer]:
        """Feed one token per row; return the next-token log-probs and the grown cache."""
        logits, cache = self.net(tokens.view(-1, 1), cache)
        return torch.log_softmax(logits[:, -1], dim=-1), cache

    @torch.no_grad()
    def generate(self, prompts: torch.Tensor, max_new_tokens: int, n_samples: int = 1) -> torch.Tensor:
        """Sample ``n_samples`` completions per prompt with the cache, ``[B * n, T]``."""
        log_probs, cache = self.start(prompts, n_samples)
        out = []
        for t in range(max_new_tokens):
            token = self.sample(log_probs).squeeze(-1)
            out.append(token)
            if t + 1 < max_new_tokens:
                log_probs, cache = self.advance(token, cache)
        return torch.stack(out, dim=1)


class TransformerExtractor(BaseFeaturesExtractor):
    """The same transformer as an SB3 features extractor (for ``PPO``'s actor-critic):
    the features are the final hidden state at the last non-padding position."""

    def __init__(
        self,
        observation_space: spaces.Space,
        n_actions: int,
        d_model: int = 64,
        n_layers: int = 2,
        n_heads: int = 2,
        ffn_mult: int = 4,
        pad_id: int | None = None,
        init: str = DEFAULT_INIT,
    ):
        super().__init__(observation_space, d_model)
        self.pad_id = n_actions if pad_id is None else int(pad_id)
        self.n_tokens = max(n_actions, self.pad_id) + 1
        self.net = CausalTransformer(
            self.n_tokens, n_actions, observation_space.shape[0], d_model, n_layers, n_heads, ffn_mult, init
        )

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        tokens = _tokens_from_obs(observations, self._observation_space, self.n_tokens)
        h, _ = self.net.hidden(tokens)
        return h[torch.arange(len(tokens), device=tokens.device), _last_positions(tokens, self.pad_id)]


class TransformerActorCriticPolicy(ActorCriticPolicy):
    """SB3 actor-critic on the causal transformer: ``PPO(TransformerActorCriticPolicy, env)``.

    Policy and value heads are linear maps of the shared transformer features.
    ``policy_kwargs`` may set ``transformer_kwargs`` (d_model, n_layers, n_heads, ...).
    """

    def __init__(self, observation_space, action_space, lr_schedule, transformer_kwargs=None, **kwargs):
        _layout(observation_space, action_space, None)
        kwargs.setdefault("net_arch", dict(pi=[], vf=[]))
        kwargs.setdefault("features_extractor_class", TransformerExtractor)
        kwargs.setdefault(
            "features_extractor_kwargs", dict(n_actions=int(action_space.n), **(transformer_kwargs or {}))
        )
        kwargs.setdefault("share_features_extractor", True)
        super().__init__(observation_space, action_space, lr_schedule, **kwargs)
