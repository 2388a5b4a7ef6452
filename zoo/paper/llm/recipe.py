"""The paper's LLM RLVR comparison, TPO vs GRPO, with TRL on one GPU (and at toy size on CPU).

Paper settings, the defaults here (docs/algorithms.md, section 8.5; the paper ran verl on 4 A100s):
K = 16 completions per prompt, 16 prompts per optimizer step, AdamW with learning rate 1e-5,
LoRA rank 32 (alpha 64, every linear layer but the output head), KL coefficient 1e-3 to the
reference model for both methods, bf16 weights on CUDA. Both methods run through TRL with
identical settings: GRPO is TRL's ``GRPOTrainer`` (its defaults otherwise: clipping 0.2,
``loss_type="dapo"``, group-scaled rewards), TPO is :class:`tpo_agents.trl.TPOTrainer`
(``eta = 1``). One optimizer step samples all 16 x 16 completions at once, then accumulates
gradients over micro-batches of ``--micro-prompts`` prompts (whole groups).

Generation: TRL's vLLM in colocate mode (``use_vllm=True, vllm_mode="colocate"``) when a CUDA
GPU is there and ``import vllm`` works, else ``transformers``' ``generate`` (``--vllm auto``, the
default; ``--vllm on`` / ``off`` forces it). Every step prints its training reward, seconds,
completions and generated tokens; each method ends with its throughput (generated tokens per
second, completions per second, seconds per step, leaving out the first, warm-up step) and its
greedy evaluation accuracy.

Tasks (prompts and verifiers from ``tpo_gym.prompts``; nothing is downloaded):

* ``gsm8k``: ``GSM8K-v0`` from a local file, parquet (as the Hub's ``openai/gsm8k`` ships it)
  or JSONL (``--train-file``; ``--eval-file`` for the test split), answers inside
  ``<answer></answer>`` tags or after ``####`` / as the last number;
* any Reasoning Gym name (``graph_color``, ``knights_knaves``, ...): ``ReasoningGym-v0``,
  ``--rg-size`` problems drawn with ``--seed``; the evaluation set uses another seed;
* ``tiny_arithmetic``: ``TinyArithmetic-v0`` (one-digit sums, for toy runs).

A GPU user reproducing the paper's GSM8K figure (``hf download openai/gsm8k --repo-type
dataset --local-dir data/gsm8k`` gives the parquet files)::

    python -m zoo.llm_recipe --model /models/Qwen3-1.7B --task gsm8k \\
        --train-file data/gsm8k/main/train-00000-of-00001.parquet \\
        --eval-file data/gsm8k/main/test-00000-of-00001.parquet \\
        --steps 100 --out results/llm-gsm8k-qwen3-1.7b

and graph colouring (300 steps, as in the paper)::

    python -m zoo.llm_recipe --model /models/Qwen3-1.7B --task graph_color --steps 300 \\
        --out results/llm-graph-color-qwen3-1.7b

Toy size on CPU (what the test runs; the tiny model comes from
:func:`zoo.paper.llm.tiny.build_tiny_causal_lm`)::

    python -m zoo.llm_recipe --model /tmp/tiny --task tiny_arithmetic --k 4 --prompts 2 \\
        --micro-prompts 1 --steps 2 --max-new-tokens 4 --lora-rank 4 --lr 1e-3 --eval-size 8 \\
        --cpu --out /tmp/toy-recipe

Outputs under ``--out``: ``<algo>/`` (TRL's output dir: the trained adapter or model),
``llm_recipe.json`` (config, per-step training reward and TPO diagnostics per method, per-step
and overall throughput, greedy evaluation accuracy) and ``llm_recipe.md`` (a summary table).
"""

from __future__ import annotations

import argparse
import json
import os
import time
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from tpo_gym.extras import needs_extra  # noqa: E402
from zoo.cli import positive_float, positive_int  # noqa: E402
from zoo.paper import numbers as paper_numbers  # noqa: E402

ALGOS = ("tpo", "grpo")
LOGGED = (
    "reward",
    "reward_std",
    "frac_reward_zero_std",
    "completions/mean_length",
    "kl",
    "entropy",
    "tpo/target_entropy",
    "tpo/kl_target_old",
    "tpo/zero_variance_frac",
    "step_time",
)


