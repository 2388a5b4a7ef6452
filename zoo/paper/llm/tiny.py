"""A tiny Llama-architecture causal LM and a character-level tokenizer, built offline.

Tests, examples and benchmarks need a real ``transformers`` model without the model hub.
:func:`build_tiny_causal_lm` makes one from scratch (random weights) and, given a folder,
saves it with ``save_pretrained`` so it loads back with ``from_pretrained`` exactly like a
downloaded checkpoint. The tokenizer maps every printable ASCII character to one token
(plus ``<pad>``, ``<s>``, ``</s>`` and ``<unk>``) and has a minimal chat template, so chat
formatting code paths are exercised too.

Llama rather than Qwen2: transformers 5 forces ``Qwen2Tokenizer`` on the qwen2
architecture, which would drop the spaces of this character-level tokenizer.
"""

from __future__ import annotations

import string
from pathlib import Path

from tpo_gym.extras import needs_extra

SPECIAL_TOKENS = ("<pad>", "<s>", "</s>", "<unk>")
CHARACTERS = string.printable  # digits, letters, punctuation, whitespace

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ message['role'] }}: {{ message['content'] }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)


@needs_extra("llm", "zoo.paper.llm.tiny.build_char_tokenizer")
def build_char_tokenizer(chat_template: bool = True):
    """A ``PreTrainedTokenizerFast`` with one token per printable ASCII character.

    Special tokens: ``<pad>`` (id 0), ``<s>`` (bos, 1), ``</s>`` (eos, 2), ``<unk>`` (3).
    Padding is on the left, as batched generation with decoder-only models needs.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for ch in CHARACTERS:
        vocab.setdefault(ch, len(vocab))
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        padding_side="left",
    )
    if chat_template:
        tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


@needs_extra("llm", "zoo.paper.llm.tiny.build_tiny_causal_lm")
def build_tiny_causal_lm(
    path: str | Path | None = None,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 2,
    intermediate_size: int = 128,
    max_position_embeddings: int = 256,
    seed: int = 0,
    chat_template: bool = True,
):
    """A randomly initialised ``LlamaForCausalLM`` and its character tokenizer.

    :param path: when given, both are saved there (``save_pretrained``) so that
        ``AutoModelForCausalLM.from_pretrained(path)`` and
        ``AutoTokenizer.from_pretrained(path)`` load them offline.
    :param seed: seeds the weight initialisation (same seed, same weights).
    :return: ``(model, tokenizer)``.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    if hidden_size % num_heads:
        raise ValueError(f"hidden_size ({hidden_size}) must be a multiple of num_heads ({num_heads})")
    tokenizer = build_char_tokenizer(chat_template)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
        max_position_embeddings=max_position_embeddings,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=False,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    if path is not None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(path)
        tokenizer.save_pretrained(path)
    return model, tokenizer
