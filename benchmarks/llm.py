"""LLM benchmark on a tiny offline model: seconds per training step and reward after N steps.

What is compared (one training step = sample K completions for each of B prompts, score them,
one gradient update; same model, prompts, K, sequence lengths, learning rate, Adam, gradient
clipping at norm 1 and a constant learning rate everywhere):

* ``tpo`` / ``grpo``: our ``TPO`` / ``GRPO`` agents on ``CausalLMPolicy`` (``n_epochs=1``);
* ``trl_grpo``: TRL's ``GRPOTrainer`` (its defaults: ``loss_type="dapo"``, ``beta=0``), in
  float32 without gradient checkpointing like our agents (TRL's own defaults, bf16 autocast and
  gradient checkpointing, are for GPUs: on this CPU they make a step about 5x slower);
* ``trl_tpo``: our ``tpo_agents.trl.TPOTrainer`` (the same trainer with TPO's loss).

The model is :func:`zoo.paper.llm.tiny.build_tiny_causal_lm` (random 2-layer Llama,
character tokenizer, chat template), saved to a folder and loaded from it by every
implementation; the task is ``TinyArithmetic-v0`` (``"3+4="``: reward 1 iff the first
character of the completion is the answer digit), by default its first 10 sums
(``--task-size 10 --operations +``, the task of ``CausalLMPolicy``'s learning test); prompts
are drawn uniformly (with replacement by our agents, by shuffled passes in TRL).

How it is measured

* **step time**: seed 0, ``--warmup`` steps discarded, then the median wall time of
  ``--timing-steps`` steps (generation + scoring + forward/backward + optimizer step) over
  ``--rounds`` runs per implementation (the order reversed every other round), with
  ``--threads`` torch threads; reported with the ratio to TRL's GRPO step;
* **reward after N steps**: ``--reward-steps`` steps per seed (the model's initial weights
  are drawn with the same seed), reporting the mean training reward over the last
  ``--window`` steps and the greedy accuracy over all prompts after training (mean and
  standard deviation over ``--seeds``).

Usage (from the repository root)::

    python -m benchmarks.llm                                   # defaults below, all rows
    python -m benchmarks.llm --impls trl_grpo trl_tpo --reward-steps 20 --seeds 0
    python -m benchmarks.llm --skip-reward --timing-steps 3

It writes ``--out`` (JSON with the config, per-step times and per-seed rewards) and a
markdown table next to it (same name, ``.md``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import gymnasium as gym  # noqa: E402
import torch  # noqa: E402

import tpo_gym  # noqa: E402, F401
from zoo.cli import positive_int  # noqa: E402

IMPLS = ("tpo", "grpo", "trl_grpo", "trl_tpo")
LABELS = {
    "tpo": "our TPO (CausalLMPolicy)",
    "grpo": "our GRPO (CausalLMPolicy)",
    "trl_grpo": "TRL GRPOTrainer",
    "trl_tpo": "our TRL TPOTrainer",
}


@dataclass
class Setup:
    """The shared work of one training step."""

    task: str = "TinyArithmetic-v0"
    task_size: int | None = 10
    operations: str = "+"
    prompts: int = 16
    k: int = 8
    max_new_tokens: int = 8
    learning_rate: float = 3e-3
    temperature: float = 1.0
    max_grad_norm: float = 1.0


# ----------------------------------------------------------------------------- model


def make_env(setup: Setup):
    """The task env: ``TinyArithmetic-v0`` with ``task_size`` problems of ``operations``."""
    return gym.make(setup.task, size=setup.task_size, operations=setup.operations)


def build_model(directory: Path, seed: int) -> str:
    """Save the tiny model with weights drawn from ``seed``; return its folder."""
    from zoo.paper.llm.tiny import build_tiny_causal_lm

    path = directory / f"tiny-seed{seed}"
    if not (path / "config.json").exists():
        build_tiny_causal_lm(path, seed=seed)
    return str(path)


def _dataset_indices(env, setup: Setup) -> list[int]:
    """Every problem, repeated so that a TRL epoch holds several batches of ``prompts``
    (TRL drops incomplete batches; our agents draw problems with replacement)."""
    n = len(env.unwrapped.prompts)
    return list(range(n)) * max(1, math.ceil(4 * setup.prompts / n))


def evaluate(model, tokenizer, env, setup: Setup) -> float:
    from tpo_agents.trl.prompts import greedy_accuracy

    return greedy_accuracy(model, tokenizer, env, max_new_tokens=setup.max_new_tokens)


# ------------------------------------------------------------------------------- TRL


def run_trl(algo: str, setup: Setup, model_path: str, steps: int, seed: int, workdir: Path,
            evaluate_after: bool) -> dict:
    """Train with TRL's GRPOTrainer (``algo="grpo"``) or our TPOTrainer (``"tpo"``)."""
    from transformers import AutoTokenizer, PrinterCallback, TrainerCallback
    from transformers.utils import logging as hf_logging
    from trl import GRPOConfig, GRPOTrainer

    from tpo_agents.trl import TPOConfig, TPOTrainer
    from tpo_agents.trl.prompts import PromptEnvReward, prompt_env_dataset

    hf_logging.set_verbosity_error()

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.seconds: list[float] = []
            self._start = 0.0

        def on_step_begin(self, args, state, control, **kwargs):
            self._start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.seconds.append(time.perf_counter() - self._start)

    env = make_env(setup)
    config_cls, trainer_cls = (TPOConfig, TPOTrainer) if algo == "tpo" else (GRPOConfig, GRPOTrainer)
    args = config_cls(
        output_dir=str(workdir / f"trl-{algo}-{seed}"),
        per_device_train_batch_size=setup.prompts * setup.k,
        num_generations=setup.k,
        max_completion_length=setup.max_new_tokens,
        temperature=setup.temperature,
        learning_rate=setup.learning_rate,
        lr_scheduler_type="constant",
        max_grad_norm=setup.max_grad_norm,
        max_steps=steps,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        use_cpu=not torch.cuda.is_available(),
        bf16=False,  # TRL's defaults are bf16 autocast and gradient checkpointing, even on CPU;
        gradient_checkpointing=False,  # our agents run float32 without checkpointing: same work
        seed=seed,
        disable_tqdm=True,
    )
    timer = StepTimer()
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    trainer = trainer_cls(
        model=model_path,
        reward_funcs=PromptEnvReward(env),
        args=args,
        train_dataset=prompt_env_dataset(env, _dataset_indices(env, setup)),
        processing_class=tokenizer,
        callbacks=[timer],
    )
    trainer.remove_callback(PrinterCallback)  # the per-step log dicts; the JSON keeps them
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train()
    logs = [h for h in trainer.state.log_history if "reward" in h]
    out = {
        "step_seconds": timer.seconds,
        "rewards": [h["reward"] for h in logs],
        "completion_length": [h.get("completions/mean_length") for h in logs],
    }
    if evaluate_after:
        out["greedy_accuracy"] = evaluate(trainer.model, tokenizer, env, setup)
    return out