def make_envs(args):
    """(train env, eval env) for ``--task``."""
    import gymnasium as gym

    import tpo_gym  # noqa: F401

    if args.task == "gsm8k":
        if args.train_file is None:
            raise ValueError(
                "--task gsm8k needs --train-file <a local GSM8K .jsonl or .parquet file>"
            )
        train = gym.make("GSM8K-v0", path=args.train_file)
        evaluation = gym.make("GSM8K-v0", path=args.eval_file) if args.eval_file else train
    elif args.task == "tiny_arithmetic":
        train = evaluation = gym.make("TinyArithmetic-v0")
    else:
        train = gym.make("ReasoningGym-v0", task=args.task, size=args.rg_size, seed=args.seed)
        evaluation = gym.make(
            "ReasoningGym-v0", task=args.task, size=args.eval_size, seed=args.seed + 10_000
        )
    return train, evaluation


def trainer_config(algo: str, args, out_dir: Path):
    """TRL config with the recipe's settings; identical for both methods but the class."""
    import torch
    from trl import GRPOConfig

    from tpo_agents.trl import TPOConfig

    cuda = torch.cuda.is_available() and not args.cpu
    bf16 = cuda and args.dtype == "bfloat16"
    common = dict(
        output_dir=str(out_dir),
        num_generations=args.k,
        per_device_train_batch_size=args.micro_prompts * args.k,
        gradient_accumulation_steps=args.prompts // args.micro_prompts,
        max_completion_length=args.max_new_tokens,
        temperature=args.temperature,
        learning_rate=args.lr,
        optim="adamw_torch",
        lr_scheduler_type="constant",
        beta=args.beta,
        max_steps=args.steps,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=args.seed,
        bf16=bf16,
        use_cpu=not cuda,
        gradient_checkpointing=cuda and not args.no_gradient_checkpointing,
        model_init_kwargs={"dtype": "bfloat16" if bf16 else "float32"},
        chat_template_kwargs=({"enable_thinking": False} if args.no_thinking else None),
        use_vllm=args.use_vllm,
        vllm_mode="colocate",  # vLLM shares the training GPU: one GPU, no server to start
        vllm_gpu_memory_utilization=args.vllm_gpu_memory,
        disable_tqdm=True,
    )
    if algo == "tpo":
        return TPOConfig(tpo_eta=args.eta, **common)
    return GRPOConfig(**common)


def lora_config(args):
    """LoRA on every linear layer but the output head (``None`` for ``--lora-rank 0``)."""
    from zoo.paper.llm.trl_train import lora_config as make

    return make(args.lora_rank, args.lora_alpha)


def vllm_importable() -> tuple[bool, str | None]:
    """``(True, None)`` when ``import vllm`` works, else ``(False, the error)``."""
    try:
        import vllm  # noqa: F401
    except Exception as err:  # a broken install raises more than ImportError
        return False, f"{type(err).__name__}: {err}"
    return True, None


def generation_backend(mode: str, cuda: bool) -> tuple[bool, str]:
    """``(use vLLM, a description)`` for ``--vllm auto|on|off`` on this machine.

    ``auto`` takes vLLM when there is a CUDA GPU and ``import vllm`` works; ``on`` raises a
    ``ValueError`` saying what is missing instead of falling back.
    """
    if mode == "off":
        return False, "transformers generate (--vllm off)"
    if not cuda:
        if mode == "on":
            raise ValueError(
                "--vllm on needs a CUDA GPU (this run is on the CPU); use --vllm auto or off"
            )
        return False, "transformers generate (no CUDA GPU)"
    ok, error = vllm_importable()
    if ok:
        return True, "vLLM, colocate mode"
    if mode == "on":
        raise ValueError(
            f"--vllm on: import vllm failed ({error}); pip install vllm, or --vllm off"
        )
    return False, f"transformers generate (vllm not importable: {error})"


