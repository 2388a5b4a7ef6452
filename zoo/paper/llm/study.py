"""LLM RLVR at CPU scale: TPO vs GRPO from a small pretrained model on sparse-reward tasks.

The paper's LLM claim (Qwen3-1.7B, Reasoning Gym: TPO ~0.96 where GRPO stays near 0) at a
scale a 2-core CPU can run. Every run starts from the same small model, fine-tuned to partial
competence on the task (:func:`zoo.paper.llm.pretrain.pretrained_lm`), trains for ``--steps``
iterations of ``--prompts`` prompts x ``--k`` completions with a sparse exact-match reward, and
measures the **greedy accuracy on held-out problems** (the task's test split, which neither
the fine-tuning nor RL sees) at step 0 and every ``--eval-every`` steps.

Methods (one Adam/AdamW update per iteration, constant learning rate, gradient clipping at
norm 1, weight decay 0, float32 on the CPU, same sampling temperature 1; ``cfg["device"]``,
``cfg["dtype"]`` and ``cfg["use_vllm"]`` move a run to a GPU, see ``benchmarks/llm_gpu.py``):

* ``tpo`` / ``grpo``: our ``TPO`` / ``GRPO`` agents on ``CausalLMPolicy`` (``n_epochs=1``;
  GRPO with its default KL coefficient 0.04 against the rollout snapshot);
* ``trl_grpo`` / ``trl_dr_grpo`` / ``trl_dapo``: TRL's ``GRPOTrainer`` with
  ``loss_type="grpo"`` / ``"dr_grpo"`` / ``"dapo"`` (TRL's default), otherwise TRL's defaults
  (``beta=0``, group reward scaling);
* ``trl_targetpo``: our ``tpo_agents.trl.TargetPOTrainer`` (TRL's trainer with TPO's loss).

The seed sets sampling and prompt order; the starting weights are the same for every seed (the
pretrained model). Each run is cached as JSON (``CACHE/llm/<task>/steps<S>_b<B>_k<K>/...``; ``--cache``,
default ``OUT/cache``; the committed records: ``data/cache``) so an
interrupted study resumes; ``--cached-only`` rebuilds the report from the cache.

Usage::

    python -m zoo.llm_study --task arithmetic --methods tpo grpo --lrs 1e-4 3e-4 1e-3 --seeds 1
    python -m zoo.llm_study --task arithmetic --seeds 5 --lr tpo=3e-4 grpo=1e-3 ...

Output: ``<out>/llm-rlvr-<task>-steps<S>_b<B>_k<K>.json``, ``.md`` and ``.png`` (held-out
accuracy vs step, mean +- standard error over seeds, one line per method at its chosen
learning rate).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

from tpo_agents.atomic import write_json_atomic
from tpo_gym.extras import needs_extra
from zoo.jobs.sweep import cache_root
from zoo.paper import numbers as paper_numbers

os.environ.setdefault("HF_HUB_OFFLINE", "1")

METHODS = ("tpo", "grpo", "trl_grpo", "trl_dr_grpo", "trl_dapo", "trl_targetpo")
LABELS = {
    "tpo": "our TPO (CausalLMPolicy)",
    "grpo": "our GRPO (CausalLMPolicy)",
    "trl_grpo": "TRL GRPOTrainer, loss_type=grpo",
    "trl_dr_grpo": "TRL GRPOTrainer, loss_type=dr_grpo",
    "trl_dapo": "TRL GRPOTrainer, loss_type=dapo (default)",
    "trl_targetpo": "our TRL TargetPOTrainer",
}


# ----------------------------------------------------------------------------- one run


def _evaluate(model, tokenizer, env, n_eval: int, max_new_tokens: int) -> float:
    from tpo_agents.trl.prompts import greedy_accuracy

    n = min(n_eval, len(env.unwrapped.prompts))
    return greedy_accuracy(model, tokenizer, env, indices=range(n), max_new_tokens=max_new_tokens)


def run_ours(method: str, cfg: dict, model_path: str, seed: int) -> dict:
    """Our TPO / GRPO agent on CausalLMPolicy; held-out accuracy every ``eval_every`` steps."""
    from stable_baselines3.common.callbacks import BaseCallback

    from tpo_agents import GRPO, TPO
    from zoo.paper.llm.pretrain import sparse_task

    task = sparse_task(cfg["task"])
    test_env = task.make("test")
    curve: list[dict] = []
    seconds: list[float] = []
    rewards: list[float] = []

    class Probe(BaseCallback):
        def __init__(self):
            super().__init__()
            self.iteration, self._start = 0, None

        def _evaluate(self):
            policy = self.model.policy
            acc = _evaluate(policy.model, policy.tokenizer, test_env, cfg["n_eval"], task.max_new_tokens)
            curve.append({"step": self.iteration, "accuracy": acc})

        def _on_training_start(self):
            self._evaluate()

        def _close(self):
            if self._start is None:
                return
            seconds.append(time.perf_counter() - self._start)
            rewards.append(float(self.model.last_train_stats["mean_score"]))
            self.iteration += 1
            if self.iteration % cfg["eval_every"] == 0:
                self._evaluate()

        def _on_rollout_start(self):
            self._close()
            self._start = time.perf_counter()

        def _on_training_end(self):
            self._close()

        def _on_step(self):
            return True

    agent = (TPO if method == "tpo" else GRPO)(
        "CausalLMPolicy",
        task.make("train"),
        batch_size=cfg["prompts"],
        n_candidates=cfg["k"],
        n_epochs=1,
        learning_rate=cfg["lr"],
        max_grad_norm=1.0,
        optimizer_kwargs={"weight_decay": 0.0},
        seed=seed,
        device=cfg.get("device", "cpu"),
        policy_kwargs={"model": model_path, "max_new_tokens": task.max_new_tokens,
                       "temperature": 1.0, "dtype": cfg.get("dtype", "float32")},
    )
    agent.learn(cfg["steps"] * cfg["prompts"] * cfg["k"], callback=Probe(), log_interval=None)
    return {"curve": curve, "step_seconds": seconds, "rewards": rewards}


def run_trl(method: str, cfg: dict, model_path: str, seed: int, workdir: Path) -> dict:
    """TRL's GRPOTrainer (a loss_type) or our TargetPOTrainer, same prompts and verifier."""
    from transformers import AutoTokenizer, PrinterCallback, TrainerCallback
    from transformers.utils import logging as hf_logging
    from trl import GRPOConfig, GRPOTrainer

    from tpo_agents.trl import TargetPOConfig, TargetPOTrainer
    from tpo_agents.trl.prompts import PromptEnvReward, prompt_env_dataset
    from zoo.paper.llm.pretrain import sparse_task

    hf_logging.set_verbosity_error()
    task = sparse_task(cfg["task"])
    train_env, test_env = task.make("train"), task.make("test")
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    curve: list[dict] = []
    seconds: list[float] = []

    class Probe(TrainerCallback):
        def __init__(self):
            self._start = 0.0

        def _evaluate(self, model, step):
            curve.append({"step": step, "accuracy": _evaluate(
                model, tokenizer, test_env, cfg["n_eval"], task.max_new_tokens)})

        def on_train_begin(self, args, state, control, model=None, **kwargs):
            self._evaluate(model, 0)

        def on_step_begin(self, args, state, control, **kwargs):
            self._start = time.perf_counter()

        def on_step_end(self, args, state, control, model=None, **kwargs):
            seconds.append(time.perf_counter() - self._start)
            if state.global_step % cfg["eval_every"] == 0:
                self._evaluate(model, state.global_step)

    common = dict(
        output_dir=str(workdir / f"{method}-{seed}"),
        per_device_train_batch_size=cfg["prompts"] * cfg["k"],
        num_generations=cfg["k"],
        max_completion_length=task.max_new_tokens,
        temperature=1.0,
        learning_rate=cfg["lr"],
        lr_scheduler_type="constant",
        warmup_steps=0,
        max_grad_norm=1.0,
        weight_decay=0.0,
        max_steps=cfg["steps"],
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        use_cpu=cfg.get("device", "cpu") == "cpu",
        bf16=cfg.get("dtype", "float32") == "bfloat16",
        use_vllm=cfg.get("use_vllm", False),
        gradient_checkpointing=False,
        seed=seed,
        disable_tqdm=True,
    )
    if method == "trl_targetpo":
        args, trainer_cls = TargetPOConfig(**common), TargetPOTrainer
    else:
        loss_type = {"trl_grpo": "grpo", "trl_dr_grpo": "dr_grpo", "trl_dapo": "dapo"}[method]
        args, trainer_cls = GRPOConfig(loss_type=loss_type, **common), GRPOTrainer
    n = len(train_env.unwrapped.prompts)
    # Enough shuffled passes for every step (TRL draws prompts in epochs; ours with replacement).
    indices = list(range(n)) * max(1, math.ceil(cfg["steps"] * cfg["prompts"] / n) + 1)
    trainer = trainer_cls(
        model=model_path,
        reward_funcs=PromptEnvReward(train_env),
        args=args,
        train_dataset=prompt_env_dataset(train_env, indices),
        processing_class=tokenizer,
        callbacks=[Probe()],
    )
    trainer.remove_callback(PrinterCallback)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train()
    rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    return {"curve": curve, "step_seconds": seconds, "rewards": rewards}


