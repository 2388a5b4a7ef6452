"""Token Reversal studies: the paper's Tables 1, 2, 3, 5 and the sparse-reward diagnostics.

Every experiment is a grid of jobs, one per (method, setting, seed). A job trains one
agent for ``episodes`` iterations (one iteration = one rollout batch and its epochs; the
paper's "episodes" and "steps") and records, per iteration,

* ``error``: ``1 - mean(model._batch.behaviour_returns())`` of the training batch (bag:
  fraction of wrong tokens; sequential: 1 - correct-prefix fraction; terminal: the
  exact-match error), and
* ``grad_norm``: ``model.last_train_stats["grad_norm"]`` (the paper's Figure 10 trace),
  plus ``zero_variance_frac`` for the grouped methods.

Each finished job is cached as ``OUT/cache/<experiment>/<job>.json`` (written atomically),
so a rerun skips finished jobs and an interrupted sweep resumes. A cached job is reused
only if its stored spec (env, agent, episodes, seed) equals the requested one. Jobs run
on a :mod:`zoo.backends` backend: this machine's processes (``--backend local``) or one
Ray task per job (``--backend ray``); the cache is the same for both (:mod:`zoo.sweep`).

Summaries per (method, setting) use :func:`zoo.results.summarize` with ``final_error`` =
mean error over the last 50 iterations; the markdown puts the paper's number beside ours,
``ours (paper)``, in the paper's table layout (SPEC section 4).

Run through ``python -m zoo.reproduce NAME`` (see :mod:`zoo.reproduce`).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from zoo.results import METHOD_LABELS, standard_error, summarize, write_json_atomic
from zoo.sweep import code_version, load_cached, run_sweep  # noqa: F401  (re-exported)

FINAL_WINDOW = 50
"""``final_error`` is the mean error over this many last iterations."""
TAKEOFF_ERROR = 0.5
"""Take-off iteration: the first iteration whose training-batch error is below this."""

# ----------------------------------------------------------------------------- methods

METHODS: dict[str, tuple[str, dict[str, Any]]] = {
    "tpo_token": ("TPO", {}),
    "tpo": ("TPO", {}),
    "grpo_token": ("GRPO", {"beta": 0.04, "clip_range": 0.2}),
    # Sequence-level GRPO (terminal reward) as the paper's Table 3 ran it: one clipped ratio
    # and one KL term per completion, on whole-sequence log-probs.
    "grpo": ("GRPO", {"beta": 0.04, "clip_range": 0.2, "ratio_level": "sequence"}),
    "grpo_no_kl": ("GRPO", {"beta": 0.0, "clip_range": 0.2, "ratio_level": "sequence"}),
    "grpo_masked": (
        "GRPO",
        {"beta": 0.04, "clip_range": 0.2, "mask_zero_variance": True, "ratio_level": "sequence"},
    ),
    "dg": ("DG", {"n_epochs": 1}),
    "pg": ("PG", {}),
    "ppo": ("CriticFreePPO", {}),
    "tpo_no_anchor": ("TPO", {"anchor": False}),
    "group_pg": ("GroupPG", {}),
}
"""Method key -> (agent class name in :mod:`tpo_agents`, constructor overrides). Every
agent uses ``"TransformerPolicy"`` and the paper defaults (K = 8, B = 100, 4 epochs,
eta = 1, Muon lr 1e-3), which are the agents' own defaults."""

SINGLE_SAMPLE = frozenset({"dg", "pg", "ppo"})
"""Methods with one rollout per prompt: ``--match interactions`` gives them batch B*K
and learning rate x sqrt(K) (``interaction_matched=True``)."""

LABELS = {**METHOD_LABELS, "grpo_masked": "GRPO (zero-var. masked)"}


def label(method: str) -> str:
    return LABELS.get(method, method)


# -------------------------------------------------------------------------------- jobs


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
    method: str
    setting: str  # display label, e.g. "H=8"
    tag: str  # file-name form of the setting, e.g. "H8" (plus "-im" when interaction-matched)
    seed: int
    episodes: int
    env: dict  # reward, length, vocab_size, target
    agent: dict  # constructor overrides beyond the method's own

    record_fields: ClassVar[tuple[str, ...]] = RECORD_FIELDS
    """What a cache file must hold to be reused (:func:`zoo.sweep.check_cached`)."""

    @property
    def name(self) -> str:
        return f"{self.method}__{self.tag}__seed{self.seed}"

    def spec(self) -> dict:
        """What a cached result must match to be reused."""
        return {k: v for k, v in asdict(self).items() if k != "experiment"}

    def cache_path(self, out: Path) -> Path:
        return Path(out) / "cache" / self.experiment / f"{self.name}.json"


