"""The harness of the equal-env-step benchmarks (``benchmarks.classic_control``,
``benchmarks.gym_defaults``).

Both train N runs (env x method x seed) to the same env-step budget, in worker processes
(``zoo.jobs.sweep``: one torch thread each, at most ``workers`` at a time; one worker runs
them in this process), evaluate the greedy policy on a separately seeded eval env at steps
0, M, 2M, ..., N (:func:`make_eval_callback`, which also stops training at N), summarize
the per-seed curves per env and method (:func:`summarize_method`) and write the result as
``NAME.json``, ``NAME.png`` (:func:`plot_curves`) and ``NAME.md`` (:func:`write_outputs`).

A benchmark supplies what differs: how a :class:`Run`'s model and eval env are built
(``build(run) -> (model, eval_env)``, given to :func:`train_run` by its job function) and
its markdown page.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tpo_agents.atomic import atomic_path
from zoo.jobs.results import write_json_atomic
from zoo.jobs.sweep import run_sweep

__all__ = [
    "EVAL_SEED_OFFSET",
    "LAST_EVALS",
    "Run",
    "eval_grid",
    "first_step_at_least",
    "make_eval_callback",
    "plot_curves",
    "run_all",
    "standard_error",
    "summarize_method",
    "train_run",
    "write_outputs",
]

EVAL_SEED_OFFSET = 10_000
"""The eval env of a run with seed ``s`` is seeded ``s + EVAL_SEED_OFFSET``."""
LAST_EVALS = 5
"""Evaluation points averaged in ``last_evals_mean_return`` (one evaluation is noisy)."""


def eval_grid(timesteps: int, eval_every: int) -> list[int]:
    """The shared step axis: 0, M, 2M, ... and ``timesteps`` itself."""
    return list(range(0, timesteps, eval_every)) + [timesteps]


def env_interactions(model) -> int:
    """Every env transition ``model`` made: its ``num_timesteps`` plus, for agents that play
    candidates from copies of the state (``branch`` groups), those simulation steps
    (``env_steps_total``). Budgets and evaluation grids of the benchmarks count these, so a
    method that simulates pays for it as a user who pays for env steps would."""
    return int(getattr(model, "env_steps_total", model.num_timesteps))


def make_eval_callback(
    eval_env, grid: Sequence[int], n_eval_episodes: int, report: Callable[[int, float], None] | None = None
):
    """An SB3 callback evaluating the greedy policy on ``eval_env`` at the steps of ``grid``.

    Its ``returns`` list gets one mean return (over ``n_eval_episodes`` episodes,
    ``deterministic=True``) per grid point; ``report(step, mean_return)`` is called with
    each. The grid is in env interactions of every kind (:func:`env_interactions`). A grid
    point crossed mid-rollout is evaluated right there (for every method the policy is the
    one of the last completed update). Training stops at the last point.
    """
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.evaluation import evaluate_policy

    class GridEvalCallback(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.returns: list[float] = []

        def _due(self) -> bool:
            return len(self.returns) < len(grid) and env_interactions(self.model) >= grid[len(self.returns)]

        def _evaluate(self) -> None:
            mean, _ = evaluate_policy(self.model, eval_env, n_eval_episodes=n_eval_episodes, deterministic=True)
            while self._due():
                self.returns.append(float(mean))
                if report is not None:
                    report(grid[len(self.returns) - 1], float(mean))

        def _on_training_start(self) -> None:
            if self._due():
                self._evaluate()

        def _on_step(self) -> bool:
            if self._due():
                self._evaluate()
            return len(self.returns) < len(grid)

    return GridEvalCallback()


# ----------------------------------------------------------------------------- runs


@dataclass
class Run:
    """One (env, method, seed) run of a benchmark: a ``zoo.jobs.sweep`` job.

    ``benchmark``: the benchmark's name (its cache folder); ``hyperparameters``: what the
    method is built with (JSON), part of the run's config (:meth:`spec`).
    """

    benchmark: str
    env: str
    method: str
    seed: int
    timesteps: int
    eval_every: int
    n_eval_episodes: int
    hyperparameters: dict = field(default_factory=dict)
    record_fields = ("spec", "returns", "seconds", "num_timesteps")

    @property
    def name(self) -> str:
        return f"{self.env}__{self.method}__seed{self.seed}"

    @property
    def grid(self) -> list[int]:
        """The run's evaluation steps (:func:`eval_grid`)."""
        return eval_grid(self.timesteps, self.eval_every)

    @property
    def episodes(self) -> int:
        """Evaluation points (what the sweep's progress display counts)."""
        return len(self.grid)

    def spec(self) -> dict:
        """The run's config: a cached run is reused only when it holds the same."""
        return {
            "env": self.env,
            "method": self.method,
            "seed": self.seed,
            "timesteps": self.timesteps,
            "eval_every": self.eval_every,
            "n_eval_episodes": self.n_eval_episodes,
            "eval_seed_offset": EVAL_SEED_OFFSET,
            "hyperparameters": self.hyperparameters,
        }

    def cache_path(self, cache: Path) -> Path:
        """The run's record under the cache root ``cache``."""
        return Path(cache) / self.benchmark / f"{self.name}.json"