# The settings that change a run's result: a cached run is reused only when all of them match.
RUN_KEYS = ("task", "steps", "prompts", "k", "eval_every", "n_eval", "lr", "sft")


def cache_path(cache: Path, method: str, cfg: dict, seed: int) -> Path:
    """Where the run (method, cfg, seed) is cached: the file name carries the run's shape
    (steps, prompts x K, lr), so runs of different lengths or batch sizes never collide."""
    shape = f"steps{cfg['steps']}_b{cfg['prompts']}_k{cfg['k']}"
    return cache / shape / f"{method}__lr{cfg['lr']:g}__seed{seed}.json"


def _check_cached(path: Path, run: dict, cfg: dict) -> None:
    stored = run.get("config", {})
    wrong = {key: (stored.get(key), cfg.get(key)) for key in RUN_KEYS
             if stored.get(key) != cfg.get(key)}
    if wrong:
        detail = ", ".join(f"{k}: cached {a!r}, asked {b!r}" for k, (a, b) in wrong.items())
        raise ValueError(f"cached run {path} was made with other settings ({detail}); "
                         "move it away or use another --out")


def run_one(method: str, cfg: dict, seed: int, cache: Path, workdir: Path) -> dict:
    """One (method, lr, seed) run, read from ``cache`` when it is there."""
    import torch

    from zoo.paper.llm.pretrain import model_task, pretrained_lm

    path = cache_path(cache, method, cfg, seed)
    if path.exists():
        run = json.loads(path.read_text())
        _check_cached(path, run, cfg)
        return run
    previous = torch.get_num_threads()
    torch.set_num_threads(cfg["threads"])
    try:
        model_path = str(pretrained_lm(model_task(cfg["task"]), **cfg.get("sft", {})))
        start = time.perf_counter()
        if method in ("tpo", "grpo"):
            run = run_ours(method, cfg, model_path, seed)
        else:
            run = run_trl(method, cfg, model_path, seed, workdir)
    finally:
        torch.set_num_threads(previous)
    run.update(method=method, seed=seed, lr=cfg["lr"], config=cfg, model=model_path,
               seconds=time.perf_counter() - start)
    write_json_atomic(path, run, indent=1)
    return run


