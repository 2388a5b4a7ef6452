"""Small pretrained language models, built offline: supervised fine-tuning to partial competence.

RL with a verifier reward (RLVR) needs a policy that already solves some prompts: a random
model never samples a correct answer, so every group has zero variance and no method learns.
No model hub is reachable, so this module makes the starting point itself:

1. a small Llama (:func:`zoo.paper.llm.tiny.build_tiny_causal_lm`: character tokenizer with a
   chat template, ~0.9 M parameters by default) is initialised from ``seed``;
2. it is trained by next-token cross-entropy on the reference answers of a prompt task's
   train split, the loss on the answer tokens only (the prompt formatted by the chat template
   exactly as :class:`~tpo_agents.policies.causal_lm.CausalLMPolicy` formats it, then
   ``answer + EOS``);
3. every ``eval_every`` steps its greedy accuracy on a validation slice of the train split
   (problems the fine-tuning never sees) is measured, and training **stops at the first check
   at or above** ``target_accuracy``: the model has partial competence, and RL must do the
   rest;
4. the model and tokenizer are saved with ``save_pretrained`` plus ``sft_report.json`` (the
   config, the validation curve, parameters, seconds).

:func:`pretrained_lm` caches the result under a content hash of the config, of
:data:`RECIPE_VERSION`, of ``tiny.py``'s source and of the torch and transformers versions
(``$TPO_CACHE_DIR`` or ``~/.cache/tpo/pretrained``), so
tests, benchmarks and examples build a model once; a file lock keeps parallel processes from
building the same model twice, and the folder appears atomically when complete.

The fine-tuning is a plain PyTorch loop rather than TRL's ``SFTTrainer``: on a 2-core CPU the
trainer's dataset preparation and logging cost more than the ~1 M-parameter model's steps,
and the loop is short enough to read in one sitting.

:data:`SPARSE_TASKS` names the train/test environments of the sparse-reward tasks (exact
match: one wrong character scores 0) that the LLM study uses.

``python -m zoo.pretrain_lm --task arithmetic [--out DIR] [--seed N] [--target-accuracy A]``
(:func:`main`) prints the model folder; see docs/llm.md.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tpo_agents.atomic import atomic_folder
from tpo_gym.extras import needs_extra

__all__ = [
    "RECIPE_VERSION",
    "SFTConfig",
    "DIALS",
    "SPARSE_TASKS",
    "SparseTask",
    "default_cache_dir",
    "pretrain_causal_lm",
    "model_task",
    "pretrained_lm",
    "sft_examples",
    "sparse_task",
]


RECIPE_VERSION = 1
"""Bump when a change here changes the weights :func:`pretrain_causal_lm` produces (the data,
the loop, the stopping rule): it is part of the cache key, so old models are rebuilt."""


@dataclasses.dataclass(frozen=True)
class SparseTask:
    """A sparse-reward prompt task: gym ids and kwargs of its train and held-out test envs."""

    env_id: str
    train_kwargs: dict[str, Any]
    test_kwargs: dict[str, Any]
    max_new_tokens: int = 8

    def make(self, split: str = "train"):
        """``gym.make`` of the ``"train"`` or ``"test"`` env."""
        import gymnasium as gym

        import tpo_gym  # noqa: F401  (registers the ids)

        if split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test', got {split!r}")
        return gym.make(self.env_id, **(self.train_kwargs if split == "train" else self.test_kwargs))


def _rg(task: str, config: dict[str, Any], size: int) -> SparseTask:
    common = dict(task=task, size=size, config=config, instruction="", answer_format="identity",
                  test_size=200, max_completion_length=32)
    return SparseTask("ReasoningGym-v0", {**common, "split": "train"}, {**common, "split": "test"})


SPARSE_TASKS: dict[str, SparseTask] = {
    # "37+48=" -> "85": two-digit addition, 500 held-out sums.
    "arithmetic": SparseTask(
        "Arithmetic-v0", {"digits": 2, "operations": "+"},
        {"digits": 2, "operations": "+", "split": "test"},
    ),
    # Reasoning Gym's chain_sum at two 2-digit terms: "... problem: 15 - 43 =" -> "-28".
    "chain_sum": _rg(
        "chain_sum", {"min_terms": 2, "max_terms": 2, "min_digits": 2, "max_digits": 2}, 5000
    ),
    # The difficulty dial (zoo.llm_difficulty): reverse a random string of 2..12 letters,
    # "rev abcde=" -> "edcba"; one model for every length, RL at one length per level.
    "reversal": SparseTask(
        "StringReversal-v0", {"length": (2, 12)}, {"length": (2, 12), "split": "test"},
        max_new_tokens=16,
    ),
    # Reasoning Gym's spell_backward on 3-5 letter words: "... backward ...: bird" -> "drib".
    "spell_backward": _rg("spell_backward", {"min_word_len": 3, "max_word_len": 5}, 3000),
}
"""The sparse-reward tasks of the LLM study, by name (answers are the whole completion)."""


def _reversal_level(length: int) -> SparseTask:
    return SparseTask(
        "StringReversal-v0", {"length": length}, {"length": length, "split": "test"},
        max_new_tokens=length + 4,
    )


DIALS: dict[str, Callable[[int], SparseTask]] = {"reversal": _reversal_level}
"""Tasks with a difficulty dial: ``name@level`` is one level (``reversal@7``: strings of 7
letters), RL-trained from the model pre-trained on the task ``name`` (every level mixed)."""


def sparse_task(name: str) -> SparseTask:
    """The task ``name`` of :data:`SPARSE_TASKS`, or one level ``base@level`` of a dial."""
    base, at, level = name.partition("@")
    if not at:
        if name not in SPARSE_TASKS:
            raise ValueError(f"task must be one of {sorted(SPARSE_TASKS)} or BASE@LEVEL with BASE "
                             f"in {sorted(DIALS)}, got {name!r}")
        return SPARSE_TASKS[name]
    if base not in DIALS or not level.isdigit() or int(level) < 1:
        raise ValueError(f"a dial level is BASE@LEVEL with BASE in {sorted(DIALS)} and LEVEL an "
                         f"int >= 1, got {name!r}")
    return DIALS[base](int(level))


def model_task(name: str) -> str:
    """The task whose pre-trained model RL on ``name`` starts from (``reversal@7`` -> ``reversal``)."""
    return name.partition("@")[0]


@dataclasses.dataclass(frozen=True)
class SFTConfig:
    """What :func:`pretrain_causal_lm` builds (every field enters the cache key).

    ``task`` names an entry of :data:`SPARSE_TASKS`; the model fields are those of
    :func:`~zoo.paper.llm.tiny.build_tiny_causal_lm`; training stops at the first
    validation check with greedy accuracy >= ``target_accuracy``, or after ``max_steps``.
    """

    task: str = "arithmetic"
    hidden_size: int = 128
    num_layers: int = 4
    num_heads: int = 4
    intermediate_size: int = 384
    learning_rate: float = 1e-3
    batch_size: int = 64
    max_steps: int = 3000
    eval_every: int = 25
    target_accuracy: float = 0.10
    val_size: int = 200
    seed: int = 0

    def __post_init__(self):
        if self.task not in SPARSE_TASKS:
            raise ValueError(f"task must be one of {sorted(SPARSE_TASKS)}, got {self.task!r}")
        for name in ("hidden_size", "num_layers", "num_heads", "intermediate_size", "batch_size",
                     "max_steps", "eval_every", "val_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        if not 0.0 <= self.target_accuracy <= 1.0:
            raise ValueError(f"target_accuracy must be in [0, 1], got {self.target_accuracy!r}")
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be > 0, got {self.learning_rate!r}")


def sft_examples(env, indices) -> list[tuple[str, str]]:
    """``(prompt, reference answer)`` of the env's problems ``indices`` (answers non-empty)."""
    base = env.unwrapped
    pairs = [(base.prompts[i], base.source.answer(i)) for i in indices]
    empty = [p for p, a in pairs if not a]
    if empty:
        raise ValueError(f"{len(empty)} problems have no reference answer, e.g. {empty[0]!r}")
    return pairs