def train_run(
    run: Run,
    build: Callable[[Run], tuple[Any, Any]],
    progress: Any = None,
    extra: Callable[[Any], dict] | None = None,
) -> dict[str, Any]:
    """Build ``run``'s model and eval env (``build(run)``), train to the budget of env
    interactions of every kind with :func:`make_eval_callback`; ``{"returns", "seconds",
    "num_timesteps", "env_steps_total"}`` plus ``extra(model)``.

    ``progress``: None or the sweep's mapping, set to the number of evaluations done.
    Raises RuntimeError when training ended before the last evaluation point.
    """
    grid = run.grid

    def report(step: int, mean_return: float) -> None:
        if progress is not None:
            try:
                progress[run.name] = grid.index(step) + 1
            except Exception:  # progress display only: never fail a run for it
                pass

    started = time.perf_counter()
    model, eval_env = build(run)
    callback = make_eval_callback(eval_env, grid, run.n_eval_episodes, report)
    try:
        model.learn(run.timesteps, callback=callback)
    finally:
        eval_env.close()
        model.get_env().close()
    if len(callback.returns) < len(grid):
        raise RuntimeError(
            f"{run.name}: stopped at {env_interactions(model)} env interactions, "
            f"{len(callback.returns)}/{len(grid)} evaluations"
        )
    record = {
        "returns": callback.returns,
        "seconds": time.perf_counter() - started,
        "num_timesteps": int(model.num_timesteps),
        "env_steps_total": env_interactions(model),
    }
    if extra is not None:
        record.update(extra(model))
    return record


def run_all(
    runs: Sequence[Run],
    job: Callable[[Run, Any], dict],
    cache: Path | None,
    workers: int,
    quiet: bool = False,
    desc: str = "",
    info: dict | None = None,
) -> dict[str, dict]:
    """Every run's record by name: ``job(run, progress)`` through ``zoo.jobs.sweep.run_sweep``
    (``workers`` processes, one torch thread each; ``workers <= 1``: in this process),
    cached under the cache root ``cache`` (None: no cache). ``job`` must be a module-level
    function (worker processes import it)."""
    return run_sweep(
        runs,
        job,
        cache,
        workers=max(1, workers),
        progress=not quiet,
        desc=desc,
        describe=lambda run: run.name.replace("__", " "),
        info=info,
    )


# ------------------------------------------------------------------------ summaries


def standard_error(values: np.ndarray) -> np.ndarray:
    """Standard error of the mean over seeds (axis 0); 0 with a single seed."""
    if values.shape[0] < 2:
        return np.zeros(values.shape[1:])
    return values.std(axis=0, ddof=1) / math.sqrt(values.shape[0])


