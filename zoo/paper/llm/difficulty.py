"""LLM RLVR along a difficulty dial: the text analogue of Table 3's error against H.

The paper's LLM claim (its Figure 10) is that under sparse reward TPO learns where GRPO stays
near zero. Table 3 shows the same on Token Reversal: the longer the sequence, the rarer a fully
correct sample, and the more GRPO's groups carry no signal. This study turns that knob on a
language model. The task is string reversal (``rev abcde=`` -> ``edcba``, exact match:
:class:`tpo_gym.prompts.tasks.StringReversalTask`) and the dial is the string's length, because
it is Table 3's knob itself: the reward is terminal, and the chance that a sampled answer is all
right falls about geometrically with the length. One small model, pre-trained on lengths 2-12
mixed to partial competence (:func:`zoo.paper.llm.pretrain.pretrained_lm` ``("reversal",
target_accuracy=0.2)``), is the start of every level; at each level RL trains on strings of
that one length.

Per level, before any training, the start is measured: greedy held-out accuracy and the
fraction of groups (K completions sampled at temperature 1, for each seed's draw of prompts)
whose rewards have no spread, i.e. GRPO's zero-variance groups.

Methods (:mod:`zoo.paper.llm.study`): our ``tpo`` and ``grpo`` on ``CausalLMPolicy``, our
``trl_targetpo`` (TargetPOTrainer), TRL's ``GRPOTrainer`` with its default ``loss_type="dapo"``
(``trl_dapo``) and ``"dr_grpo"`` (``trl_dr_grpo``); the same generation budget (steps x
prompts x K completions) for every method. Learning rates are chosen per method at one tuning
level on tuning seeds (default 100-102, never reported) from a grid, then frozen for the
reported seeds (default 0-4) at every level.

Every run is cached (``CACHE/llm/reversal@L/...``), so an interrupted study resumes where it
stopped; ``--workers`` runs that many runs at once, each on one torch thread::

    python -m zoo.llm_difficulty --levels 5 7 9 12 --workers 2 --out docs/results --cache data/cache

Output: ``OUT/llm-difficulty.{json,md,png}``: final held-out accuracy against start accuracy
(one line per method, s.e. bands), the per-level curves, a table, and a verdict per level.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import math
import multiprocessing
import statistics
import sys
import time
from pathlib import Path

from tpo_agents.atomic import write_json_atomic, write_text_atomic
from tpo_gym.extras import needs_extra
from zoo.jobs.sweep import cache_root
from zoo.paper.llm import study

DIAL = "reversal"
METHODS = ("tpo", "grpo", "trl_targetpo", "trl_dapo", "trl_dr_grpo")
SFT = {"target_accuracy": 0.2}
"""The start model: :class:`~zoo.paper.llm.pretrain.SFTConfig` overrides of the dial's SFT."""

PAIRS = (
    ("tpo", "grpo", "our TPO", "our GRPO"),
    ("trl_targetpo", "trl_dapo", "TargetPOTrainer", "TRL GRPOTrainer (dapo, its default)"),
    ("trl_targetpo", "trl_dr_grpo", "TargetPOTrainer", "TRL GRPOTrainer (dr_grpo)"),
)


def level_name(level: int) -> str:
    return f"{DIAL}@{level}"


# ----------------------------------------------------------------------------- the start


