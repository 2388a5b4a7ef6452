"""Train ``TargetPOTrainer`` on fixed completions and save the parameters of every process.

``tests/test_trl_multiprocess.py`` launches it with ``accelerate launch`` (2 processes, CPU,
gloo) and ``tests/test_trl_tpo.py`` calls :func:`train` in-process. Sampling would differ
between process counts (TRL seeds each process differently), so :func:`fixed_rollout` (TRL's
``rollout_func``) makes each completion a function of its prompt, global row index and the
step only: runs with any process count or micro-batch size see the same data, and their parameters
must agree to float round-off.

    python tests/data/trl_tpo_run.py --model MODEL_DIR --out OUT_DIR --run NAME PER_DEVICE ACCUM
"""

from __future__ import annotations

import argparse
import os
import sys
import zlib
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is "experimental" in TRL

import torch  # noqa: E402

K = 4
MAX_COMPLETION = 6
EOS_ID, FIRST_CHAR_ID = 2, 4  # zoo.paper.llm.tiny: <pad> <s> </s> <unk>, then the characters


def fixed_rollout(prompts, trainer):
    """Completions drawn from a generator seeded by (prompt, step, global row): no sampling.

    Also returns made-up sampler log-probs (``logprobs``), for ``tpo_anchor_logps='sampler'``.
    """
    tokenizer = trainer.processing_class
    first = trainer.accelerator.process_index * len(prompts)  # TRL gathers rows in rank order
    vocab = len(tokenizer)
    prompt_ids, completion_ids, logprobs = [], [], []
    for i, prompt in enumerate(prompts):
        text = tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
        prompt_ids.append(tokenizer(text, add_special_tokens=False)["input_ids"])
        step, row, key = trainer.state.global_step, first + i, zlib.crc32(text.encode())
        # One length per group (a prompt): sequence log-probs of a random model then differ by
        # O(1), not by whole tokens, so p is spread and the TPO gradient p - q is large.
        n = 2 + (key + step) % (MAX_COMPLETION - 1)
        g = torch.Generator().manual_seed(key + 1_000 * step + row)
        ids = torch.randint(FIRST_CHAR_ID, vocab, (n,), generator=g).tolist()
        if n < MAX_COMPLETION:
            ids[-1] = EOS_ID
        completion_ids.append(ids)
        logprobs.append((-3 * torch.rand(len(ids), generator=g, dtype=torch.float64)).tolist())
    return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": logprobs}


def letter_reward(completions, **kwargs):
    """Number of lowercase letters: varied scores within most groups."""
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [float(sum(ch.islower() for ch in t)) for t in texts]


def train(
    model, out, per_device=K, accum=1, steps=1, iterations=1, lr=0.1, trainer_cls=None, **config
):
    """Train with plain SGD (the update is the gradient itself) and return the trainer.

    Each process saves ``out/params_rank{i}.pt``; ``config`` adds TargetPOConfig fields.
    """
    from datasets import Dataset

    from tpo_agents.trl import TargetPOConfig, TargetPOTrainer

    args = TargetPOConfig(
        output_dir=str(Path(out) / "trainer"),
        num_generations=K,
        per_device_train_batch_size=per_device,
        gradient_accumulation_steps=accum,
        num_iterations=iterations,
        max_steps=steps,
        max_completion_length=MAX_COMPLETION,
        learning_rate=lr,
        optim="sgd",
        lr_scheduler_type="constant",
        max_grad_norm=0.0,
        logging_steps=1,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        seed=0,
        disable_tqdm=True,
        bf16=False,
        gradient_checkpointing=False,
        ddp_find_unused_parameters=False,  # every parameter gets a gradient
        **config,
    )
    dataset = Dataset.from_dict(
        {"prompt": [[{"role": "user", "content": f"{i}+{i}="}] for i in range(16)]}
    )
    trainer = (trainer_cls or TargetPOTrainer)(
        model=model,
        reward_funcs=letter_reward,
        args=args,
        train_dataset=dataset,
        rollout_func=fixed_rollout,
    )
    trainer.train()
    params = {n: p.detach().cpu().clone() for n, p in trainer.model.named_parameters()}
    torch.save(params, Path(out) / f"params_rank{trainer.accelerator.process_index}.pt")
    return trainer


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument(
        "--run",
        nargs=3,
        action="append",
        metavar=("NAME", "PER_DEVICE", "ACCUM"),
        help="one training run, saved under OUT/NAME (repeatable)",
    )
    parser.add_argument("--steps", type=int, default=1)
    parser.add_argument("--iterations", type=int, default=1)
    a = parser.parse_args(argv)
    for name, per_device, accum in a.run or [("run", K, 1)]:
        out = Path(a.out) / name
        out.mkdir(parents=True, exist_ok=True)
        train(a.model, out, int(per_device), int(accum), a.steps, a.iterations)


if __name__ == "__main__":
    sys.exit(main())