def first_step_at_least(curve: np.ndarray, steps: list[int], threshold: float) -> int | None:
    """First step whose return is >= ``threshold``, or None."""
    hit = np.flatnonzero(np.asarray(curve) >= threshold)
    return int(steps[hit[0]]) if hit.size else None


def summarize_method(steps: list[int], runs: list[dict], seeds: list[int], threshold: float, settings: dict) -> dict:
    """Per-seed curves, mean +- s.e., final return, mean of the last evaluations, steps to
    threshold, wall time, from the records of one method's seeds on one env."""
    returns = np.array([r["returns"] for r in runs], dtype=float)
    mean, se = returns.mean(0), standard_error(returns)
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
        "last_evals_per_seed": last[:, 0].tolist(),
        # The least stable seed: a relapse late in a run shows here even when the mean hides it.
        "worst_seed_last_evals": float(last.min()),
        "best_mean_return": float(mean.max()),
        "steps_to_threshold": first_step_at_least(mean, steps, threshold),
        "steps_to_threshold_per_seed": [first_step_at_least(r, steps, threshold) for r in returns],
        "seconds": [round(r["seconds"], 2) for r in runs],
        "trained_timesteps": [r["num_timesteps"] for r in runs],
        # Records from before interactions were counted (no branch runs among them) hold
        # num_timesteps only, which then is every interaction.
        "env_steps_total": [r.get("env_steps_total", r["num_timesteps"]) for r in runs],
    }


# --------------------------------------------------------------------------- output


def plot_curves(result: dict, path: Path, labels: Mapping[str, str], max_cols: int = 3) -> None:
    """One panel per env of ``result["envs"]`` (at most ``max_cols`` a row): the greedy
    return's seed mean +- s.e. against env steps, a line per method with finished seeds,
    and the env's threshold; written to ``path`` atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    envs = result["envs"]
    cols = min(max_cols, max(1, len(envs)))
    rows = math.ceil(max(1, len(envs)) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.6 * rows), squeeze=False)
    for ax in axes.flat[len(envs):]:
        ax.set_visible(False)
    for ax, (env_name, env) in zip(axes.flat, envs.items()):
        for key, m in env["methods"].items():
            if m["seeds"]:
                x, mean, se = (np.asarray(m[k], dtype=float) for k in ("steps", "mean", "se"))
                color = ax.plot(x, mean, label=labels.get(key, key))[0].get_color()
                ax.fill_between(x, mean - se, mean + se, color=color, alpha=0.2)
        ax.axhline(env["threshold"], color="grey", lw=0.8, ls=":")
        ax.set(title=env_name, xlabel="env steps", ylabel="greedy eval return")
        # 250000, 500000, ... overlap at this width; 250k does not.
        ax.xaxis.set_major_formatter(FuncFormatter(_steps_label))
        if ax.get_legend_handles_labels()[0]:  # (no line where every run failed)
            ax.legend(loc="best", fontsize="small")
    fig.suptitle(f"{result['config']['n_seeds']} seeds, mean +- s.e.")
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)


def _steps_label(x: float, _pos: int) -> str:
    """An axis tick of env steps: ``250k``, ``1.5M``, ``500``."""
    for scale, suffix in ((1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:g}{suffix}"
    return f"{x:g}"


def write_outputs(
    result: dict, out_dir: Path, name: str, markdown: str, labels: Mapping[str, str]
) -> dict[str, Path]:
    """``NAME.json`` (``result``), ``NAME.png`` (:func:`plot_curves` with the method
    ``labels``) and ``NAME.md`` (the text ``markdown``) in ``out_dir``, each written
    atomically; their paths by extension."""
    paths = {ext: Path(out_dir) / f"{name}.{ext}" for ext in ("json", "png", "md")}
    write_json_atomic(paths["json"], result)
    plot_curves(result, paths["png"], labels)
    with atomic_path(paths["md"]) as tmp:
        tmp.write_text(markdown)
    return paths