def make_agent(job: Job):
    """The agent of ``job`` on its Token Reversal env (imports torch lazily)."""
    import gymnasium as gym

    import tpo_agents
    import tpo_gym  # noqa: F401  (registers the envs)

    cls_name, overrides = METHODS[job.method]
    cls = getattr(tpo_agents, cls_name)
    env_kwargs = {k: v for k, v in job.env.items() if k != "reward"}
    env = gym.make(f"TokenReversal-{job.env['reward']}-v0", **env_kwargs)
    agent = dict(job.agent)
    if "policy_kwargs" in agent:
        agent["policy_kwargs"] = _policy_kwargs(agent["policy_kwargs"])
    return cls("TransformerPolicy", env, seed=job.seed, **{**overrides, **agent})


OPTIMIZERS = ("substrate", "adamw")
"""``--optimizer``: the substrate's own (Muon + AdamW) or plain AdamW (weight decay 0) on
every parameter, at ``--learning-rate``."""


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
            returns = self.model._batch.behaviour_returns()
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


def run_jobs(
    jobs: Sequence[Job],
    out: Path,
    workers: int = 1,
    progress: bool = True,
    desc: str = "",
    backend: str = "local",
    ray_address: str | None = None,
    info: dict | None = None,
) -> dict:
    """Run (or load from the cache) every job; ``{job.name: record}``.

    ``backend="local"``: ``workers > 1`` is a process pool (spawn), ``workers == 1`` runs
    in this process; ``backend="ray"``: one Ray task per job (see :mod:`zoo.backends`).
    Every job runs with one torch thread, so results do not depend on the backend or the
    number of workers. Finished jobs are cached as they complete (:func:`zoo.sweep.run_sweep`).
    """
    return run_sweep(
        jobs,
        run_job,
        Path(out),
        backend=backend,
        workers=workers,
        ray_address=ray_address,
        progress=progress,
        desc=desc,
        describe=lambda job: f"{job.method} {job.setting} seed {job.seed}",
        info=info,
    )


# ------------------------------------------------------------------------- experiments


@dataclass(frozen=True)
class Setting:
    """One column (or row) of a table: its label, file tag, env and agent overrides."""

    label: str
    tag: str
    env: dict
    agent: dict = field(default_factory=dict)


@dataclass(frozen=True)
class TokenExperiment:
    """A token-reversal experiment: methods x settings, and the paper's numbers.

    ``paper[metric][(method, setting_label)]`` holds the paper's value as printed
    (``metric``: ``"final_error"`` in %, or ``"steps_to_1pct"``).
    """

    name: str
    methods: tuple[str, ...]
    settings: Callable[[argparse.Namespace], list[Setting]]
    paper: dict[str, dict[tuple[str, str], str]]
    primary: str  # the metric the paper reports: "final_error" or "steps_to_1pct"
    notes: str
    default_episodes: int
    default_seeds: int = 10
    layout: str = "methods_rows"  # or "settings_rows"
    sweep: tuple[str, str] | None = None
    """For a sweep of one agent setting: (axis label, agent keyword); the figure then adds
    final error against it (the paper's K, epoch and eta figures)."""


def _env(reward: str, length: int, vocab_size: int = 2, target: str = "reverse_copy") -> dict:
    return {
        "reward": reward,
        "length": int(length),
        "vocab_size": int(vocab_size),
        "target": target,
    }


def _length(args: argparse.Namespace, default: int) -> int:
    return int(getattr(args, "length", None) or default)


def _vocab_settings(args):
    H = _length(args, 10)
    return [Setting(f"V={v}", f"V{v}", _env("bag", H, v)) for v in (args.vocabs or (2, 4, 8, 16))]


TARGET_LABELS = {
    "copy": "copy",
    "flip": "flip",
    "reverse_copy": "rev. copy",
    "reverse_flip": "rev. flip",
}


def _variation_settings(args):
    H = _length(args, 10)
    return [
        Setting(
            f"{reward}/{TARGET_LABELS[target]}", f"{reward}-{target}", _env(reward, H, 2, target)
        )
        for reward in ("bag", "sequential")
        for target in ("copy", "flip", "reverse_copy", "reverse_flip")
    ]


def _terminal_settings(args):
    return [
        Setting(f"H={h}", f"H{h}", _env("terminal", h)) for h in (args.lengths or (7, 8, 9, 10))
    ]


