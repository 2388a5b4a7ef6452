"""Log-probabilities of completions given prompts, for any ``transformers`` causal LM.

The one pure computation every LM trainer needs: a batch of left-padded prompts followed
by right-padded completions goes through the model in one forward pass, and the log-prob
of each completion token is read from the logits at the position before it. Padding never
changes a sequence's value: position ids come from the attention mask (as ``generate``
makes them), padded keys are masked, and padded completion positions count 0.

``temperature`` divides the (float32) logits before the softmax, as ``generate``'s
temperature warper does, so the log-probs are those of the distribution that sampled the
completion when ``top_p = 1`` and ``top_k = 0``. With top-p / top-k truncation they are the
log-probs of the temperature-scaled, *untruncated* distribution (TRL's convention).
"""

from __future__ import annotations

import inspect

import torch

__all__ = ["completion_log_probs", "completion_mask_after_eos", "position_ids_from_mask"]


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions ``0, 1, ...`` of the attended tokens of each row (padding gets 0 or the
    last position; it is masked anyway), as ``generate`` computes them."""
    return (attention_mask.long().cumsum(-1) - 1).clamp_min(0)


def completion_mask_after_eos(completion_ids: torch.Tensor, eos_token_ids) -> torch.Tensor:
    """``[N, T]`` bool mask of the completion tokens up to and including the first EOS.

    Tokens after a row's first EOS (``generate`` pads finished rows) are masked out; a
    row without EOS (cut at ``max_new_tokens``) keeps every token.
    """
    eos = torch.as_tensor(list(eos_token_ids), device=completion_ids.device)
    is_eos = torch.isin(completion_ids, eos)
    # Number of EOS strictly before each position: 0 means "still inside the completion".
    before = is_eos.long().cumsum(-1) - is_eos.long()
    return before == 0


def _supports_logits_to_keep(model) -> bool:
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    try:
        return "logits_to_keep" in inspect.signature(base.forward).parameters
    except (TypeError, ValueError):
        return False


def _selected_log_softmax(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """``log_softmax(logits)[..., target]`` without materialising the full log-softmax."""
    picked = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(logits, dim=-1)


def completion_log_probs(
    model,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    temperature: float = 1.0,
) -> torch.Tensor:
    """``[N, T]`` log-prob of every completion token (0 where ``completion_mask`` is 0).

    One forward pass of ``model`` over ``[prompt | completion]``; the sequence log-prob of
    a completion is the row sum. Gradients flow when called with grad enabled.

    :param model: a ``transformers`` causal LM (or a ``peft`` model around one).
    :param prompt_ids: ``[N, P]`` prompt tokens, left-padded.
    :param prompt_mask: ``[N, P]`` 1 for prompt tokens, 0 for padding.
    :param completion_ids: ``[N, T]`` completion tokens, right-padded.
    :param completion_mask: ``[N, T]`` 1 for completion tokens (through the first EOS).
    :param temperature: the sampling temperature (> 0); logits are divided by it.
    """
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0; got {temperature!r}")
    if prompt_ids.shape != prompt_mask.shape or completion_ids.shape != completion_mask.shape:
        raise ValueError(
            "ids and masks must have the same shapes; got prompt "
            f"{tuple(prompt_ids.shape)} vs {tuple(prompt_mask.shape)}, completion "
            f"{tuple(completion_ids.shape)} vs {tuple(completion_mask.shape)}"
        )
    if prompt_ids.shape[0] != completion_ids.shape[0]:
        raise ValueError(
            f"prompts and completions must have the same rows; got {prompt_ids.shape[0]} "
            f"and {completion_ids.shape[0]}"
        )
    if completion_ids.shape[1] == 0:
        raise ValueError(
            "completions must hold at least one token column; got shape "
            f"{tuple(completion_ids.shape)}"
        )
    if prompt_ids.shape[1] == 0 or not bool(prompt_mask.bool().any(-1).all()):
        raise ValueError("every row needs at least one prompt token (a BOS token or text)")
    prompt_mask, completion_mask = prompt_mask.bool(), completion_mask.bool()
    # Drop columns that are padding in every row (they change nothing, cost time).
    keep_from = int(prompt_mask.any(0).long().argmax())
    used = completion_mask.any(0)
    full_T = completion_ids.shape[1]
    T = int(used.nonzero().max()) + 1 if bool(used.any()) else 1
    prompt_ids, prompt_mask = prompt_ids[:, keep_from:], prompt_mask[:, keep_from:]
    completion_ids, completion_mask = completion_ids[:, :T], completion_mask[:, :T]

    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
    attention_mask = torch.cat([prompt_mask, completion_mask], dim=1).long()
    extra = {"logits_to_keep": T + 1} if _supports_logits_to_keep(model) else {}
    out = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids_from_mask(attention_mask),
        use_cache=False,
        **extra,
    )
    logits = out.logits[:, -(T + 1) : -1]
    if logits.dtype in (torch.float16, torch.bfloat16):
        rows = [
            _selected_log_softmax(row.float() / temperature, t)
            for row, t in zip(logits, completion_ids)
        ]
        token_logp = torch.stack(rows)
    else:
        token_logp = _selected_log_softmax(logits.float() / temperature, completion_ids)
    token_logp = token_logp.masked_fill(~completion_mask, 0.0)
    if T < full_T:  # give back the trimmed padding columns
        token_logp = torch.nn.functional.pad(token_logp, (0, full_T - T))
    return token_logp
