"""Shared-prompt sampling for Hugging Face causal LMs: K completions per prompt, one prefill.

``model.generate(..., num_return_sequences=K)`` repeats every prompt K times *before* the
prefill, so each prompt's key/value cache is computed K times. :func:`generate_shared_prefix`
computes it once per prompt and copies it K-fold, then lets ``generate`` decode:

1. prefill the left-padded prompts **minus their last column** (``[B, P - 1]``), with the
   position ids ``generate`` would give them (from the attention mask);
2. repeat the cache K times along the batch (``Cache.batch_repeat_interleave``), rows
   ``b * K + k``, the order in which ``generate`` expands its inputs;
3. call ``generate`` on the K-fold repeated full prompts with that cache: it sees ``P - 1``
   cached tokens, feeds the last prompt column of every row (``generate`` needs at least one
   uncached input token to produce the first logits), then decodes as usual.

Everything after the prefill is ``generate`` itself (logits processors, stopping criteria,
EOS handling, padding of finished rows, ``torch.multinomial`` on the same ``[B * K, V]``
probabilities), so the samples follow the same distribution as the plain call and, with the
same seed, are the same tokens up to floating-point rounding of the cached prefix (greedy
decoding gives the same tokens). Only the prefill is cheaper: ``B * (P - 1)`` tokens instead
of ``B * K * P``; decoding still attends over K copies of each prompt's cache.

Where a pre-filled cache would change what ``generate`` does (beam search, static caches,
...), the call is the plain one; one-token prompts (nothing to pre-fill) are repeated K times
and decoded without a cache passed in (see :func:`shares_prefix`).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

__all__ = ["generate_shared_prefix", "shares_prefix"]

# ``generate`` arguments that take another decoding path than the plain sampling / greedy
# loop (assisted decoding keeps its own caches; embeddings replace the prompt ids).
_UNSHARED_KWARGS = (
    "assistant_model",
    "prompt_lookup_num_tokens",
    "inputs_embeds",
    "custom_generate",
)


def _base(model):
    """The ``transformers`` model under a ``peft`` wrapper (the model itself otherwise)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def _forward_parameters(model) -> set[str]:
    try:
        return set(inspect.signature(_base(model).forward).parameters)
    except (TypeError, ValueError):
        return set()


def _setting(model, kwargs: dict[str, Any], name: str, default: Any) -> Any:
    """A generation setting as ``generate`` would resolve it: kwarg, then the passed
    ``generation_config``, then the model's."""
    if name in kwargs:
        return kwargs[name]
    config = kwargs.get("generation_config") or getattr(_base(model), "generation_config", None)
    value = getattr(config, name, None)
    return default if value is None else value


def _cache_reusable(model, kwargs: dict[str, Any]) -> bool:
    """Whether ``generate`` decodes from a pre-filled, pre-expanded cache exactly as it
    decodes from its own (see :func:`shares_prefix`)."""
    base = _base(model)
    config = getattr(base, "config", None)
    peft_config = getattr(model, "active_peft_config", None)
    supports_dynamic = getattr(base, "_supports_default_dynamic_cache", lambda: True)
    return not (
        getattr(config, "is_encoder_decoder", False)
        or getattr(peft_config, "is_prompt_learning", False)
        or not supports_dynamic()
        or int(_setting(model, kwargs, "num_beams", 1)) > 1
        or not _setting(model, kwargs, "use_cache", True)
        or _setting(model, kwargs, "cache_implementation", None) is not None
        or any(kwargs.get(k) is not None for k in ("cache", "past_key_values", *_UNSHARED_KWARGS))
        # generate would expand per-prompt tensors (token_type_ids, ...) itself: keep its path
        or any(isinstance(v, torch.Tensor) for v in kwargs.values())
    )


def shares_prefix(model, prompt_length: int, num_return_sequences: int, **generate_kwargs) -> bool:
    """Whether :func:`generate_shared_prefix` pre-fills a shared cache for this call.

    Not when there is nothing to share (one sequence per prompt, one-token prompts), nor
    when a pre-filled cache is unsupported or would change the decoding: beam search,
    assisted decoding, ``use_cache=False``, a ``cache_implementation`` (static, quantized,
    ...), a cache passed in, tensor arguments besides the prompts, encoder-decoder models,
    models without a ``DynamicCache`` (``generate``'s own test) and ``peft`` prompt-learning
    adapters (prefix tuning and the like inject their own cache).
    """
    return (
        num_return_sequences >= 2 and prompt_length >= 2 and _cache_reusable(model, generate_kwargs)
    )