def _eta_settings(args):
    H = _length(args, 10)
    return [
        Setting(f"eta={eta:g}", f"eta{eta:g}", _env("bag", H), {"eta": eta})
        for eta in (0.25, 0.5, 1.0, 2.0, 4.0)
    ]


def _k_settings(args):
    H = _length(args, 8)
    return [
        Setting(f"K={k}", f"K{k}", _env("terminal", H), {"n_candidates": k, "batch_size": 256})
        for k in (4, 8, 16, 32, 64)
    ]


def _epoch_settings(args):
    H = _length(args, 8)
    return [
        Setting(
            f"epochs={e}",
            f"E{e}",
            _env("terminal", H),
            {"n_epochs": e, "n_candidates": 32, "batch_size": 256},
        )
        for e in (1, 2, 4, 8, 16)
    ]


def _single_terminal(default_length: int, agent: dict | None = None):
    def settings(args):
        H = _length(args, default_length)
        return [Setting(f"H={H}", f"H{H}", _env("terminal", H), dict(agent or {}))]

    return settings


def _row(method: str, labels: Sequence[str], values: Sequence[str]) -> dict[tuple[str, str], str]:
    return {(method, lab): v for lab, v in zip(labels, values)}


def _paper(*rows: dict) -> dict:
    out: dict = {}
    for r in rows:
        out.update(r)
    return out


_V = ["V=2", "V=4", "V=8", "V=16"]
_H = ["H=7", "H=8", "H=9", "H=10"]
_VAR = [
    f"{r}/{TARGET_LABELS[t]}"
    for r in ("bag", "sequential")
    for t in ("copy", "flip", "reverse_copy", "reverse_flip")
]
_VAR_PAPER = {  # Table 2 columns TPO_token, GRPO_token, DG, PPO
    "bag/copy": ("81", "338", "219", "170"),
    "bag/flip": ("56", "104", "201", "146"),
    "bag/rev. copy": ("55", "352", "202", "-"),
    "bag/rev. flip": ("59", "209", "200", "143"),
    "sequential/copy": ("295", "-", "439", "-"),
    "sequential/flip": ("321", "-", "349", "-"),
    "sequential/rev. copy": ("159", "-", "515", "-"),
    "sequential/rev. flip": ("276", "-", "309", "-"),
}
_K = ["K=4", "K=8", "K=16", "K=32", "K=64"]
_E = ["epochs=1", "epochs=2", "epochs=4", "epochs=8", "epochs=16"]
_ETA = ["eta=0.25", "eta=0.5", "eta=1", "eta=2", "eta=4"]

TERMINAL_PAPER = {
    "prompts": _paper(
        _row("tpo", _H, ["6.9", "8.6", "6.1", "7.4"]),
        _row("grpo", _H, ["14.5", "27.6", "30.0", "50.4"]),
        _row("grpo_no_kl", _H, ["66.6", "92.5", ">95", ">95"]),
        _row("ppo", _H, ["12.0", "26.3", "90.6", ">95"]),
        _row("dg", _H, ["33.8", "58.8", ">95", ">95"]),
    ),
    "interactions": _paper(
        _row("tpo", _H, ["1.8", "2.8", "5.3", "19.0"]),
        _row("grpo", _H, ["9.6", "23.2", "36.2", "48.7"]),
        _row("grpo_no_kl", _H, ["78.1", "83.8", ">95", ">95"]),
        _row("ppo", _H, ["38.6", "62.1", "66.2", ">95"]),
        _row("dg", _H, ["47.7", "69.4", ">95", ">95"]),
    ),
}