def run(algo: str, args, train_env, eval_env) -> dict:
    """Train one method; return its per-step logs and its greedy evaluation accuracy."""
    from transformers import AutoTokenizer, PrinterCallback
    from trl import GRPOTrainer

    from tpo_agents.trl import TPOTrainer
    from tpo_agents.trl.prompts import PromptEnvReward, greedy_accuracy, prompt_env_dataset
    from zoo.paper.llm.trl_train import ThroughputMeter

    trainer_cls = TPOTrainer if algo == "tpo" else GRPOTrainer
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    meter = ThroughputMeter(
        printer=lambda line: print(line, flush=True), label=f"[llm_recipe] {algo.upper()} "
    )
    trainer = trainer_cls(
        model=args.model,
        reward_funcs=meter.counting([PromptEnvReward(train_env)]),
        args=trainer_config(algo, args, args.out / algo),
        train_dataset=prompt_env_dataset(train_env),
        processing_class=tokenizer,
        peft_config=lora_config(args),
        callbacks=[meter],
    )
    # The meter prints one line per step; the full log dicts go to llm_recipe.json instead.
    trainer.remove_callback(PrinterCallback)
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        trainer.train()
    seconds = time.perf_counter() - start
    trainer.save_model(str(args.out / algo))
    history = [h for h in trainer.state.log_history if "reward" in h]
    logs = {key: [h.get(key) for h in history] for key in LOGGED}
    indices = list(range(min(args.eval_size, len(eval_env.unwrapped.prompts))))
    accuracy = None
    if indices:
        accuracy = greedy_accuracy(
            trainer.model,
            tokenizer,
            eval_env,
            indices,
            max_new_tokens=args.max_new_tokens,
            batch_size=args.eval_batch_size,
        )
    return {
        "train_seconds": seconds,
        "steps": [h["step"] for h in history],
        "logs": logs,
        "eval_accuracy": accuracy,
        "eval_size": len(indices),
        "throughput": meter.summary(),
        "step_log": meter.steps,
    }


def summary_markdown(result: dict) -> str:
    cfg = result["config"]
    lines = [
        f"# TPO vs GRPO on {cfg['task']} ({cfg['model']})",
        "",
        f"K = {cfg['k']}, {cfg['prompts']} prompts per step, lr {cfg['lr']}, LoRA rank "
        f"{cfg['lora_rank']}, beta {cfg['beta']}, {cfg['steps']} steps, device {cfg['device']}, "
        f"generation: {cfg['generation']}.",
        "",
        "| method | first step with batch reward >= 0.5 | final reward (last 10 steps) | "
        f"greedy eval accuracy ({cfg['eval_size']} prompts) | train seconds | generated tokens/s | "
        "completions/s | s/step |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for algo, res in result["methods"].items():
        rewards = res["logs"]["reward"]
        first = next((s for s, r in zip(res["steps"], rewards) if r is not None and r >= 0.5), None)
        last = [r for r in rewards[-10:] if r is not None]
        final = sum(last) / len(last) if last else float("nan")
        acc = "-" if res["eval_accuracy"] is None else f"{res['eval_accuracy']:.3f}"
        speed = res.get("throughput", {})
        rates = (
            ("-", "-", "-")
            if not speed.get("steps")
            else (
                f"{speed['generated_tokens_per_s']:.1f}",
                f"{speed['completions_per_s']:.2f}",
                f"{speed['seconds_per_step']:.2f}",
            )
        )
        lines.append(
            f"| {algo.upper()} | {first if first is not None else '-'} | {final:.3f} | {acc} | "
            f"{res['train_seconds']:.0f} | {' | '.join(rates)} |"
        )
    lines += [
        "",
        "Throughput leaves out the first (warm-up) step; generated tokens are the "
        "completions' tokens, as sampled.",
    ]
    return "\n".join(lines) + "\n"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True, help="local model folder (e.g. /models/Qwen3-1.7B)")
    p.add_argument(
        "--task", default="gsm8k", help="gsm8k, tiny_arithmetic or a Reasoning Gym task name"
    )
    p.add_argument("--train-file", help="GSM8K training file (JSONL or parquet)")
    p.add_argument("--eval-file", help="GSM8K evaluation file (default: the training file)")
    p.add_argument(
        "--rg-size", type=positive_int, default=2000, help="Reasoning Gym training problems"
    )
    p.add_argument("--eval-size", type=int, default=200, help="greedy-evaluation prompts (0: none)")
    p.add_argument("--eval-batch-size", type=positive_int, default=32)
    p.add_argument("--algos", nargs="+", choices=ALGOS, default=list(ALGOS))
    p.add_argument(
        "--k",
        type=positive_int,
        default=paper_numbers.LLM_RECIPE["k"],
        help="completions per prompt",
    )
    p.add_argument(
        "--prompts",
        type=positive_int,
        default=paper_numbers.LLM_RECIPE["prompts"],
        help="prompts per optimizer step",
    )
    p.add_argument(
        "--micro-prompts",
        type=positive_int,
        default=1,
        help="prompts per forward/backward micro-batch (divides --prompts)",
    )
    p.add_argument("--steps", type=positive_int, default=100)
    p.add_argument("--lr", type=positive_float, default=paper_numbers.LLM_RECIPE["lr"])
    p.add_argument(
        "--lora-rank",
        type=int,
        default=paper_numbers.LLM_RECIPE["lora_rank"],
        help="0: full fine-tuning",
    )
    p.add_argument(
        "--lora-alpha", type=positive_int, default=paper_numbers.LLM_RECIPE["lora_alpha"]
    )
    p.add_argument(
        "--beta",
        type=float,
        default=paper_numbers.LLM_RECIPE["beta"],
        help="KL coefficient to the reference",
    )
    p.add_argument("--eta", type=positive_float, default=1.0, help="TPO target temperature")
    p.add_argument(
        "--max-new-tokens", type=positive_int, default=paper_numbers.LLM_RECIPE["max_new_tokens"]
    )
    p.add_argument("--temperature", type=positive_float, default=1.0)
    p.add_argument(
        "--dtype", choices=("bfloat16", "float32"), default="bfloat16", help="weights on CUDA"
    )
    p.add_argument("--no-gradient-checkpointing", action="store_true")
    p.add_argument(
        "--no-thinking", action="store_true", help="Qwen3: chat template without thinking"
    )
    p.add_argument(
        "--vllm",
        choices=("auto", "on", "off"),
        default="auto",
        help="TRL's vLLM generation, colocate mode: auto = when a CUDA GPU and vllm are there",
    )
    p.add_argument(
        "--use-vllm", dest="vllm", action="store_const", const="on", help="same as --vllm on"
    )
    p.add_argument(
        "--vllm-gpu-memory",
        type=positive_float,
        default=0.3,
        help="fraction of the GPU's memory vLLM reserves (colocate mode)",
    )
    p.add_argument("--cpu", action="store_true", help="run on CPU even when CUDA is available")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("results/llm-recipe"))
    args = p.parse_args(argv)
    if args.k < 2:
        p.error(f"--k must be >= 2 (TPO and GRPO compare completions of one prompt); got {args.k}")
    if args.prompts % args.micro_prompts:
        p.error(f"--micro-prompts ({args.micro_prompts}) must divide --prompts ({args.prompts})")
    if args.lora_rank < 0 or args.beta < 0 or args.eval_size < 0:
        p.error("--lora-rank, --beta and --eval-size must be >= 0")
    if args.vllm_gpu_memory >= 1:
        p.error(
            f"--vllm-gpu-memory is a fraction of the GPU's memory, < 1; got {args.vllm_gpu_memory}"
        )
    import torch

    args.cuda = torch.cuda.is_available() and not args.cpu
    try:
        args.use_vllm, args.generation = generation_backend(args.vllm, args.cuda)
    except ValueError as err:
        p.error(str(err))
    if not Path(args.model).exists():
        from tpo_agents.llm.loading import GET_A_MODEL_FOLDER

        p.error(
            f"--model {args.model!r} does not exist: a local model folder is needed (nothing "
            f"is downloaded); {GET_A_MODEL_FOLDER}"
        )
    return args