def start_spread(model_path: str, level: int, k: int, n_prompts: int, seed: int) -> dict:
    """The start model at ``level``: sampled groups of ``k`` completions (temperature 1, no
    top-k/top-p) for ``n_prompts`` train prompts drawn with ``seed``. Returns the fraction of
    groups whose rewards are all equal (``zero_spread``), of all-zero groups and the mean
    sampled reward."""
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tpo_agents.trl.prompts import PromptEnvReward, prompt_env_dataset
    from zoo.paper.llm.pretrain import sparse_task

    task = sparse_task(level_name(level))
    env = task.make("train")
    rng = np.random.default_rng(seed)
    indices = rng.choice(len(env.unwrapped.prompts), size=n_prompts, replace=False).tolist()
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(model_path).eval()
    dataset = prompt_env_dataset(env, indices)
    reward = PromptEnvReward(env)
    torch.manual_seed(seed)
    scores = []
    for start in range(0, n_prompts, 32):
        rows = dataset[start : start + 32]
        enc = tokenizer.apply_chat_template(
            rows["prompt"], add_generation_prompt=True, tokenize=True, return_dict=True,
            padding=True, return_tensors="pt",
        )
        with torch.no_grad():
            out = model.generate(
                input_ids=enc["input_ids"], attention_mask=enc["attention_mask"], do_sample=True,
                temperature=1.0, top_k=0, top_p=1.0, num_return_sequences=k,
                max_new_tokens=task.max_new_tokens, pad_token_id=tokenizer.pad_token_id,
            )
        texts = tokenizer.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
        ids = [i for i in rows["prompt_index"] for _ in range(k)]
        scores.extend(reward(texts, ids))
    groups = np.asarray(scores, dtype=float).reshape(n_prompts, k)
    return {
        "seed": seed,
        "zero_spread": float((groups.max(1) == groups.min(1)).mean()),
        "all_zero": float((groups.max(1) == 0).mean()),
        "sampled_reward": float(groups.mean()),
    }


# ----------------------------------------------------------------------------- the runs


def _run(job: tuple[str, dict, int, str, str]) -> dict:
    method, cfg, seed, cache, workdir = job
    return study.run_one(method, cfg, seed, Path(cache), Path(workdir))


def run_all(jobs: list[tuple[str, dict, int]], cache_for, workdir: Path, workers: int, log,
            cached_only: bool = False) -> list[dict]:
    """Every job, from the cache where it is there; ``workers`` processes (spawned, one
    thread each) for the rest. Returns the runs in job order (``cached_only``: only the
    cached ones, nothing is run)."""
    if cached_only:
        jobs = [(m, c, s) for m, c, s in jobs
                if study.cache_path(cache_for(c), m, c, s).exists()]
    todo = [(m, cfg, s, str(cache_for(cfg)), str(workdir)) for m, cfg, s in jobs]
    results: list[dict | None] = [None] * len(todo)
    if workers <= 1:
        for i, job in enumerate(todo):
            results[i] = _run(job)
            log(_describe(results[i]))
        return results
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context) as pool:
        futures = {pool.submit(_run, job): i for i, job in enumerate(todo)}
        for future in concurrent.futures.as_completed(futures):
            results[futures[future]] = run = future.result()
            log(_describe(run))
    return results


def _describe(run: dict) -> str:
    cfg = run["config"]
    return (f"[difficulty {cfg['task']}] {run['method']} lr {run['lr']:g} seed {run['seed']}: "
            f"{run['curve'][0]['accuracy']:.3f} -> {run['curve'][-1]['accuracy']:.3f} "
            f"({run['seconds']:.0f} s)")


# ----------------------------------------------------------------------------- the report