TOKEN_EXPERIMENTS: dict[str, TokenExperiment] = {
    "token-vocab": TokenExperiment(
        "token-vocab",
        ("tpo_token", "grpo_token", "dg", "ppo"),
        _vocab_settings,
        {
            "steps_to_1pct": _paper(
                _row("tpo_token", _V, ["58", "74", "103", "102"]),
                _row("grpo_token", _V, ["904", "141", "124", "148"]),
                _row("dg", _V, ["199", "273", "314", "393"]),
                _row("ppo", _V, ["872", "181", "191", "259"]),
            )
        },
        "steps_to_1pct",
        "Table 1: steps to 1% error, bag-of-tokens reverse copy, H = 10, K = 8, B = 100.",
        default_episodes=1000,
    ),
    "token-variations": TokenExperiment(
        "token-variations",
        ("tpo_token", "grpo_token", "dg", "ppo"),
        _variation_settings,
        {
            "steps_to_1pct": {
                (m, s): v[i]
                for s, v in _VAR_PAPER.items()
                for i, m in enumerate(("tpo_token", "grpo_token", "dg", "ppo"))
            }
        },
        "steps_to_1pct",
        "Table 2: steps to 1% error, H = 10, V = 2, K = 8, 10 seeds, 1000 episodes ('-': never).",
        default_episodes=1000,
        layout="settings_rows",
    ),
    "terminal": TokenExperiment(
        "terminal",
        ("tpo", "grpo", "grpo_no_kl", "ppo", "dg"),
        _terminal_settings,
        {"final_error": TERMINAL_PAPER["prompts"]},
        "final_error",
        "Table 3: exact-match error (%) after 2000 episodes, terminal reward, reverse copy, "
        "V = 2, K = 8, B = 100 ('>95': the paper's '-').",
        default_episodes=2000,
    ),
    "eta-sweep": TokenExperiment(
        "eta-sweep",
        ("tpo_token",),
        _eta_settings,
        {
            "final_error": _row("tpo_token", _ETA, ["1.0", "0.0", "0.7", "1.0", "0.8"]),
            "steps_to_1pct": _row("tpo_token", _ETA, ["72", "67", "96", "141", "260"]),
        },
        "final_error",
        "Table 5: eta sweep of TPO_token (reverse copy, bag reward, V = 2, H = 10, K = 8, B = 100): "
        "final error % / steps to 1%.",
        default_episodes=1000,
        layout="settings_rows",
        sweep=("eta", "eta"),
    ),
    "k-sweep": TokenExperiment(
        "k-sweep",
        ("tpo", "grpo"),
        _k_settings,
        {
            "final_error": _paper(
                _row("tpo", _K, ["8.9", "5.2", "5.1", "2.6", "0.36"]),
                _row("grpo", _K, ["19.4", "19.8", "9.2", "4.4", "5.6"]),
            )
        },
        "final_error",
        "Sparse-reward diagnostics, K sweep: terminal reverse copy, H = 8, V = 2, B = 256, "
        "2000 episodes; final error %.",
        default_episodes=2000,
        sweep=("K", "n_candidates"),
    ),
    "epoch-sweep": TokenExperiment(
        "epoch-sweep",
        ("tpo", "grpo"),
        _epoch_settings,
        {
            "final_error": _paper(
                _row("tpo", _E, ["0.02", "<2.3", "0.05", "<2.3", "<2.3"]),
                _row("grpo", _E, ["4.3", "37.6", "6.3", "3.3", "1.1"]),
            )
        },
        "final_error",
        "Sparse-reward diagnostics, epoch sweep: terminal reverse copy, H = 8, V = 2, K = 32, "
        "B = 256, 2000 episodes; final error % (TPO: below 2.3% everywhere). Also: TPO with 4 "
        "epochs 0.2% at episode 400 vs 1.1% with 1 epoch; TPO's gradient norm decays to near "
        "zero once solved (about episode 300), GRPO's does not.",
        default_episodes=2000,
        sweep=("epochs", "n_epochs"),
    ),
    "zero-variance-mask": TokenExperiment(
        "zero-variance-mask",
        ("grpo", "grpo_masked"),
        _single_terminal(8, {"n_candidates": 32, "batch_size": 256}),
        {"final_error": {("grpo", "H=8"): "6.3", ("grpo_masked", "H=8"): "29.7"}},
        "final_error",
        "Sparse-reward diagnostics: masking zero-variance groups raises GRPO's final error from "
        "6.3% to 29.7% (terminal, H = 8, V = 2, K = 32, B = 256, 2000 episodes). About 90% of "
        "groups are all-fail at the start.",
        default_episodes=2000,
    ),
    "ablations": TokenExperiment(
        "ablations",
        ("tpo", "tpo_no_anchor", "group_pg", "grpo_no_kl"),
        _single_terminal(10),
        {
            "final_error": {
                ("tpo", "H=10"): "7.4",
                ("tpo_no_anchor", "H=10"): ">99",
                ("group_pg", "H=10"): ">99",
                ("grpo_no_kl", "H=10"): ">99",
            }
        },
        "final_error",
        "Ablation at H = 10 (terminal, V = 2, K = 8, B = 100, 2000 episodes): TPO 7.4% while "
        "TPO-no-anchor, Group PG and GRPO (no KL) all exceed 99%.",
        default_episodes=2000,
    ),
}


# ------------------------------------------------------------------------------ running