@needs_extra("llm", "python -m zoo.llm_recipe")
def main(argv=None) -> dict:
    args = parse_args(argv)
    import torch

    from zoo.paper.llm.trl_train import throughput_line

    train_env, eval_env = make_envs(args)
    args.out.mkdir(parents=True, exist_ok=True)
    config = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    config["device"] = torch.cuda.get_device_name() if args.cuda else "cpu"
    result = {"config": config, "methods": {}}
    for algo in args.algos:
        print(
            f"[llm_recipe] training {algo.upper()} on {args.task} ({config['device']}, "
            f"generation: {args.generation}) ...",
            flush=True,
        )
        res = result["methods"][algo] = run(algo, args, train_env, eval_env)
        (args.out / "llm_recipe.json").write_text(json.dumps(result, indent=1) + "\n")
        accuracy = "-" if res["eval_accuracy"] is None else f"{res['eval_accuracy']:.3f}"
        print(
            f"[llm_recipe] {algo.upper()}: throughput {throughput_line(res['throughput'])}; "
            f"greedy eval accuracy {accuracy} on {res['eval_size']} prompts",
            flush=True,
        )
    (args.out / "llm_recipe.md").write_text(summary_markdown(result))
    print(summary_markdown(result))
    return result


if __name__ == "__main__":
    main()