def _generate_expanded(model, input_ids, attention_mask, n: int, kwargs: dict[str, Any]):
    """``generate`` on prompts repeated ``n`` times, as its own input expansion does (rows
    ``b * n + k``); unlike ``num_return_sequences=n`` this also allows greedy decoding."""
    return model.generate(
        input_ids=input_ids.repeat_interleave(n, dim=0),
        attention_mask=attention_mask.repeat_interleave(n, dim=0),
        num_return_sequences=1,  # already expanded (overrides a generation_config's value)
        **kwargs,
    )


def _new_cache(model):
    """An empty ``DynamicCache`` as ``generate`` makes it (built from the config, so that
    sliding-window / hybrid layers get their own layer types; older versions take none)."""
    from transformers import DynamicCache

    config = _base(model).config
    try:
        return DynamicCache(config=config.get_text_config(decoder=True))
    except TypeError:  # older transformers: no config argument
        return DynamicCache()


@torch.no_grad()
def generate_shared_prefix(
    model,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    num_return_sequences: int = 1,
    **generate_kwargs: Any,
):
    """``model.generate(input_ids, attention_mask=..., num_return_sequences=K, **kwargs)``
    with each prompt pre-filled once and its cache shared by its K sequences.

    :param model: a ``transformers`` causal LM (or a ``peft`` model around one).
    :param input_ids: ``[B, P]`` left-padded prompt tokens.
    :param attention_mask: ``[B, P]`` 1 on prompt tokens, 0 on padding (None: no padding).
    :param num_return_sequences: K sequences per prompt, rows ``b * K + k``.
    :param generate_kwargs: any other ``generate`` argument (``do_sample``, ``temperature``,
        ``max_new_tokens``, ``generation_config``, ...).
    :return: what ``generate`` returns: ``[B * K, P + T]`` token ids (prompt then
        completion), or its output object with ``return_dict_in_generate=True``.

    With ``do_sample=False`` the K rows of a prompt are K copies of its greedy completion
    (the plain call refuses greedy decoding with ``num_return_sequences > 1``).
    """
    n = int(num_return_sequences)
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    if n < 2 or not _cache_reusable(model, generate_kwargs):
        return model.generate(
            input_ids=input_ids,
            attention_mask=attention_mask,
            num_return_sequences=n,
            **generate_kwargs,
        )
    if input_ids.shape[1] < 2:  # one-token prompts: no prefix to share
        return _generate_expanded(model, input_ids, attention_mask, n, generate_kwargs)
    params = _forward_parameters(model)
    cache_name = "cache" if "cache" in params else "past_key_values"  # transformers >= 5.x: cache
    prefix_ids, prefix_mask = input_ids[:, :-1], attention_mask[:, :-1]
    cache = _new_cache(model)
    extra: dict[str, Any] = {}
    if "position_ids" in params:
        # generate's own rule: positions count attended tokens; padding gets 0 (masked).
        extra["position_ids"] = (prefix_mask.long().cumsum(-1) - 1).masked_fill(prefix_mask == 0, 0)
    if "logits_to_keep" in params:
        extra["logits_to_keep"] = 1  # the prefill's logits are not used: skip the [B, P, V] head
    model(
        input_ids=prefix_ids,
        attention_mask=prefix_mask,
        use_cache=True,
        **{cache_name: cache},
        **extra,
    )
    if cache.get_seq_length() != prefix_ids.shape[1]:
        # The model did not fill the cache (e.g. use_cache forced off in training mode with
        # gradient checkpointing): decode without it rather than from a partial cache.
        return _generate_expanded(model, input_ids, attention_mask, n, generate_kwargs)
    cache.batch_repeat_interleave(n)  # rows b * n + k, as generate's input expansion
    return _generate_expanded(
        model, input_ids, attention_mask, n, {cache_name: cache, **generate_kwargs}
    )