def _check_args(exp: TokenExperiment, args: argparse.Namespace) -> None:
    lengths, vocabs, length = (
        getattr(args, "lengths", None),
        getattr(args, "vocabs", None),
        getattr(args, "length", None),
    )
    if lengths and exp.name != "terminal":
        raise SystemExit(f"--lengths applies to 'terminal' only (use --length for {exp.name!r})")
    if length and exp.name == "terminal":
        raise SystemExit("'terminal' takes --lengths (several H), not --length")
    if vocabs and exp.name != "token-vocab":
        raise SystemExit(f"--vocabs applies to 'token-vocab' only, not {exp.name!r}")
    unknown = [m for m in (getattr(args, "methods", None) or ()) if m not in METHODS]
    if unknown:
        raise SystemExit(f"unknown method(s) {unknown}; known: {sorted(METHODS)}")


def select_settings(
    exp: TokenExperiment, settings: list[Setting], tags: Sequence[str] | None
) -> list[Setting]:
    """The settings whose tag is in ``tags`` (all when ``tags`` is empty), in table order."""
    if not tags:
        return settings
    known = [s.tag for s in settings]
    unknown = [t for t in tags if t not in known]
    if unknown:
        raise SystemExit(f"unknown setting(s) {unknown} for {exp.name!r}; known tags: {known}")
    return [s for s in settings if s.tag in tags]


# TransformerPolicy's ``init`` and ``substrate`` choices and defaults
# (tpo_agents.policies.transformer.INITS, DEFAULT_INIT, SUBSTRATES), named here so the
# command line parses without importing torch.
POLICY_INITS = ("torch", "haiku", "flax")
DEFAULT_POLICY_INIT = "haiku"
SUBSTRATES = ("ours", "paper")
DEFAULT_SUBSTRATE = "paper"
"""``zoo.reproduce`` reproduces the paper, so it trains on the paper's substrate unless told."""


def substrate_of(args: argparse.Namespace) -> str:
    substrate = getattr(args, "substrate", None) or DEFAULT_SUBSTRATE
    if substrate not in SUBSTRATES:
        raise SystemExit(f"--substrate must be one of {SUBSTRATES}; got {substrate!r}")
    if substrate == "paper" and getattr(args, "init", None) is not None:
        raise SystemExit("--init applies to --substrate ours (the paper substrate has flax's initialization)")
    return substrate


def policy_kwargs_of(args: argparse.Namespace) -> dict:
    """TransformerPolicy keywords of a run: always named, so that every cached job and
    result file records the substrate (and, on ours, the initialization) that made it."""
    substrate = substrate_of(args)
    if substrate == "paper":
        kwargs = {"substrate": "paper"}
    else:
        kwargs = {"substrate": "ours", "init": getattr(args, "init", None) or DEFAULT_POLICY_INIT}
    optimizer = getattr(args, "optimizer", None) or "substrate"
    if optimizer != "substrate":
        kwargs["optimizer"] = optimizer
    return kwargs


def variant_suffix(args: argparse.Namespace) -> str:
    """Suffix naming a run's substrate and its departures from the paper's defaults
    (``-paper``, ``-ours-initflax``, ``-paper-lr0.0015``), for its setting tags and its
    output files."""
    suffix = f"-{substrate_of(args)}"
    if (getattr(args, "optimizer", None) or "substrate") != "substrate":
        suffix += f"-{args.optimizer}"
    if getattr(args, "learning_rate", None) is not None:
        suffix += f"-lr{args.learning_rate:g}"
    if getattr(args, "init", None) is not None:
        suffix += f"-init{args.init}"
    return suffix


def build_jobs(
    exp: TokenExperiment, args: argparse.Namespace
) -> tuple[list[str], list[Setting], list[Job]]:
    """The methods, settings and jobs of ``exp`` for the parsed command line."""
    _check_args(exp, args)
    methods = list(getattr(args, "methods", None) or exp.methods)
    settings = select_settings(exp, exp.settings(args), getattr(args, "settings", None))
    match = getattr(args, "match", None) or "prompts"
    learning_rate = getattr(args, "learning_rate", None)
    policy_kwargs = policy_kwargs_of(args)
    jobs = []
    for method in methods:
        for s in settings:
            agent = dict(s.agent)
            tag = s.tag + variant_suffix(args)
            if learning_rate is not None:
                agent["learning_rate"] = learning_rate
            agent["policy_kwargs"] = {**agent.get("policy_kwargs", {}), **policy_kwargs}
            if match == "interactions" and method in SINGLE_SAMPLE:
                agent["interaction_matched"] = True
                tag += "-im"
            for seed in range(args.seeds):
                jobs.append(
                    Job(exp.name, method, s.label, tag, seed, args.steps, dict(s.env), agent)
                )
    return methods, settings, jobs