def report(result: dict) -> str:
    cfg = result["config"]
    lines = [
        "# LLM RLVR along a difficulty dial: string reversal, length = difficulty",
        "",
        f"`python -m zoo.llm_difficulty {' '.join(cfg['argv'])}`",
        "",
        f"Start model: {result['model']['parameters']:,}-parameter Llama (character tokenizer), "
        f"pre-trained on reversal of 2-12 letter strings for {result['model']['steps']} steps "
        f"(mixture validation accuracy {result['model']['val_accuracy']:.3f}; "
        f"{result['model']['path_name']}). At each level: {cfg['steps']} RL steps of "
        f"{cfg['prompts']} prompts x K = {cfg['k']} (the same {cfg['steps'] * cfg['prompts'] * cfg['k']:,} "
        f"sampled completions for every method), greedy held-out accuracy on {cfg['n_eval']} "
        f"test strings every {cfg['eval_every']} steps, one torch thread per run, CPU.",
        "",
        f"Learning rates: chosen per method at length {cfg['tune_level']} on seeds "
        f"{', '.join(map(str, cfg['tune_seeds']))} from {', '.join(f'{x:g}' for x in cfg['lrs'])}, "
        f"then frozen; reported seeds {', '.join(map(str, cfg['seeds']))}.",
        "",
        "## Final held-out accuracy (mean +- s.e. over seeds)",
        "",
        "| length | start (greedy) | groups with no reward spread at the start | "
        + " | ".join(study.LABELS[m] for m in cfg["methods"]) + " |",
        "|---|---|---|" + "---|" * len(cfg["methods"]),
    ]
    for level in cfg["levels"]:
        row = result["levels"][str(level)]
        spread = row["start_spread"]
        cells = []
        for m in cfg["methods"]:
            s = row["methods"].get(m)
            cells.append("-" if s is None else f"{s['final_mean']:.3f} +- {s['final_se']:.3f} ({len(s['seeds'])})")
        zs = statistics.fmean(x["zero_spread"] for x in spread) if spread else float("nan")
        az = statistics.fmean(x["all_zero"] for x in spread) if spread else float("nan")
        start = "-" if row["start_accuracy"] is None else f"{row['start_accuracy']:.3f}"
        lines.append(f"| {level} | {start} | {zs:.2f} (all-zero {az:.2f}) | "
                     + " | ".join(cells) + " |")
    lines += ["", "## Learning-rate choice (final accuracy on the tuning seeds)", "",
              "| method | " + " | ".join(f"lr {x:g}" for x in cfg["lrs"]) + " | chosen |",
              "|---|" + "---|" * (len(cfg["lrs"]) + 1)]
    for m, by_lr in result["tuning"].items():
        cells = [", ".join(f"{x:.3f}" for x in by_lr.get(f"{x:g}", [])) or "-" for x in cfg["lrs"]]
        chosen = f"{result['lrs'][m]:g}" if m in result["lrs"] else "- (grid not complete)"
        lines.append(f"| {study.LABELS[m]} | " + " | ".join(cells) + f" | {chosen} |")
    lines += ["", "## Verdict per level", ""]
    lines += [f"- **length {lv}**: {text}" for lv, text in result["verdicts"].items()]
    lines += ["", f"Compute: {result['compute_seconds'] / 3600:.1f} CPU-hours over "
              f"{result['runs']} runs (tuning included).", ""]
    return "\n".join(lines)


def level_verdict(methods: dict) -> str:
    parts = []
    for a, b, name_a, name_b in PAIRS:
        if a in methods and b in methods:
            parts.append(study.pair_verdict(methods, a, b, name_a, name_b))
    return " ".join(parts) if parts else "not run yet"


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    cfg = result["config"]
    levels = cfg["levels"]
    fig, axes = plt.subplots(1, 1 + len(levels), figsize=(4.2 * (1 + len(levels)), 3.8))
    ax = axes[0]
    for m in cfg["methods"]:
        xs, ys, es = [], [], []
        for level in levels:
            s = result["levels"][str(level)]["methods"].get(m)
            if s and result["levels"][str(level)]["start_accuracy"] is not None:
                xs.append(result["levels"][str(level)]["start_accuracy"])
                ys.append(s["final_mean"])
                es.append(0.0 if math.isnan(s["final_se"]) else s["final_se"])
        if xs:
            line = ax.plot(xs, ys, marker="o", label=study.LABELS[m])[0]
            ax.fill_between(xs, [y - e for y, e in zip(ys, es)], [y + e for y, e in zip(ys, es)],
                            color=line.get_color(), alpha=0.2)
    lim = max([0.05] + [result["levels"][str(lv)]["start_accuracy"] or 0.0 for lv in levels])
    diagonal = np.linspace(0.0, lim, 200)  # dense: on the symlog axis y = x is a curve
    ax.plot(diagonal, diagonal, color="grey", lw=0.8, ls="--", label="no gain (final = start)")
    ax.set_xscale("symlog", linthresh=0.01)
    ax.set_xlabel("start accuracy (greedy, held out)")
    ax.set_ylabel(f"final accuracy after {cfg['steps']} steps")
    ax.set_title("final vs start, mean +- s.e.")
    ax.legend(fontsize=6)
    ax.grid(alpha=0.3)
    for ax, level in zip(axes[1:], levels):
        for m in cfg["methods"]:
            s = result["levels"][str(level)]["methods"].get(m)
            if not s:
                continue
            mean, se = s["accuracy_mean"], [0.0 if math.isnan(e) else e for e in s["accuracy_se"]]
            line = ax.plot(s["steps"], mean, label=study.LABELS[m])[0]
            ax.fill_between(s["steps"], [a - e for a, e in zip(mean, se)],
                            [a + e for a, e in zip(mean, se)], color=line.get_color(), alpha=0.2)
        ax.set_title(f"length {level}")
        ax.set_xlabel("RL step")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ----------------------------------------------------------------------------- CLI