def _format(tokenizer, prompt: str) -> str:
    # The same text CausalLMPolicy.format_prompts gives (no system prompt): the model must see
    # at SFT time exactly the prompts RL will show it.
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
    )


def _encode(tokenizer, pairs: list[tuple[str, str]]):
    """Per example: (token ids of prompt + answer + EOS, number of prompt tokens)."""
    out = []
    for prompt, answer in pairs:
        p = tokenizer(_format(tokenizer, prompt), add_special_tokens=False)["input_ids"]
        a = tokenizer(answer, add_special_tokens=False)["input_ids"]
        out.append((p + a + [tokenizer.eos_token_id], len(p)))
    return out


def _collate(examples, pad_id: int):
    import torch

    width = max(len(ids) for ids, _ in examples)
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    labels = torch.full((len(examples), width), -100, dtype=torch.long)
    mask = torch.zeros((len(examples), width), dtype=torch.long)
    for row, (seq, n_prompt) in enumerate(examples):
        # Right padding for training (positions start at 0 for every row); loss on the answer.
        ids[row, : len(seq)] = torch.tensor(seq)
        mask[row, : len(seq)] = 1
        labels[row, n_prompt : len(seq)] = torch.tensor(seq[n_prompt:])
    return ids, mask, labels


def pretrain_causal_lm(
    config: SFTConfig, out: str | Path, log: Callable[[str], None] | None = print
) -> dict[str, Any]:
    """Fine-tune a fresh small model on ``config.task`` to partial competence; save to ``out``.

    :return: the report written to ``out/sft_report.json``: ``config``, ``curve``
        (``[{"step", "loss", "val_accuracy"}]``), ``steps``, ``val_accuracy`` (at the stop),
        ``reached_target``, ``parameters``, ``seconds``.
    """
    import torch
    import transformers

    from tpo_agents.trl.prompts import greedy_accuracy
    from zoo.jobs.backends import single_torch_thread
    from zoo.paper.llm.tiny import build_tiny_causal_lm

    task = SPARSE_TASKS[config.task]
    env = task.make("train")
    n = len(env.unwrapped.prompts)
    if config.val_size >= n:
        raise ValueError(f"val_size must be less than the {n} train problems, got {config.val_size}")
    val = list(range(config.val_size))
    model, tokenizer = build_tiny_causal_lm(
        None,
        hidden_size=config.hidden_size,
        num_layers=config.num_layers,
        num_heads=config.num_heads,
        intermediate_size=config.intermediate_size,
        seed=config.seed,
    )
    train = _encode(tokenizer, sft_examples(env, range(config.val_size, n)))
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate, weight_decay=0.0)
    generator = torch.Generator().manual_seed(config.seed)
    curve: list[dict[str, float]] = []
    start = time.perf_counter()
    accuracy, step = 0.0, 0
    model.train()
    # One thread on every machine: float rounding, hence the weights, depends on the count.
    with torch.random.fork_rng(devices=[]), single_torch_thread():
        torch.manual_seed(config.seed)
        for step in range(1, config.max_steps + 1):
            rows = torch.randint(len(train), (config.batch_size,), generator=generator).tolist()
            ids, mask, labels = _collate([train[r] for r in rows], tokenizer.pad_token_id)
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if step % config.eval_every == 0 or step == config.max_steps:
                accuracy = greedy_accuracy(
                    model, tokenizer, env, indices=val, max_new_tokens=task.max_new_tokens
                )
                curve.append({"step": step, "loss": loss.item(), "val_accuracy": accuracy})
                if log is not None:
                    log(f"[sft {config.task}] step {step}: loss {loss.item():.3f}, "
                        f"validation accuracy {accuracy:.3f}")
                if accuracy >= config.target_accuracy:
                    break
    report = {
        "config": dataclasses.asdict(config),
        "task": dataclasses.asdict(task),
        "curve": curve,
        "steps": step,
        "val_accuracy": accuracy,
        "reached_target": accuracy >= config.target_accuracy,
        "parameters": sum(p.numel() for p in model.parameters()),
        "seconds": time.perf_counter() - start,
        "built_with": {"torch": torch.__version__, "transformers": transformers.__version__,
                       "torch_threads": 1},
    }
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / "sft_report.json").write_text(json.dumps(report, indent=1) + "\n")
    return report