# ----------------------------------------------------------------------------- summaries


def _mean_se(values: list[float]) -> tuple[float, float]:
    mean = statistics.fmean(values)
    se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else float("nan")
    return mean, se


def summarize(runs: list[dict], threshold_gain: float = 0.10) -> dict:
    """Per method (at one lr): accuracy curve mean +- s.e., start, final, gain, steps to
    ``start + threshold_gain`` (first evaluation at or above it, None if never), s/step."""
    steps = [c["step"] for c in runs[0]["curve"]]
    acc = [[c["accuracy"] for c in r["curve"]] for r in runs]
    start = runs[0]["curve"][0]["accuracy"]
    finals = [a[-1] for a in acc]
    best = [max(a) for a in acc]
    to_threshold = []
    for a in acc:
        hit = [s for s, x in zip(steps, a) if x >= start + threshold_gain - 1e-12]
        to_threshold.append(hit[0] if hit else None)
    final_mean, final_se = _mean_se(finals)
    return {
        "seeds": [r["seed"] for r in runs],
        "lr": runs[0]["lr"],
        "steps": steps,
        "accuracy_mean": [statistics.fmean(col) for col in zip(*acc)],
        "accuracy_se": [_mean_se(list(col))[1] for col in zip(*acc)],
        "start_accuracy": start,
        "final_accuracy": finals,
        "final_mean": final_mean,
        "final_se": final_se,
        "gain_mean": final_mean - start,
        "best_accuracy": best,
        "steps_to_threshold": to_threshold,
        "threshold": start + threshold_gain,
        "seconds_per_step": statistics.median(s for r in runs for s in r["step_seconds"]),
    }