# --------------------------------------------------------------------- our agents


def ours_available() -> bool:
    """Whether this checkout has ``CausalLMPolicy`` (our agents on a Hugging Face model)."""
    from tpo_agents import TPO

    return "CausalLMPolicy" in getattr(TPO, "policy_aliases", {})


def run_ours(algo: str, setup: Setup, model_path: str, steps: int, seed: int, workdir: Path,
             evaluate_after: bool) -> dict:
    """Train our ``TPO`` / ``GRPO`` agent on ``CausalLMPolicy`` for ``steps`` iterations."""
    from stable_baselines3.common.callbacks import BaseCallback

    from tpo_agents import GRPO, TPO

    class IterationTimer(BaseCallback):
        """Wall time from one rollout start to the next (sampling + scoring + update)."""

        def __init__(self):
            super().__init__()
            self.seconds: list[float] = []
            self.rewards: list[float] = []
            self.lengths: list[float] = []
            self._start = None

        def _close(self) -> None:
            if self._start is not None:
                self.seconds.append(time.perf_counter() - self._start)
                self.rewards.append(self.model.last_train_stats["mean_score"])
                batch = self.model.last_batch  # the iteration's LMGroupBatch
                if batch is not None and hasattr(batch, "completion_lengths"):
                    self.lengths.append(float(batch.completion_lengths().float().mean()))

        def _on_rollout_start(self) -> None:
            self._close()
            self._start = time.perf_counter()

        def _on_training_end(self) -> None:
            self._close()

        def _on_step(self) -> bool:
            return True

    env = make_env(setup)
    agent = (TPO if algo == "tpo" else GRPO)(
        "CausalLMPolicy",
        env,
        batch_size=setup.prompts,
        n_candidates=setup.k,
        n_epochs=1,
        learning_rate=setup.learning_rate,
        max_grad_norm=setup.max_grad_norm,
        optimizer_kwargs={"weight_decay": 0.0},  # as TRL's AdamW
        seed=seed,
        device="cuda" if torch.cuda.is_available() else "cpu",
        policy_kwargs={"model": model_path, "max_new_tokens": setup.max_new_tokens,
                       "temperature": setup.temperature, "dtype": "float32"},
    )
    timer = IterationTimer()
    agent.learn(steps * setup.prompts * setup.k, callback=timer, log_interval=None)
    out = {"step_seconds": timer.seconds, "rewards": timer.rewards, "completion_length": timer.lengths}
    if evaluate_after:
        out["greedy_accuracy"] = evaluate(agent.policy.model, agent.policy.tokenizer, env, setup)
    return out