def default_cache_dir() -> Path:
    """``$TPO_CACHE_DIR`` or ``~/.cache/tpo/pretrained``."""
    root = os.environ.get("TPO_CACHE_DIR")
    return Path(root) if root else Path.home() / ".cache" / "tpo" / "pretrained"


def config_hash(config: SFTConfig) -> str:
    """16 hex digits over the config, the task's envs, :data:`RECIPE_VERSION`, tiny.py's
    source, and the versions of torch and transformers (any of them changes the weights)."""
    import torch
    import transformers

    from zoo.paper.llm import tiny

    digest = hashlib.sha256()
    task = dataclasses.asdict(SPARSE_TASKS[config.task])
    digest.update(json.dumps([dataclasses.asdict(config), task, RECIPE_VERSION],
                             sort_keys=True).encode())
    digest.update(Path(tiny.__file__).read_bytes())
    digest.update(f"{torch.__version__} {transformers.__version__}".encode())
    return digest.hexdigest()[:16]


@contextlib.contextmanager
def _lock(path: Path):
    """Hold an exclusive ``flock`` on ``path``. The OS releases it when its holder dies, so a
    lock file left by a killed build never blocks; the holder removes the file on release."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        handle = open(path, "a")
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:  # the previous holder may have removed the file we waited on: lock the new one
            if os.fstat(handle.fileno()).st_ino == os.stat(path).st_ino:
                break
        except FileNotFoundError:
            pass
        handle.close()
    try:
        yield
    finally:
        path.unlink(missing_ok=True)  # before unlocking, so a waiter sees it is gone
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()


def _remove_leftovers(folder: Path, log: Callable[[str], None] | None) -> None:
    """Delete the temporary folders a killed build of ``folder`` left (``atomic_folder``'s
    ``.<name>.<pid>-<id>.tmp`` and ``.tmp.old``); call it holding the folder's lock."""
    leftovers = sorted(folder.parent.glob(f".{folder.name}.*.tmp*"))
    for path in leftovers:
        shutil.rmtree(path, ignore_errors=True)
    if leftovers and log is not None:
        log(f"removed {len(leftovers)} temporary folder(s) left by an interrupted build of {folder.name}")


