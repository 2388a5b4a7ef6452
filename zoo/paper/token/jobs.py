"""One Token Reversal job: its spec, its agent, the per-iteration record, and the summaries.

A :class:`Job` trains one agent (a method in one setting with one seed) for ``episodes``
iterations (one iteration = one rollout batch and its epochs; the paper's "episodes" and
"steps"). :func:`run_job` returns its record, which the sweep caches as
``CACHE/<experiment>/<job>.json``; per iteration it holds

* ``error``: ``1 - mean(model.last_batch.behaviour_returns())`` of the training batch (bag:
  fraction of wrong tokens; sequential: 1 - correct-prefix fraction; terminal: the
  exact-match error), and
* ``grad_norm``: ``model.last_train_stats["grad_norm"]`` (the paper's Figure 10 trace),
  plus ``zero_variance_frac`` for the grouped methods.

:func:`summarize_jobs` turns the records of one (method, setting) into its summary.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from zoo.jobs.results import standard_error, summarize
from zoo.jobs.sweep import code_version
from zoo.paper.token.methods import agent_config

FINAL_WINDOW = 50
"""``final_error`` is the mean error over this many last iterations."""
TAKEOFF_ERROR = 0.5
"""Take-off iteration: the first iteration whose training-batch error is below this."""
GRAD_WINDOW = 50
"""``grad_norm_first/last_per_seed``: a seed's median gradient norm over this many first / last
iterations (the median, because one early iteration can spike by orders of magnitude);
``grad_norm_last_mean_per_seed``: the mean over the last ones (which the spikes do move)."""

RECORD_FIELDS: tuple[str, ...] = (
    "spec", "agent", "error", "grad_norm", "takeoff_iteration", "steps_to_1pct", "seconds",
    "seconds_per_iteration",
)
"""The fields of a job's record that :func:`summarize_jobs` reads (``zero_variance_frac`` and
``code_version`` are optional)."""


@dataclass(frozen=True)
class Job:
    """One training run: a method in one setting with one seed."""

    experiment: str  # cache folder (shared by both --match modes)
    method: str  # the stored name (zoo.paper.token.methods.record_key), e.g. "ppo"
    setting: str  # display label, e.g. "H=8"
    tag: str  # file-name form of the setting, e.g. "H8" (plus "-im" when interaction-matched)
    seed: int
    episodes: int
    env: dict  # reward, length, vocab_size, target
    agent: dict  # constructor overrides beyond the method's own

    record_fields: ClassVar[tuple[str, ...]] = RECORD_FIELDS
    """What a cache file must hold to be reused (:func:`zoo.jobs.sweep.check_cached`)."""

    @property
    def name(self) -> str:
        return f"{self.method}__{self.tag}__seed{self.seed}"

    def spec(self) -> dict:
        """What a cached result must match to be reused."""
        return {k: v for k, v in asdict(self).items() if k != "experiment"}

    def cache_path(self, cache: Path) -> Path:
        return Path(cache) / self.experiment / f"{self.name}.json"


OPTIMIZERS = ("substrate", "adamw")
"""``--optimizer``: the substrate's own (Muon + AdamW) or plain AdamW (weight decay 0) on
every parameter, at ``--learning-rate``."""


def make_agent(job: Job):
    """The agent of ``job`` on its Token Reversal env (imports torch lazily)."""
    import gymnasium as gym

    import tpo_agents
    import tpo_gym  # noqa: F401  (registers the envs)

    cls_name, overrides = agent_config(job.method)
    cls = getattr(tpo_agents, cls_name)
    env_kwargs = {k: v for k, v in job.env.items() if k != "reward"}
    env = gym.make(f"TokenReversal-{job.env['reward']}-v0", **env_kwargs)
    agent = dict(job.agent)
    if "policy_kwargs" in agent:
        agent["policy_kwargs"] = _policy_kwargs(agent["policy_kwargs"])
    return cls("TransformerPolicy", env, seed=job.seed, **{**overrides, **agent})


def _policy_kwargs(kwargs: Mapping[str, Any]) -> dict:
    """TransformerPolicy keywords from a job's JSON form (``optimizer: "adamw"`` names the
    optimizer class, which a cached spec cannot hold)."""
    import torch

    kwargs = dict(kwargs)
    name = kwargs.pop("optimizer", "substrate")
    if name == "adamw":
        kwargs.update(optimizer_class=torch.optim.AdamW, optimizer_kwargs={"weight_decay": 0.0})
    elif name != "substrate":
        raise ValueError(f"optimizer must be one of {OPTIMIZERS}; got {name!r}")
    return kwargs


def _iteration_recorder(episodes: int, report: Callable[[int], None] | None):
    """An SB3 callback that records each iteration and stops after ``episodes`` of them."""
    from stable_baselines3.common.callbacks import BaseCallback

    class IterationRecorder(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.error: list[float] = []
            self.stats: list[dict[str, float]] = []
            self.rollouts = 0

        def _record_stats(self) -> None:
            if len(self.stats) < self.rollouts:
                self.stats.append(dict(self.model.last_train_stats))

        def _on_rollout_start(self) -> None:
            self._record_stats()  # the previous iteration has been trained by now
            if report is not None and self.rollouts and self.rollouts % 5 == 0:
                report(self.rollouts)

        def _on_rollout_end(self) -> None:
            returns = self.model.last_batch.behaviour_returns()
            # Clipped: float32 sums of c_t / H can exceed 1 by an ulp (error -1e-7).
            self.error.append(min(1.0, max(0.0, 1.0 - float(returns.float().mean()))))
            self.rollouts += 1

        def _on_step(self) -> bool:
            # Reached on the first env step of the rollout after the last trained one.
            return self.rollouts < episodes

        def _on_training_end(self) -> None:
            self._record_stats()

    return IterationRecorder()


def first_iteration_below(curve: Sequence[float], threshold: float) -> int | None:
    """1-based index of the first entry strictly below ``threshold`` (None: never)."""
    below = np.flatnonzero(np.asarray(curve, dtype=float) < threshold)
    return int(below[0]) + 1 if below.size else None


def run_job(job: Job, progress: Any = None) -> dict:
    """Train ``job`` and return its per-iteration record (what the cache file holds).

    ``progress``: an optional mapping; ``progress[job.name]`` is set to the iteration
    count every few iterations (a ``Manager().dict()`` proxy across processes).
    """
    report = None
    if progress is not None:

        def report(iteration: int) -> None:
            try:
                progress[job.name] = iteration
            except Exception:  # progress display only: never fail a run for it
                pass

    version = code_version()  # hashed before the agent modules are used
    model = make_agent(job)
    recorder = _iteration_recorder(job.episodes, report)
    t0 = time.perf_counter()
    model.learn(total_timesteps=10**15, callback=recorder)
    seconds = time.perf_counter() - t0
    error = recorder.error[: job.episodes]
    stats = recorder.stats[: job.episodes]
    if len(error) != job.episodes or len(stats) != job.episodes:
        raise RuntimeError(f"{job.name}: recorded {len(error)} iterations, expected {job.episodes}")
    record = {
        "spec": job.spec(),
        "agent": {
            "class": type(model).__name__,
            "group_mode": model.resolve_group_mode(),
            "batch_size": model.batch_size,
            "n_candidates": model.n_candidates,
            "n_epochs": model.n_epochs,
            "learning_rate": float(model.lr_schedule(1.0)),
            "n_envs": model.n_envs,
            "substrate": model.policy.arch.get("substrate"),
            "init": model.policy.arch.get("init", "flax (the artifact's)"),
            "optimizer": type(model.policy.optimizer).__name__,
        },
        "error": error,
        "grad_norm": [s.get("grad_norm", math.nan) for s in stats],
        "takeoff_iteration": first_iteration_below(error, TAKEOFF_ERROR),
        "steps_to_1pct": first_iteration_below(error, 0.01),
        "seconds": seconds,
        "seconds_per_iteration": seconds / job.episodes,
        "code_version": version,
    }
    if all("zero_variance_frac" in s for s in stats):
        record["zero_variance_frac"] = [s["zero_variance_frac"] for s in stats]
    model.env.close()
    return record


def summarize_jobs(jobs: Sequence[Job], records: Mapping[str, dict], episodes: int) -> dict:
    """Per-(method, setting) summaries ``{method: {setting: summary}}`` of the job records."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for job in jobs:
        groups.setdefault((job.method, job.setting), []).append(records[job.name])
    steps = list(range(1, episodes + 1))
    methods: dict[str, dict] = {}
    for (method, setting), recs in groups.items():
        error = np.array([r["error"] for r in recs], dtype=float)
        grad = np.array([r["grad_norm"] for r in recs], dtype=float)
        summary = summarize(
            error, steps, thresholds=(0.01,), final_window=min(FINAL_WINDOW, episodes)
        )
        summary["curves"]["grad_norm_mean"] = grad.mean(0).tolist()
        summary["curves"]["grad_norm_se"] = standard_error(grad).tolist()
        if all("zero_variance_frac" in r for r in recs):
            zv = np.array([r["zero_variance_frac"] for r in recs], dtype=float)
            summary["curves"]["zero_variance_frac_mean"] = zv.mean(0).tolist()
        summary["final_error_per_seed"] = error[:, -min(FINAL_WINDOW, episodes) :].mean(1).tolist()
        # The paper's Table 3 value: the seed mean of the error at the last iteration.
        summary["last_iteration_error"] = float(error[:, -1].mean())
        summary["last_iteration_error_se"] = float(standard_error(error[:, -1]))
        summary["last_iteration_error_per_seed"] = error[:, -1].tolist()
        window = min(GRAD_WINDOW, episodes)
        summary["grad_norm_first_per_seed"] = np.median(grad[:, :window], axis=1).tolist()
        summary["grad_norm_last_per_seed"] = np.median(grad[:, -window:], axis=1).tolist()
        summary["grad_norm_last_mean_per_seed"] = grad[:, -window:].mean(1).tolist()
        summary["takeoff_iteration_per_seed"] = [r["takeoff_iteration"] for r in recs]
        summary["steps_to_1pct_per_seed"] = [r["steps_to_1pct"] for r in recs]
        summary["seconds"] = round(float(sum(r["seconds"] for r in recs)), 2)
        summary["seconds_per_iteration"] = float(
            np.mean([r["seconds_per_iteration"] for r in recs])
        )
        summary["agent"] = recs[0]["agent"]
        methods.setdefault(method, {})[setting] = summary
    return methods