# -------------------------------------------------------------------------- runners


RUNNERS = {
    "tpo": lambda *a, **kw: run_ours("tpo", *a, **kw),
    "grpo": lambda *a, **kw: run_ours("grpo", *a, **kw),
    "trl_grpo": lambda *a, **kw: run_trl("grpo", *a, **kw),
    "trl_tpo": lambda *a, **kw: run_trl("tpo", *a, **kw),
}


def available_impls() -> list[str]:
    ours = ours_available()
    return [impl for impl in IMPLS if ours or impl.startswith("trl_")]


def timing(impls, setup: Setup, warmup: int, steps: int, rounds: int, workdir: Path) -> dict:
    """Median step time per implementation over ``rounds`` runs each, the running order
    reversed every other round so slow drifts of the machine hit every implementation alike."""
    model_path = build_model(workdir, 0)
    seconds: dict[str, list[float]] = {impl: [] for impl in impls}
    lengths: dict[str, list[float]] = {impl: [] for impl in impls}
    for r in range(rounds):
        for impl in (impls if r % 2 == 0 else impls[::-1]):
            run = RUNNERS[impl](setup, model_path, warmup + steps, 0, workdir, evaluate_after=False)
            seconds[impl] += run["step_seconds"][warmup:]
            lengths[impl] += [x for x in run["completion_length"][warmup:] if x is not None]
            print(f"[timing] round {r}: {impl} median {statistics.median(run['step_seconds'][warmup:]):.3f} "
                  "s/step", flush=True)
    results = {
        impl: {
            "step_seconds": seconds[impl],
            "median_seconds": statistics.median(seconds[impl]),
            "mean_completion_tokens": statistics.mean(lengths[impl]) if lengths[impl] else None,
        }
        for impl in impls
    }
    base = results.get("trl_grpo", {}).get("median_seconds")
    for row in results.values():
        row["ratio_to_trl_grpo"] = row["median_seconds"] / base if base else None
    return results


def _mean_std(values: list[float]) -> tuple[float, float]:
    return statistics.mean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def reward(impls, setup: Setup, steps: int, seeds, window: int, workdir: Path) -> dict:
    results = {}
    for impl in impls:
        per_seed = []
        for seed in seeds:
            run = RUNNERS[impl](setup, build_model(workdir, seed), steps, seed, workdir, evaluate_after=True)
            last = run["rewards"][-window:]
            per_seed.append({
                "seed": seed,
                "final_reward": sum(last) / len(last),
                "greedy_accuracy": run["greedy_accuracy"],
                "rewards": run["rewards"],
            })
            print(f"[reward] {impl} seed {seed}: final reward {per_seed[-1]['final_reward']:.3f}, "
                  f"greedy accuracy {run['greedy_accuracy']:.3f}", flush=True)
        fr = _mean_std([s["final_reward"] for s in per_seed])
        acc = _mean_std([s["greedy_accuracy"] for s in per_seed])
        results[impl] = {"seeds": per_seed, "final_reward_mean": fr[0], "final_reward_std": fr[1],
                         "greedy_accuracy_mean": acc[0], "greedy_accuracy_std": acc[1]}
    return results


# -------------------------------------------------------------------------- output