def _cached_subset(
    jobs: Sequence[Job], methods: Sequence[str], settings: Sequence[Setting], out: Path
) -> tuple[list[Job], list[str], list[Setting]]:
    """The jobs already in ``out``'s cache, and the methods and settings they cover (a
    report on a sweep that is still running; each summary says its number of seeds)."""
    cached = [j for j in jobs if load_cached(j, out) is not None]
    if not cached:
        raise SystemExit(f"--cached-only: none of the {len(jobs)} jobs is cached under {out / 'cache'}")
    have = {(j.method, j.setting) for j in cached}
    methods = [m for m in methods if any(m == hm for hm, _ in have)]
    settings = [s for s in settings if any(s.label == hs for _, hs in have)]
    return cached, methods, settings


def _provenance(args: argparse.Namespace, records: Mapping[str, dict], jobs: Sequence[Job]) -> dict:
    """What made a result: the substrate, initialization and optimizer (as the trained
    agents reported them, so a result file says it even for cached jobs)."""
    substrate = substrate_of(args)
    optimizers = sorted({records[j.name].get("agent", {}).get("optimizer", "?") for j in jobs})
    return {
        "substrate": substrate,
        "init": "flax (the artifact's)" if substrate == "paper" else getattr(args, "init", None) or DEFAULT_POLICY_INIT,
        "optimizer": optimizers[0] if len(optimizers) == 1 else optimizers,
    }


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
        summary["takeoff_iteration_per_seed"] = [r["takeoff_iteration"] for r in recs]
        summary["steps_to_1pct_per_seed"] = [r["steps_to_1pct"] for r in recs]
        summary["seconds"] = round(float(sum(r["seconds"] for r in recs)), 2)
        summary["seconds_per_iteration"] = float(
            np.mean([r["seconds_per_iteration"] for r in recs])
        )
        summary["agent"] = recs[0]["agent"]
        methods.setdefault(method, {})[setting] = summary
    return methods


def run_experiment(name: str, args: argparse.Namespace) -> dict:
    """Run (or resume) experiment ``name`` and return its result dict."""
    exp = TOKEN_EXPERIMENTS[name]
    match = getattr(args, "match", None) or "prompts"
    methods, settings, jobs = build_jobs(exp, args)
    out = Path(args.out)
    if getattr(args, "cached_only", False):
        jobs, methods, settings = _cached_subset(jobs, methods, settings, out)
    workers = int(getattr(args, "workers", None) or 1)
    out_name = name if match == "prompts" else f"{name}-interactions"
    out_name += variant_suffix(args)
    t0 = time.perf_counter()
    backend: dict = {}
    records = run_jobs(
        jobs,
        out,
        workers=workers,
        progress=not getattr(args, "quiet", False),
        desc=out_name,
        backend=getattr(args, "backend", None) or "local",
        ray_address=getattr(args, "ray_address", None),
        info=backend,
    )
    summaries = summarize_jobs(jobs, records, args.steps)
    config = {
        "episodes": args.steps,
        "seeds": args.seeds,
        "match": match,
        "learning_rate": getattr(args, "learning_rate", None),
        **_provenance(args, records, jobs),
        "methods": methods,
        "settings": [{"label": s.label, "env": s.env, "agent": s.agent} for s in settings],
        "final_window": min(FINAL_WINDOW, args.steps),
        "takeoff_error": TAKEOFF_ERROR,
        **backend,
        "cache": str(out / "cache" / name),
        "code_version": code_version(),
        "stale_cached_jobs": sorted(
            j.name for j in jobs if records[j.name].get("code_version") != code_version()
        ),
        "wall_seconds": round(time.perf_counter() - t0, 2),
    }
    return {
        "experiment": out_name,
        "config": config,
        "methods": {m: {s.label: summaries[m][s.label] for s in settings if s.label in summaries[m]} for m in methods},
        "setting_order": [s.label for s in settings],
    }


# ------------------------------------------------------------------------------ outputs


def _paper_values(exp: TokenExperiment, result: dict, metric: str) -> dict:
    if exp.name == "terminal" and result["config"].get("match") == "interactions":
        return TERMINAL_PAPER["interactions"] if metric == "final_error" else {}
    return exp.paper.get(metric, {})


def _fmt(summary: dict, metric: str) -> str:
    if metric == "final_error":
        return f"{100 * summary['final_error']:.1f}"
    value = summary.get("steps_to_1pct")
    return "-" if value is None else str(value)