def markdown(result: dict) -> str:
    cfg = result["config"]
    lines = [
        f"# LLM RLVR at CPU scale: {cfg['task']} (sparse exact-match reward)",
        "",
        f"`python -m zoo.llm_study {' '.join(cfg['argv'])}`",
        "",
        f"Model: {result['model']['parameters']:,}-parameter Llama (character tokenizer), "
        f"fine-tuned for {result['model']['steps']} steps to validation accuracy "
        f"{result['model']['val_accuracy']:.3f} ({result['model']['path_name']}). "
        f"{cfg['steps']} RL steps of {cfg['prompts']} prompts x K = {cfg['k']}; held-out "
        f"greedy accuracy on {cfg['n_eval']} test problems every {cfg['eval_every']} steps; "
        f"{cfg['threads']} torch thread(s), CPU.",
        "",
    ]
    if result.get("grid"):
        lines += ["## Learning-rate grid (final held-out accuracy, per seed)", "",
                  "| method | " + " | ".join(f"lr {lr:g}" for lr in cfg["lrs"]) + " |",
                  "|---|" + "---|" * len(cfg["lrs"])]
        for method, by_lr in result["grid"].items():
            cells = [", ".join(f"{x:.3f}" for x in by_lr[f"{lr:g}"]) if f"{lr:g}" in by_lr else "-"
                     for lr in cfg["lrs"]]
            lines.append(f"| {LABELS[method]} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += [
        "## Held-out accuracy (mean +- s.e. over seeds)", "",
        "| method | lr | seeds | start | final | gain | best (per seed) | steps to start+0.10 "
        "(per seed) | s / step |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for method, s in result["methods"].items():
        reach = ", ".join("-" if x is None else str(x) for x in s["steps_to_threshold"])
        best = ", ".join(f"{x:.2f}" for x in s["best_accuracy"])
        lines.append(
            f"| {LABELS[method]} | {s['lr']:g} | {len(s['seeds'])} | {s['start_accuracy']:.3f} | "
            f"{s['final_mean']:.3f} +- {s['final_se']:.3f} | {s['gain_mean']:+.3f} | {best} | "
            f"{reach} | {s['seconds_per_step']:.2f} |"
        )
    lines += ["", paper_numbers.LLM_CLAIM, "", result.get("verdict", ""), ""]
    return "\n".join(lines)


def verdict(methods: dict) -> str:
    """Plain sentences: does TPO beat GRPO here (final accuracy and speed, ~2 s.e.), through
    our agents and, where both ran, through TRL (TargetPOTrainer vs GRPOTrainer's dapo)?"""
    lines = [pair_verdict(methods, "tpo", "grpo", "TPO", "GRPO", "Verdict")]
    if "trl_targetpo" in methods and "trl_dapo" in methods:
        lines.append(pair_verdict(methods, "trl_targetpo", "trl_dapo", "TargetPOTrainer",
                                   "TRL's GRPOTrainer (dapo)", "Through TRL"))
    return " ".join(line for line in lines if line)


def pair_verdict(methods: dict, a: str, b: str, name_a: str, name_b: str, head: str = "") -> str:
    """Plain words on method ``a`` against ``b`` (final accuracy within ~2 s.e., and speed),
    prefixed by ``head: `` when given; "" when either did not run."""
    if a not in methods or b not in methods:
        return ""
    t, g = methods[a], methods[b]
    diff = t["final_mean"] - g["final_mean"]
    se = math.sqrt(t["final_se"] ** 2 + g["final_se"] ** 2)
    if not math.isfinite(se):
        return f"{name_a} - {name_b} final accuracy: {diff:+.3f} (one seed: no standard error)."
    word = (f"{name_a} beats {name_b}" if diff > 2 * se else f"{name_b} beats {name_a}" if diff < -2 * se
            else f"{name_a} and {name_b} are not distinguishable")
    line = (f"{head + ': ' if head else ''}{word} here: final held-out accuracy {t['final_mean']:.3f} vs "
            f"{g['final_mean']:.3f} (difference {diff:+.3f}, s.e. {se:.3f}, "
            f"{len(t['seeds'])} and {len(g['seeds'])} seeds).")
    return line + _speed_verdict(t, g, name_a, name_b)


def _speed_verdict(t: dict, g: dict, name_a: str = "TPO", name_b: str = "GRPO") -> str:
    """How fast each gains 10 points: compared only when every seed of both got there
    (a seed that never does has no step count to average)."""
    a, b = t["steps_to_threshold"], g["steps_to_threshold"]
    if None in a or None in b or len(a) < 2 or len(b) < 2:
        reached = f"{sum(x is not None for x in a)}/{len(a)} and {sum(x is not None for x in b)}/{len(b)}"
        return f" Seeds reaching start + 0.10: {name_a} and {name_b} {reached}."
    (ma, sa), (mb, sb) = _mean_se(a), _mean_se(b)
    diff, se = mb - ma, math.sqrt(sa**2 + sb**2)
    word = (f"{name_a} gets there sooner" if diff > 2 * se else f"{name_b} gets there sooner"
            if diff < -2 * se else "neither gets there distinguishably sooner")
    return (f" Steps to start + 0.10: {name_a} {ma:.0f} +- {sa:.0f}, {name_b} {mb:.0f} +- {sb:.0f} "
            f"(difference {diff:+.0f}, s.e. {se:.0f}): {word}.")


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for method, s in result["methods"].items():
        mean, se = s["accuracy_mean"], s["accuracy_se"]
        ax.plot(s["steps"], mean, label=f"{LABELS[method]} (lr {s['lr']:g})")
        if len(s["seeds"]) > 1:
            ax.fill_between(s["steps"], [m - e for m, e in zip(mean, se)],
                            [m + e for m, e in zip(mean, se)], alpha=0.2)
    ax.set_xlabel("RL step")
    ax.set_ylabel("held-out greedy accuracy")
    ax.set_title(f"{result['config']['task']}: from the SFT start, mean +- s.e.")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ----------------------------------------------------------------------------- CLI


def _parse_lr_choice(items: list[str]) -> dict[str, float]:
    """``["tpo=3e-5", ...]`` -> ``{"tpo": 3e-5}``; ``ValueError`` naming a bad item."""
    out = {}
    for item in items:
        method, _, value = item.partition("=")
        try:
            lr = float(value)
        except ValueError:
            lr = float("nan")
        if method not in METHODS or not lr > 0:
            raise ValueError(f"--lr takes METHOD=LR with METHOD in {METHODS} and LR > 0; got {item!r}")
        out[method] = lr
    return out


@needs_extra("llm", "python -m zoo.llm_study")
def main(argv: list[str] | None = None) -> dict:
    from zoo.paper.llm.pretrain import SPARSE_TASKS, pretrained_lm

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", default="arithmetic", choices=sorted(SPARSE_TASKS))
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--lrs", type=float, nargs="+", default=[1e-4, 3e-4, 1e-3],
                        help="the grid (used for methods without --lr)")
    parser.add_argument("--lr", nargs="+", default=[], metavar="METHOD=LR",
                        help="a fixed learning rate per method (skips its grid)")
    parser.add_argument("--grid-seeds", type=int, default=1, help="seeds per grid point")
    parser.add_argument("--seeds", type=int, default=5, help="seeds at the chosen lr")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--n-eval", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("results"))
    parser.add_argument("--cache", type=Path, default=None,
                        help="per-run cache root (default: OUT/cache; the committed records: data/cache)")
    parser.add_argument("--cached-only", action="store_true",
                        help="report from the cache; runs not cached are left out")
    args = parser.parse_args(argv)
    if args.k < 2 or args.steps < 1 or args.prompts < 1 or args.eval_every < 1:
        parser.error("--k must be >= 2 and --steps, --prompts, --eval-every >= 1")
    try:
        fixed = _parse_lr_choice(args.lr)
    except ValueError as err:
        parser.error(str(err))
    cache = cache_root(args) / "llm" / args.task
    workdir = cache_root(args) / "llm" / ".trl-work"
    base = dict(task=args.task, steps=args.steps, prompts=args.prompts, k=args.k,
                eval_every=args.eval_every, n_eval=args.n_eval, threads=args.threads)

    def runs(method, lr, seeds):
        cfg = dict(base, lr=lr)
        out = []
        for seed in seeds:
            if args.cached_only and not cache_path(cache, method, cfg, seed).exists():
                continue
            run = run_one(method, cfg, seed, cache, workdir)
            print(f"[llm {args.task}] {method} lr {lr:g} seed {seed}: held-out "
                  f"{run['curve'][0]['accuracy']:.3f} -> {run['curve'][-1]['accuracy']:.3f}",
                  flush=True)
            out.append(run)
        runs_seen.setdefault(method, []).extend(out)
        return out

    runs_seen: dict[str, list[dict]] = {}
    grid: dict[str, dict[str, list[float]]] = {}
    chosen: dict[str, float] = {}
    for method in args.methods:
        if method in fixed:
            chosen[method] = fixed[method]
            continue
        scores = {}
        for lr in args.lrs:
            got = runs(method, lr, range(args.grid_seeds))
            if got:
                grid.setdefault(method, {})[f"{lr:g}"] = [r["curve"][-1]["accuracy"] for r in got]
                scores[lr] = statistics.fmean(grid[method][f"{lr:g}"])
        if scores:
            chosen[method] = max(scores, key=scores.get)
    methods = {}
    for method, lr in chosen.items():
        got = runs(method, lr, range(args.seeds))
        if got:
            methods[method] = summarize(got)
    # The model the runs started from (a --cached-only report must not build one).
    recorded = [r["model"] for m in chosen for r in runs_seen.get(m, [])]
    model_path = Path(recorded[0]) if recorded else pretrained_lm(args.task)
    report_file = model_path / "sft_report.json"
    report = json.loads(report_file.read_text()) if report_file.exists() else {
        "parameters": 0, "steps": 0, "val_accuracy": float("nan"), "config": None}
    result = {
        "config": dict(base, argv=list(argv) if argv is not None else sys.argv[1:],
                       methods=args.methods, lrs=args.lrs, seeds=args.seeds,
                       grid_seeds=args.grid_seeds),
        "model": {"path_name": model_path.name, "parameters": report["parameters"],
                  "steps": report["steps"], "val_accuracy": report["val_accuracy"],
                  "sft_config": report["config"]},
        "grid": grid,
        "methods": methods,
        "paper": paper_numbers.LLM_CLAIM,
        "verdict": verdict(methods),
        # Every run reported, grid included (a --cached-only report's own wall time is ~0).
        "compute_seconds": round(sum({(r["method"], r["lr"], r["seed"]): r["seconds"]
                                      for rs in runs_seen.values() for r in rs}.values()), 1),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"llm-rlvr-{args.task}-steps{args.steps}_b{args.prompts}_k{args.k}"
    stem.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    stem.with_suffix(".md").write_text(markdown(result))
    if methods:
        plot(result, stem.with_suffix(".png"))
    print(markdown(result))
    return result


if __name__ == "__main__":
    main()
