"""Feed a ``tpo_gym`` prompt environment to TRL: a prompt dataset and a verifier reward.

TRL trainers read prompts from a ``datasets.Dataset`` and score completions with reward
functions; ``tpo_gym``'s prompt environments (``TinyArithmetic-v0``, ``GSM8K-v0``,
``ReasoningGym-v0``, ``PromptList-v0``) hold both the prompts and the verifier. These two
helpers connect them, so a TRL run and a ``tpo_agents`` run see the same prompts (the same
user message, the same optional system prompt) and the same scores.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tpo_gym.extras import needs_extra

__all__ = ["PromptEnvReward", "greedy_accuracy", "prompt_env_dataset"]


def _prompt_env(env: Any):
    from tpo_gym.prompts import PromptEnv

    base = getattr(env, "unwrapped", env)
    if not isinstance(base, PromptEnv):
        raise ValueError(
            f"expected a tpo_gym prompt environment (e.g. gym.make('TinyArithmetic-v0')); "
            f"got {type(base).__name__}"
        )
    return base


def prompt_env_dataset(env: Any, indices: Sequence[int] | None = None, chat: bool = True):
    """A ``datasets.Dataset`` of the env's prompts, one row per problem.

    Columns: ``prompt`` (chat messages ``[system?, user]`` when ``chat``, else the user text)
    and ``prompt_index`` (the problem's index, which :class:`PromptEnvReward` reads back).

    :param indices: which problems (default: all, in order).
    """
    with needs_extra("llm", "tpo_agents.trl.prompts.prompt_env_dataset"):
        from datasets import Dataset

    base = _prompt_env(env)
    prompts = base.prompts
    chosen = range(len(prompts)) if indices is None else [base.source.check_index(i) for i in indices]
    rows: dict[str, list] = {"prompt": [], "prompt_index": []}
    for i in chosen:
        if chat:
            system = [{"role": "system", "content": base.system_prompt}] if base.system_prompt else []
            rows["prompt"].append([*system, {"role": "user", "content": prompts[i]}])
        else:
            rows["prompt"].append(prompts[i])
        rows["prompt_index"].append(int(i))
    if not rows["prompt"]:
        raise ValueError("indices selects no prompt")
    return Dataset.from_dict(rows)


class PromptEnvReward:
    """A TRL reward function scoring completions with a prompt env's verifier.

    ``reward(completions, prompt_index, **kwargs) -> list[float]``: the score in ``[0, 1]``
    that ``env.step(completion)`` would give for problem ``prompt_index`` (the answer is
    extracted with the env's ``answer_format``). Completions may be text or chat messages
    (the last message's content is scored). Logged by TRL under ``rewards/<name>``.
    """

    def __init__(self, env: Any, name: str | None = None):
        self.env = _prompt_env(env)
        self.__name__ = name or self.env.source.name

    def __call__(self, completions: list, prompt_index: list[int], **kwargs: Any) -> list[float]:
        if len(completions) != len(prompt_index):
            raise ValueError(
                f"got {len(completions)} completions for {len(prompt_index)} prompt indices"
            )
        scores = []
        for completion, i in zip(completions, prompt_index):
            text = completion[-1]["content"] if isinstance(completion, list) else completion
            scores.append(float(self.env.source.score(int(i), text, self.env.answer_format)))
        return scores


def greedy_accuracy(
    model: Any,
    tokenizer: Any,
    env: Any,
    indices: Sequence[int] | None = None,
    max_new_tokens: int = 64,
    batch_size: int = 64,
    chat: bool = True,
) -> float:
    """Mean verifier score of greedy completions over the env's problems (default: all).

    Prompts are formatted as TRL formats them (the tokenizer's chat template with the
    generation prompt when ``chat`` and the tokenizer has one; else the raw text), padded on
    the left; completions stop at EOS or after ``max_new_tokens`` tokens.
    """
    import torch

    if max_new_tokens < 1 or batch_size < 1:
        raise ValueError(
            f"max_new_tokens and batch_size must be >= 1; got {max_new_tokens} and {batch_size}"
        )
    dataset = prompt_env_dataset(env, indices, chat=chat and tokenizer.chat_template is not None)
    reward = PromptEnvReward(env)
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    scores: list[float] = []
    try:
        for start in range(0, len(dataset), batch_size):
            rows = dataset[start : start + batch_size]
            if isinstance(rows["prompt"][0], list):
                enc = tokenizer.apply_chat_template(
                    rows["prompt"],
                    add_generation_prompt=True,
                    tokenize=True,
                    return_dict=True,
                    padding=True,
                    return_tensors="pt",
                )
            else:
                enc = tokenizer(rows["prompt"], padding=True, return_tensors="pt")
            enc = {k: v.to(device) for k, v in enc.items() if k in ("input_ids", "attention_mask")}
            with torch.no_grad():
                out = model.generate(
                    **enc,
                    do_sample=False,
                    max_new_tokens=max_new_tokens,
                    pad_token_id=tokenizer.pad_token_id,
                )
            texts = tokenizer.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
            scores.extend(reward(texts, rows["prompt_index"]))
    finally:
        tokenizer.padding_side = side
        model.train(was_training)
    return sum(scores) / len(scores)