def _cell(summary: dict, metric: str, paper: Mapping, key: tuple[str, str]) -> str:
    ours = _fmt(summary, metric)
    return f"{ours} ({paper[key]})" if key in paper else ours


def grid_table(result: dict, metric: str, paper: Mapping, settings_rows: bool = False) -> list[str]:
    """A markdown table of ``metric``: methods x settings (or transposed), ``ours (paper)``."""
    methods = list(result["methods"])
    settings = list(result.get("setting_order") or next(iter(result["methods"].values())))

    def cell(m: str, s: str) -> str:
        return _cell(result["methods"][m][s], metric, paper, (m, s))

    if settings_rows:
        head = ["setting"] + [label(m) for m in methods]
        rows = [[s] + [cell(m, s) for m in methods] for s in settings]
    else:
        head = ["method"] + settings
        rows = [[label(m)] + [cell(m, s) for s in settings] for m in methods]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return lines + ["| " + " | ".join(r) + " |" for r in rows]


def _per_method_table(result: dict, value: Callable[[dict], str]) -> list[str]:
    settings = list(result.get("setting_order") or next(iter(result["methods"].values())))
    lines = ["| method | " + " | ".join(settings) + " |", "|" + "---|" * (len(settings) + 1)]
    for m, per in result["methods"].items():
        lines.append(f"| {label(m)} | " + " | ".join(value(per[s]) for s in settings) + " |")
    return lines


def _mean_or_dash(values: Iterable[int | None]) -> str:
    values = list(values)
    hit = [v for v in values if v is not None]
    if not hit:
        return "-"
    text = f"{np.mean(hit):.0f}"
    return text if len(hit) == len(values) else f"{text} ({len(hit)}/{len(values)} seeds)"


def markdown(result: dict, exp: TokenExperiment) -> str:
    cfg = result["config"]
    metric_names = {
        "final_error": f"final error % (mean of the last {cfg['final_window']} iterations)",
        "steps_to_1pct": "steps to 1% error (seed-mean curve)",
    }
    lines = [f"# {result['experiment']}", "", exp.notes, ""]
    lines.append(
        f"Ours: {cfg['seeds']} seeds, {cfg['episodes']} iterations, match={cfg['match']}; cells are "
        "`ours (paper)`. Error = 1 - mean return of the training batch."
    )
    lines.append("")
    settings_rows = exp.layout == "settings_rows"
    metrics = [exp.primary] + [m for m in ("final_error", "steps_to_1pct") if m != exp.primary]
    for metric in metrics:
        lines += [f"## {metric_names[metric]}", ""]
        lines += grid_table(result, metric, _paper_values(exp, result, metric), settings_rows)
        lines.append("")
    lines += ["## final error % +- s.e. over seeds", ""]
    lines += _per_method_table(
        result, lambda s: f"{100 * s['final_error']:.2f} +- {100 * s['final_error_se']:.2f}"
    )
    lines += [
        "",
        f"## take-off iteration (first error < {cfg['takeoff_error']}), mean over seeds",
        "",
    ]
    lines += _per_method_table(result, lambda s: _mean_or_dash(s["takeoff_iteration_per_seed"]))
    lines += ["", "## steps to 1% per seed, mean over the seeds that got there", ""]
    lines += _per_method_table(result, lambda s: _mean_or_dash(s["steps_to_1pct_per_seed"]))
    lines += ["", "## seconds per iteration (mean over seeds; one torch thread per job)", ""]
    lines += _per_method_table(result, lambda s: f"{s['seconds_per_iteration']:.3f}")
    lines += [
        "",
        "Config: `" + json.dumps({k: v for k, v in cfg.items() if k != "settings"}) + "`",
        "",
    ]
    return "\n".join(lines)