@needs_extra("llm", "python -m zoo.llm_difficulty")
def main(argv: list[str] | None = None) -> dict:
    from zoo.paper.llm.pretrain import pretrained_lm

    parser = argparse.ArgumentParser(prog="python -m zoo.llm_difficulty",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--levels", type=int, nargs="+", default=[5, 7, 9, 12],
                        help="string lengths (2-12: the start model's range)")
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=study.METHODS)
    parser.add_argument("--lrs", type=float, nargs="+", default=[1e-4, 3e-4, 1e-3])
    parser.add_argument("--tune-level", type=int, default=None,
                        help="the length where learning rates are chosen (default: the middle level)")
    parser.add_argument("--tune-seeds", type=int, nargs="+", default=[100, 101, 102])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--eval-every", type=int, default=25)
    parser.add_argument("--n-eval", type=int, default=200)
    parser.add_argument("--spread-prompts", type=int, default=256,
                        help="prompts per seed for the start's zero-spread fraction")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--cached-only", action="store_true",
                        help="report from the cache; runs not cached are left out")
    parser.add_argument("--out", type=Path, default=Path("results"))
    parser.add_argument("--cache", type=Path, default=None,
                        help="per-run cache root (default: OUT/cache; the committed records: data/cache)")
    args = parser.parse_args(argv)
    bad = [lv for lv in args.levels + ([args.tune_level] if args.tune_level else []) if not 2 <= lv <= 12]
    if bad:
        parser.error(f"--levels and --tune-level must be string lengths in 2..12 (the start "
                     f"model's range), got {bad}")
    if set(args.tune_seeds) & set(args.seeds):
        parser.error(f"--tune-seeds and --seeds must differ (learning rates are chosen on seeds "
                     f"that are not reported); both have {sorted(set(args.tune_seeds) & set(args.seeds))}")
    if args.k < 2 or args.steps < 1 or args.prompts < 1 or args.eval_every < 1 or args.workers < 1:
        parser.error("--k must be >= 2 and --steps, --prompts, --eval-every, --workers >= 1")
    levels = sorted(set(args.levels))
    tune_level = args.tune_level or levels[len(levels) // 2]
    root = cache_root(args) / "llm"
    workdir = root / ".trl-work"
    model_path = pretrained_lm(DIAL, **SFT)  # built once, before any worker starts
    base = dict(steps=args.steps, prompts=args.prompts, k=args.k, eval_every=args.eval_every,
                n_eval=args.n_eval, threads=1, sft=SFT)

    def cfg(level, lr):
        return dict(base, task=level_name(level), lr=lr)

    def cache_for(c):
        return root / c["task"]

    def log(line):
        print(line, flush=True)

    t0 = time.perf_counter()
    tune_jobs = [(m, cfg(tune_level, lr), s) for m in args.methods for lr in args.lrs
                 for s in args.tune_seeds]
    tuned = run_all(tune_jobs, cache_for, workdir, args.workers, log, args.cached_only)
    tuning: dict[str, dict[str, list[float]]] = {}
    for run in tuned:
        tuning.setdefault(run["method"], {}).setdefault(f"{run['lr']:g}", []).append(
            run["curve"][-1]["accuracy"])
    # A method's rate is chosen once its whole grid has run (a --cached-only report of a
    # study under way leaves the others out of the levels).
    complete = {m for m, by_lr in tuning.items()
                if sum(map(len, by_lr.values())) == len(args.lrs) * len(args.tune_seeds)}
    lrs = {m: float(max(by_lr, key=lambda x: statistics.fmean(by_lr[x])))
           for m, by_lr in tuning.items() if m in complete}

    jobs = [(m, cfg(level, lrs[m]), s) for level in levels for m in args.methods if m in lrs
            for s in args.seeds]
    runs = run_all(jobs, cache_for, workdir, args.workers, log, args.cached_only)

    spread_file = root / f"{DIAL}-start-spread.json"
    spreads = json.loads(spread_file.read_text()) if spread_file.exists() else {}
    key = f"{model_path.name}/k{args.k}/n{args.spread_prompts}"
    per_level = {}
    for level in levels:
        got = spreads.setdefault(key, {}).setdefault(str(level), {})
        for s in args.seeds:
            if str(s) not in got:
                got[str(s)] = start_spread(str(model_path), level, args.k, args.spread_prompts, s)
                write_json_atomic(spread_file, spreads)
        by_method = {}
        for m in args.methods:
            mine = [r for r in runs if r["method"] == m and r["config"]["task"] == level_name(level)]
            if not mine:
                continue
            by_method[m] = study.summarize(mine)
            by_method[m]["start_by_seed"] = {r["seed"]: r["curve"][0]["accuracy"] for r in mine}
            by_method[m]["final_by_seed"] = {r["seed"]: r["curve"][-1]["accuracy"] for r in mine}
        at_level = [r for r in runs + tuned if r["config"]["task"] == level_name(level)]
        per_level[str(level)] = {
            # Greedy and the same start model for every run: any run's step-0 evaluation.
            "start_accuracy": at_level[0]["curve"][0]["accuracy"] if at_level else None,
            "start_spread": [got[str(s)] for s in args.seeds],
            "methods": by_method,
        }
    sft_report = json.loads((model_path / "sft_report.json").read_text())
    all_runs = {(r["method"], r["config"]["task"], r["lr"], r["seed"]): r["seconds"] for r in tuned + runs}
    result = {
        "config": dict(base, argv=list(argv) if argv is not None else sys.argv[1:], levels=levels,
                       methods=args.methods, lrs=args.lrs, tune_level=tune_level,
                       tune_seeds=args.tune_seeds, seeds=args.seeds,
                       spread_prompts=args.spread_prompts, workers=args.workers),
        "model": {"path_name": model_path.name, "parameters": sft_report["parameters"],
                  "steps": sft_report["steps"], "val_accuracy": sft_report["val_accuracy"],
                  "sft_config": sft_report["config"], "built_with": sft_report.get("built_with")},
        "tuning": tuning,
        "lrs": lrs,
        "levels": per_level,
        "verdicts": {str(lv): level_verdict(per_level[str(lv)]["methods"]) for lv in levels},
        "paper": study.paper_numbers.LLM_CLAIM,
        "runs": len(all_runs),
        "compute_seconds": round(sum(all_runs.values()), 1),
        "wall_seconds_this_call": round(time.perf_counter() - t0, 1),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / "llm-difficulty"
    write_json_atomic(stem.with_suffix(".json"), result, indent=1)
    write_text_atomic(stem.with_suffix(".md"), report(result))
    plot(result, stem.with_suffix(".png"))
    print(report(result))
    return result


if __name__ == "__main__":
    main()