def markdown(result: dict) -> str:
    cfg = result["config"]
    s = cfg["setup"]
    lines = [
        f"# LLM benchmark (tiny offline Llama, TinyArithmetic-v0: {s['task_size'] or 'all'} problems, "
        f"operations {s['operations']!r})",
        "",
        "`" + " ".join(["python -m benchmarks.llm", *cfg["argv"]]) + "`",
        "",
        f"One step: {s['prompts']} prompts x K = {s['k']} completions of at most "
        f"{s['max_new_tokens']} tokens, one update (lr {s['learning_rate']}, constant, grad-norm clip "
        f"{s['max_grad_norm']}); {cfg['threads']} torch thread(s), device {cfg['device']}. Step time: "
        f"median of {cfg['timing_steps']} steps x {cfg.get('rounds', 1)} runs after {cfg['warmup']} warm-up steps.",
        "",
    ]
    if result.get("timing"):
        lines += ["| implementation | s / step (median) | ratio to TRL GRPO | mean completion tokens |",
                  "|---|---|---|---|"]
        for impl, row in result["timing"].items():
            ratio = "-" if row["ratio_to_trl_grpo"] is None else f"{row['ratio_to_trl_grpo']:.2f}"
            tokens = "-" if row["mean_completion_tokens"] is None else f"{row['mean_completion_tokens']:.1f}"
            lines.append(f"| {LABELS[impl]} | {row['median_seconds']:.3f} | {ratio} | {tokens} |")
        lines.append("")
    if result.get("reward"):
        n = cfg["reward_steps"]
        lines += [f"Reward after {n} steps (mean +- std over seeds {cfg['seeds']}; training reward = "
                  f"mean batch reward of the last {cfg['window']} steps; greedy accuracy over all prompts):",
                  "",
                  "| implementation | training reward | greedy accuracy |", "|---|---|---|"]
        for impl, row in result["reward"].items():
            lines.append(f"| {LABELS[impl]} | {row['final_reward_mean']:.3f} +- {row['final_reward_std']:.3f} "
                         f"| {row['greedy_accuracy_mean']:.3f} +- {row['greedy_accuracy_std']:.3f} |")
        lines.append("")
    missing = [impl for impl in IMPLS if impl not in cfg["impls"]]
    if missing:
        lines += [f"Not run: {', '.join(LABELS[m] for m in missing)}.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.llm", description=__doc__.split("\n")[0])
    parser.add_argument("--impls", nargs="+", default=None, choices=IMPLS,
                        help="implementations to run (default: every available one)")
    parser.add_argument("--task-size", type=positive_int, default=Setup.task_size,
                        help="TinyArithmetic-v0 problems (default 10)")
    parser.add_argument("--operations", default=Setup.operations, help="TinyArithmetic-v0 operators")
    parser.add_argument("--prompts", type=positive_int, default=Setup.prompts, help="prompts per step (B)")
    parser.add_argument("--k", type=positive_int, default=Setup.k, help="completions per prompt (K >= 2)")
    parser.add_argument("--max-new-tokens", type=positive_int, default=Setup.max_new_tokens)
    parser.add_argument("--lr", type=float, default=Setup.learning_rate)
    parser.add_argument("--warmup", type=int, default=2, help="timing steps discarded")
    parser.add_argument("--timing-steps", type=positive_int, default=10, help="measured steps per run")
    parser.add_argument("--rounds", type=positive_int, default=2, help="timing runs per implementation")
    parser.add_argument("--reward-steps", type=positive_int, default=100)
    parser.add_argument("--window", type=positive_int, default=10)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--threads", type=positive_int, default=1)
    parser.add_argument("--skip-timing", action="store_true")
    parser.add_argument("--skip-reward", action="store_true")
    parser.add_argument("--workdir", type=Path, default=None, help="model folders (default: a temp dir)")
    parser.add_argument("--out", type=Path, default=Path("results/llm-benchmark.json"))
    args = parser.parse_args(argv)
    if args.k < 2:
        parser.error(f"--k must be >= 2 (a group needs two completions); got {args.k}")
    if args.warmup < 0:
        parser.error(f"--warmup must be >= 0; got {args.warmup}")
    impls = args.impls or available_impls()
    unavailable = [impl for impl in impls if impl not in available_impls()]
    if unavailable:
        parser.error(f"not available in this checkout: {unavailable}")
    setup = Setup(prompts=args.prompts, k=args.k, max_new_tokens=args.max_new_tokens, learning_rate=args.lr,
                  task_size=args.task_size, operations=args.operations)
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    try:
        return _run(args, impls, setup, argv)
    finally:
        torch.set_num_threads(previous_threads)


def _run(args, impls, setup: Setup, argv) -> dict:
    result = {
        "config": {
            "argv": list(argv) if argv is not None else sys.argv[1:],
            "setup": asdict(setup),
            "impls": impls,
            "warmup": args.warmup,
            "timing_steps": args.timing_steps,
            "rounds": args.rounds,
            "reward_steps": args.reward_steps,
            "window": args.window,
            "seeds": args.seeds,
            "threads": args.threads,
            "device": "cuda" if torch.cuda.is_available() else "cpu",
            "versions": _versions(),
            "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
        }
    }
    with tempfile.TemporaryDirectory() as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        if not args.skip_timing:
            result["timing"] = timing(impls, setup, args.warmup, args.timing_steps, args.rounds, workdir)
        if not args.skip_reward:
            result["reward"] = reward(impls, setup, args.reward_steps, args.seeds, args.window, workdir)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, default=_json_default) + "\n")
    args.out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))
    return result


def _versions() -> dict:
    import transformers
    import trl

    return {"torch": torch.__version__, "transformers": transformers.__version__, "trl": trl.__version__}


def _json_default(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


if __name__ == "__main__":
    main()