def plot(result: dict, path: Path) -> None:
    """Per setting: error (log) and gradient norm (log) curves, mean +- s.e. over seeds.

    A sweep experiment (``TokenExperiment.sweep``) gets one more panel: final error (%)
    against the swept setting, mean +- s.e. over seeds, log-log.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    settings = list(result.get("setting_order") or next(iter(result["methods"].values())))
    exp = TOKEN_EXPERIMENTS.get(base_experiment(result["experiment"]))
    sweep = exp.sweep if exp is not None and len(settings) > 1 else None
    ncols = min(4, len(settings))
    nblocks = math.ceil(len(settings) / ncols)
    nrows = 2 * nblocks + (1 if sweep else 0)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 3.2 * nrows), squeeze=False)
    colors: dict[str, str] = {}
    for i, s in enumerate(settings):
        ax_e = axes[2 * (i // ncols), i % ncols]
        ax_g = axes[2 * (i // ncols) + 1, i % ncols]
        for m, per in result["methods"].items():
            c = per[s]["curves"]
            x = np.asarray(c["steps"])
            mean, se = np.asarray(c["error_mean"]), np.asarray(c["error_se"])
            (line,) = ax_e.plot(x, np.maximum(mean, 1e-4), label=label(m), lw=1, color=colors.get(m))
            colors[m] = line.get_color()
            ax_e.fill_between(
                x,
                np.maximum(mean - se, 1e-4),
                np.maximum(mean + se, 1e-4),
                alpha=0.2,
                color=line.get_color(),
            )
            g = np.asarray(c["grad_norm_mean"])
            ax_g.plot(x, np.maximum(g, 1e-8), color=line.get_color(), lw=1)
            if "grad_norm_se" in c:
                gse = np.asarray(c["grad_norm_se"])
                ax_g.fill_between(
                    x,
                    np.maximum(g - gse, 1e-8),
                    np.maximum(g + gse, 1e-8),
                    alpha=0.2,
                    color=line.get_color(),
                )
        ax_e.set_yscale("log")
        ax_e.axhline(0.01, color="grey", lw=0.8, ls=":")
        ax_e.set_title(s)
        ax_e.set_ylabel("error (training batch)")
        ax_g.set_yscale("log")
        ax_g.set_ylabel("gradient norm")
        ax_g.set_xlabel("episode (iteration)")
        if i == 0:
            ax_e.legend(fontsize=7)
    for j in range(len(settings), nblocks * ncols):
        axes[2 * (j // ncols), j % ncols].axis("off")
        axes[2 * (j // ncols) + 1, j % ncols].axis("off")
    if sweep:
        _plot_sweep(axes[-1, 0], result, settings, sweep, colors)
        for ax in axes[-1, 1:]:
            ax.axis("off")
    fig.suptitle(result["experiment"])
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_sweep(ax, result: dict, settings: list[str], sweep: tuple[str, str], colors: dict) -> None:
    """Final error (%) against the swept agent setting, mean +- s.e. (log-log)."""
    axis_label, key = sweep
    agents = {c["label"]: c["agent"] for c in result["config"].get("settings", [])}
    xs = [agents.get(s, {}).get(key) for s in settings]
    if any(x is None for x in xs):
        ax.axis("off")
        return
    for m, per in result["methods"].items():
        y = np.array([100 * per[s]["final_error"] for s in settings])
        yerr = np.array([100 * per[s]["final_error_se"] for s in settings])
        ax.errorbar(
            xs, np.maximum(y, 1e-3), yerr=yerr, marker="o", capsize=3, label=label(m), color=colors.get(m)
        )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(xs)
    ax.set_xticklabels([f"{x:g}" for x in xs])
    ax.set_xlabel(axis_label)
    ax.set_ylabel(f"final error % (last {result['config'].get('final_window', '?')})")
    ax.set_title(f"final error vs {axis_label}")
    ax.legend(fontsize=7)


def base_experiment(name: str) -> str:
    """The experiment a result belongs to, from its name: the ``-interactions``, substrate,
    ``-lrLR`` and ``-initINIT`` variants of ``terminal``
    (``terminal-interactions-ours-lr0.002-initflax``) give ``terminal``."""
    name = re.sub(r"-init[a-z]+$", "", name)
    name = re.sub(r"-lr[0-9.e+-]+$", "", name)
    name = re.sub(r"-adamw$", "", name)
    name = re.sub(r"-(paper|ours)$", "", name)
    return name.removesuffix("-interactions")


def write_outputs(
    result: dict, out_dir: Path, paper_notes: str = "", log_x: bool = False
) -> dict[str, Path]:
    """``OUT/<experiment>.{json,png,md}`` (same signature as :func:`zoo.results.write_outputs`)."""
    out_dir = Path(out_dir)
    name = result["experiment"]
    exp = TOKEN_EXPERIMENTS[base_experiment(name)]
    paths = {ext: out_dir / f"{name}.{ext}" for ext in ("json", "png", "md")}
    write_json_atomic(paths["json"], result)
    plot(result, paths["png"])
    text = markdown(result, exp)
    if paper_notes and paper_notes != exp.notes:
        text += "\nPaper: " + paper_notes + "\n"
    paths["md"].write_text(text)
    return paths