@needs_extra("llm", "the small pretrained models (zoo.paper.llm.pretrain, python -m zoo.pretrain_lm)")
def pretrained_lm(
    task: str = "arithmetic",
    cache_dir: str | Path | None = None,
    log: Callable[[str], None] | None = print,
    **overrides: Any,
) -> Path:
    """The folder of the small pretrained model for ``task``, built on first use.

    ``overrides`` replace :class:`SFTConfig` fields (``seed=1``, ``target_accuracy=0.2``, ...).
    The folder (``<cache_dir>/<task>-<hash>``) loads with ``from_pretrained`` and as
    ``policy_kwargs={"model": str(path)}``; its ``sft_report.json`` tells how it was made.
    """
    config = SFTConfig(task=task, **overrides)
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    folder = root / f"{task}-{config_hash(config)}"
    if (folder / "sft_report.json").exists():
        return folder
    with _lock(root / f".{folder.name}.lock"):
        if (folder / "sft_report.json").exists():  # another process built it meanwhile
            return folder
        _remove_leftovers(folder, log)
        with atomic_folder(folder) as staging:
            pretrain_causal_lm(config, staging, log=log)
    return folder


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(prog="python -m zoo.pretrain_lm", description="Build (or find in the cache) the small pretrained model of a sparse prompt task.")
    parser.add_argument("--task", default="arithmetic", choices=sorted(SPARSE_TASKS))
    parser.add_argument("--seed", type=int, default=0, help="weight initialisation and data order")
    parser.add_argument("--target-accuracy", type=float, default=0.10,
                        help="stop at the first validation check at or above it")
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help="default: $TPO_CACHE_DIR or ~/.cache/tpo/pretrained")
    parser.add_argument("--out", type=Path, default=None,
                        help="also copy the model folder here (save_pretrained layout)")
    args = parser.parse_args(argv)
    path = pretrained_lm(args.task, cache_dir=args.cache_dir, seed=args.seed,
                         target_accuracy=args.target_accuracy)
    if args.out is not None:
        shutil.copytree(path, args.out, dirs_exist_ok=True)
        path = args.out
    report = json.loads((path / "sft_report.json").read_text())
    print(f"{path}  ({report['parameters']:,} parameters, {report['steps']} SFT steps, "
          f"validation accuracy {report['val_accuracy']:.3f})")
    return path


if __name__ == "__main__":
    main()
