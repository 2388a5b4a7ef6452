"""Classic-control benchmark: TPO and GRPO against SB3's PPO at equal environment steps.

What is compared
    ``tpo_agents.TPO`` and ``tpo_agents.GRPO`` (sequence groups: each iteration draws
    ``batch_size`` contexts, i.e. reset seeds, and plays ``n_candidates`` full episodes
    from each; the episode return is the candidate's score) against the baseline,
    Stable-Baselines3's ``PPO("MlpPolicy", env_id, seed=s)`` with SB3's default
    hyperparameters (one env, ``n_steps=2048``, ``batch_size=64``, 10 epochs, lr 3e-4,
    GAE, separate 64x64 actor and critic). TPO and GRPO share one setting, recorded in
    the JSON config (``METHOD_SETTINGS``): 2 contexts x 8 candidates per iteration, mean
    (not summed) step log-probs per candidate, Adam lr 1e-3, 4 epochs; GRPO keeps its
    defaults clip 0.2 and KL coefficient 0.04.

How it is measured
    Every run trains on the env for the same number of env steps (each step of each
    sub-env counts once, SB3's ``num_timesteps``). An SB3 callback evaluates the greedy
    policy (``evaluate_policy``, ``deterministic=True``, 10 episodes) on a separate,
    separately seeded eval env at steps 0, M, 2M, ..., N and stops training at N, so all
    methods share one step axis. Runs (env x method x seed) are separate processes with
    one torch thread each, at most ``--workers`` at a time.

Run it from the repository root::

    python benchmarks/classic_control.py                      # CartPole-v1 + Acrobot-v1, 3 seeds
    python benchmarks/classic_control.py --envs CartPole-v1 --seeds 5 --timesteps 50000
    python benchmarks/classic_control.py --eval-every 2500 --out results/classic

It writes ``OUT/classic_control.json`` (per env and method: step axis, per-seed
returns, mean and standard error, final mean return, first step where the seed-mean
return reaches the env's threshold or null, wall-clock seconds per run),
``OUT/classic_control.png`` (one panel per env, mean return +- s.e. against env steps)
and ``OUT/classic_control.md`` (the summary table).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import queue
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from zoo.cli import positive_int

NAME = "classic_control"


@dataclass(frozen=True)
class EnvSetting:
    """An environment of the benchmark: its solved threshold and default budget."""

    threshold: float
    timesteps: int


ENVS: dict[str, EnvSetting] = {
    "CartPole-v1": EnvSetting(threshold=475.0, timesteps=100_000),
    "Acrobot-v1": EnvSetting(threshold=-100.0, timesteps=100_000),
}

# One setting for both envs. A short exploration (seeds 0-1, 100k steps) compared
# batch_size 2 and 4 contexts per iteration (and K = 4 candidates on Acrobot): with 2
# contexts both TPO and GRPO reached the threshold 5k-30k steps earlier on both envs in
# every pair tried; K = 4 was much slower on Acrobot. See SETTING_NOTES.
GROUPED = dict(
    batch_size=2, n_candidates=8, logp_reduction="mean", learning_rate=1e-3, n_epochs=4, group_mode="sequence"
)
SETTING_NOTES = (
    "TPO/GRPO: one setting for both envs, chosen in a brief exploration on seeds 0-1 at 100k "
    "steps: batch_size 2 reached the threshold earlier than batch_size 4 (first greedy eval >= "
    "threshold, TPO CartPole 25k vs 55k and 40k vs 45k, TPO Acrobot 35k vs 50k and 35k vs 60k, "
    "GRPO CartPole 35k vs 65k, GRPO Acrobot 35k vs 55k and 40k vs 55k); n_candidates 4 (batch 4) "
    "on Acrobot only passed -100 at 90k. logp_reduction 'mean': with 'sum' (the paper's default) "
    "group softmaxes over episodes of hundreds of steps are near one-hot and learning is much slower."
)
METHOD_SETTINGS: dict[str, dict[str, Any]] = {
    "tpo": dict(GROUPED, eta=1.0),
    "grpo": dict(GROUPED, clip_range=0.2, beta=0.04),
    "ppo": {},  # Stable-Baselines3 defaults
}
METHOD_LABELS = {"tpo": "TPO", "grpo": "GRPO", "ppo": "PPO (SB3 defaults)"}
EVAL_SEED_OFFSET = 10_000
LAST_EVALS = 5  # evaluation points averaged in "last_evals_mean_return"


# ----------------------------------------------------------------------------- one run


def make_model(method: str, env_id: str, seed: int, settings: dict[str, Any]):
    """The agent of ``method`` on ``env_id`` with ``settings`` (its constructor kwargs)."""
    if method == "ppo":
        from stable_baselines3 import PPO

        return PPO("MlpPolicy", env_id, seed=seed, **settings)
    from tpo_agents import GRPO, TPO

    cls = {"tpo": TPO, "grpo": GRPO}[method]
    return cls("MlpPolicy", env_id, seed=seed, **settings)


def eval_grid(timesteps: int, eval_every: int) -> list[int]:
    """The shared step axis: 0, M, 2M, ... and ``timesteps`` itself."""
    grid = list(range(0, timesteps, eval_every)) + [timesteps]
    return grid


def _make_callback(eval_env, grid: list[int], n_eval_episodes: int, report):
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.evaluation import evaluate_policy

    class GridEvalCallback(BaseCallback):
        """Evaluates the greedy policy whenever ``num_timesteps`` crosses a grid point.

        A grid point crossed mid-rollout is evaluated right there (for every method the
        policy is the one of the last completed update). Training stops at the last point.
        """

        def __init__(self) -> None:
            super().__init__()
            self.returns: list[float] = []

        def _evaluate(self) -> None:
            mean, _ = evaluate_policy(
                self.model, eval_env, n_eval_episodes=n_eval_episodes, deterministic=True
            )
            while len(self.returns) < len(grid) and self.num_timesteps >= grid[len(self.returns)]:
                self.returns.append(float(mean))
                report(grid[len(self.returns) - 1], float(mean))

        def _on_training_start(self) -> None:
            if grid[0] <= self.num_timesteps:
                self._evaluate()

        def _on_step(self) -> bool:
            if len(self.returns) < len(grid) and self.num_timesteps >= grid[len(self.returns)]:
                self._evaluate()
            return len(self.returns) < len(grid)

    return GridEvalCallback()


def run_one(job: dict[str, Any], events=None) -> dict[str, Any]:
    """Train one (env, method, seed) run and return its eval curve and timings.

    ``events``: an optional queue receiving ``(job_id, step, mean_return)`` per evaluation.
    """
    import gymnasium as gym
    import torch
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv

    torch.set_num_threads(1)
    grid = eval_grid(job["timesteps"], job["eval_every"])
    eval_env = DummyVecEnv([lambda: Monitor(gym.make(job["env_id"]))])
    eval_env.seed(job["seed"] + EVAL_SEED_OFFSET)

    def report(step: int, mean_return: float) -> None:
        if events is not None:
            events.put((job["id"], step, mean_return))

    t0 = time.perf_counter()
    model = make_model(job["method"], job["env_id"], job["seed"], job["settings"])
    callback = _make_callback(eval_env, grid, job["n_eval_episodes"], report)
    model.learn(job["timesteps"], callback=callback)
    seconds = time.perf_counter() - t0
    eval_env.close()
    model.get_env().close()
    if len(callback.returns) != len(grid):
        raise RuntimeError(
            f"{job['id']}: training ended at {model.num_timesteps} steps with "
            f"{len(callback.returns)}/{len(grid)} evaluations"
        )
    return {
        "id": job["id"],
        "returns": callback.returns,
        "seconds": seconds,
        "num_timesteps": int(model.num_timesteps),
    }


def _init_worker() -> None:
    import torch

    torch.set_num_threads(1)


# --------------------------------------------------------------------------- summaries


def standard_error(values: np.ndarray) -> np.ndarray:
    """Standard error of the mean over seeds (axis 0); 0 with a single seed."""
    if values.shape[0] < 2:
        return np.zeros(values.shape[1:])
    return values.std(axis=0, ddof=1) / math.sqrt(values.shape[0])


def first_step_at_least(curve: np.ndarray, steps: list[int], threshold: float) -> int | None:
    """First step whose return is >= ``threshold``, or None."""
    hit = np.flatnonzero(np.asarray(curve) >= threshold)
    return int(steps[hit[0]]) if hit.size else None


def summarize_method(
    steps: list[int], runs: list[dict], seeds: list[int], threshold: float, settings: dict
) -> dict:
    """Per-seed curves, mean +- s.e., final return, steps to threshold, wall time."""
    returns = np.array([r["returns"] for r in runs], dtype=float)
    mean, se = returns.mean(0), standard_error(returns)
    # One evaluation (10 episodes) is noisy: also average each seed's last LAST_EVALS points.
    n_last = min(LAST_EVALS, len(steps))
    last = returns[:, -n_last:].mean(1, keepdims=True)
    return {
        "settings": settings,
        "seeds": seeds,
        "steps": steps,
        "returns": returns.tolist(),
        "mean": mean.tolist(),
        "se": se.tolist(),
        "final_mean_return": float(mean[-1]),
        "final_se": float(se[-1]),
        "last_evals": n_last,
        "last_evals_mean_return": float(last.mean()),
        "last_evals_se": float(standard_error(last)[0]),
        "best_mean_return": float(mean.max()),
        "steps_to_threshold": first_step_at_least(mean, steps, threshold),
        "steps_to_threshold_per_seed": [first_step_at_least(r, steps, threshold) for r in returns],
        "seconds": [round(r["seconds"], 2) for r in runs],
        "trained_timesteps": [r["num_timesteps"] for r in runs],
    }


def markdown_table(result: dict) -> str:
    """The summary page: config line and one row per env and method."""
    cfg = result["config"]
    lines = [
        "# Classic control: TPO and GRPO vs SB3 PPO at equal env steps",
        "",
        f"{cfg['n_seeds']} seeds; greedy policy evaluated on {cfg['n_eval_episodes']} episodes every "
        f"{cfg['eval_every']} env steps. PPO: Stable-Baselines3 defaults.",
        "",
        *[
            f"- {METHOD_LABELS.get(k, k)} settings: `{json.dumps(v)}`"
            for k, v in cfg["method_settings"].items()
            if v
        ],
        "",
        "| env | method | env steps | return at step 0 | final return (mean +- s.e.) | "
        f"mean of last {LAST_EVALS} evals (+- s.e.) | best mean return | "
        "steps to threshold (seed mean) | seeds reaching threshold | wall s per run |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for env_id, env in result["envs"].items():
        for key, m in env["methods"].items():
            reached = sum(s is not None for s in m["steps_to_threshold_per_seed"])
            to_th = m["steps_to_threshold"]
            lines.append(
                f"| {env_id} | {METHOD_LABELS.get(key, key)} | {m['steps'][-1]} | {m['mean'][0]:.1f} | "
                f"{m['final_mean_return']:.1f} +- {m['final_se']:.1f} | "
                f"{m['last_evals_mean_return']:.1f} +- {m['last_evals_se']:.1f} | "
                f"{m['best_mean_return']:.1f} | "
                f"{'-' if to_th is None else to_th} (>= {env['threshold']:g}) | {reached}/{len(m['seeds'])} | "
                f"{np.mean(m['seconds']):.0f} |"
            )
    lines += [
        "",
        "Returns are greedy (deterministic) evaluation returns. Steps to threshold: the first "
        "evaluation step whose seed-mean return reaches the threshold (step 0 is the untrained "
        "policy, whose greedy return can already be high by chance).",
        "",
        f"Total wall time: {result['total_seconds']:.0f} s with {cfg['workers']} worker process(es).",
    ]
    return "\n".join(lines) + "\n"


def plot(result: dict, path: Path) -> None:
    """One panel per env: mean return +- s.e. against env steps, one line per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    envs = result["envs"]
    fig, axes = plt.subplots(1, len(envs), figsize=(5.5 * len(envs), 4), squeeze=False)
    for ax, (env_id, env) in zip(axes[0], envs.items()):
        for key, m in env["methods"].items():
            steps, mean, se = np.asarray(m["steps"]), np.asarray(m["mean"]), np.asarray(m["se"])
            (line,) = ax.plot(steps, mean, label=METHOD_LABELS.get(key, key))
            ax.fill_between(steps, mean - se, mean + se, alpha=0.2, color=line.get_color())
        ax.axhline(env["threshold"], color="grey", lw=0.8, ls=":")
        ax.set_title(f"{env_id} ({result['config']['n_seeds']} seeds, mean +- s.e.)")
        ax.set_xlabel("env steps")
        ax.set_ylabel("greedy eval return")
        ax.legend(loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_outputs(result: dict, out_dir: Path) -> dict[str, Path]:
    """``classic_control.json``, ``.png`` and ``.md`` in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {ext: out_dir / f"{NAME}.{ext}" for ext in ("json", "png", "md")}
    tmp = paths["json"].with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result, indent=2))
    os.replace(tmp, paths["json"])
    plot(result, paths["png"])
    paths["md"].write_text(markdown_table(result))
    return paths


# ------------------------------------------------------------------------------ driver


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python benchmarks/classic_control.py", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--envs", nargs="+", default=list(ENVS), choices=list(ENVS), help="environments"
    )
    parser.add_argument(
        "--methods", nargs="+", default=list(METHOD_SETTINGS), choices=list(METHOD_SETTINGS)
    )
    parser.add_argument(
        "--seeds", type=positive_int, default=3, help="seeds 0..N-1 per env and method"
    )
    parser.add_argument(
        "--timesteps", type=positive_int, default=None, help="env steps per run (all envs)"
    )
    parser.add_argument(
        "--eval-every", type=positive_int, default=5000, help="env steps between evaluations"
    )
    parser.add_argument(
        "--eval-episodes", type=positive_int, default=10, help="episodes per evaluation"
    )
    parser.add_argument(
        "--batch-size",
        type=positive_int,
        default=None,
        help=f"contexts per iteration for TPO and GRPO (default {GROUPED['batch_size']})",
    )
    parser.add_argument(
        "--workers", type=int, default=2, help="parallel processes (0: run in this process)"
    )
    parser.add_argument("--out", type=Path, default=Path("results"), help="output folder")
    parser.add_argument("--quiet", action="store_true", help="no progress output")
    return parser


def method_settings(method: str, args: argparse.Namespace) -> dict[str, Any]:
    """Constructor kwargs of ``method``: ``METHOD_SETTINGS`` with the CLI overrides."""
    settings = dict(METHOD_SETTINGS[method])
    if method != "ppo" and args.batch_size is not None:
        settings["batch_size"] = args.batch_size
    return settings


def _jobs(args: argparse.Namespace) -> list[dict[str, Any]]:
    jobs = []
    # Longest-first is unknown in advance; interleave methods so PPO and the grouped agents
    # share the workers evenly.
    for env_id in args.envs:
        timesteps = args.timesteps or ENVS[env_id].timesteps
        for seed in range(args.seeds):
            for method in args.methods:
                jobs.append(
                    {
                        "id": f"{env_id}/{method}/seed{seed}",
                        "env_id": env_id,
                        "method": method,
                        "seed": seed,
                        "timesteps": timesteps,
                        "eval_every": min(args.eval_every, timesteps),
                        "n_eval_episodes": args.eval_episodes,
                        "settings": method_settings(method, args),
                    }
                )
    return jobs


def _run_jobs(jobs: list[dict], workers: int, quiet: bool) -> dict[str, dict]:
    """Run every job (in ``workers`` processes), showing env-step progress; results by id."""
    from tqdm import tqdm

    by_id = {j["id"]: j for j in jobs}
    done_steps = dict.fromkeys(by_id, 0)
    bar = tqdm(
        total=sum(j["timesteps"] for j in jobs),
        unit="step",
        unit_scale=True,
        disable=quiet,
        desc=f"{len(jobs)} runs",
        file=sys.stdout,
    )

    def on_event(job_id: str, step: int, mean_return: float) -> None:
        bar.update(step - done_steps[job_id])
        done_steps[job_id] = step
        bar.set_postfix_str(f"{job_id} @ {step}: {mean_return:.1f}", refresh=False)

    def on_done(res: dict) -> None:
        job = by_id[res["id"]]
        if not quiet:
            tqdm.write(
                f"done {res['id']}: final greedy return {res['returns'][-1]:.1f} after {job['timesteps']} steps "
                f"({res['seconds']:.0f} s)",
                file=sys.stdout,
            )

    results: dict[str, dict] = {}
    if workers <= 0:
        import torch

        previous = torch.get_num_threads()
        try:
            for job in jobs:
                res = run_one(job, _Callback(on_event))
                results[res["id"]] = res
                on_done(res)
        finally:
            torch.set_num_threads(previous)
        bar.close()
        return results

    import multiprocessing as mp

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")
    ctx = mp.get_context("spawn")
    with (
        ctx.Manager() as manager,
        ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker) as pool,
    ):
        events = manager.Queue()
        pending = {pool.submit(run_one, job, events) for job in jobs}
        try:
            while pending:
                finished, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
                _drain(events, on_event)
                for fut in finished:
                    res = fut.result()
                    results[res["id"]] = res
                    on_done(res)
            _drain(events, on_event)
        except BaseException:
            for fut in pending:
                fut.cancel()
            raise
    bar.close()
    return results


class _Callback:
    """An in-process stand-in for the event queue (``put`` calls a function)."""

    def __init__(self, fn) -> None:
        self.fn = fn

    def put(self, item) -> None:
        self.fn(*item)


def _drain(events, on_event) -> None:
    while True:
        try:
            item = events.get_nowait()
        except queue.Empty:
            return
        on_event(*item)


def main(argv: list[str] | None = None) -> dict:
    """Run the benchmark from command-line arguments; write and return the result."""
    args = build_parser().parse_args(argv)
    jobs = _jobs(args)
    t0 = time.perf_counter()
    runs = _run_jobs(jobs, args.workers, args.quiet)
    total = time.perf_counter() - t0
    seeds = list(range(args.seeds))
    result: dict[str, Any] = {
        "benchmark": NAME,
        "config": {
            "envs": args.envs,
            "methods": args.methods,
            "n_seeds": args.seeds,
            "timesteps": {e: args.timesteps or ENVS[e].timesteps for e in args.envs},
            "eval_every": args.eval_every,
            "n_eval_episodes": args.eval_episodes,
            "eval_deterministic": True,
            "eval_seed_offset": EVAL_SEED_OFFSET,
            "workers": args.workers,
            "torch_threads_per_run": 1,
            "method_settings": {m: method_settings(m, args) for m in args.methods},
            "setting_notes": SETTING_NOTES,
            "ppo_baseline": "stable_baselines3.PPO('MlpPolicy', env_id, seed=seed) with SB3 defaults",
        },
        "envs": {},
        "total_seconds": round(total, 1),
    }
    for env_id in args.envs:
        threshold = ENVS[env_id].threshold
        env_jobs = [j for j in jobs if j["env_id"] == env_id]
        steps = eval_grid(env_jobs[0]["timesteps"], env_jobs[0]["eval_every"])
        methods = {}
        for method in args.methods:
            method_runs = [runs[f"{env_id}/{method}/seed{s}"] for s in seeds]
            methods[method] = summarize_method(
                steps, method_runs, seeds, threshold, method_settings(method, args)
            )
        result["envs"][env_id] = {
            "threshold": threshold,
            "timesteps": steps[-1],
            "methods": methods,
        }
    paths = write_outputs(result, args.out)
    if not args.quiet:
        print(paths["md"].read_text())
        print("wrote " + ", ".join(str(p) for p in paths.values()))
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
