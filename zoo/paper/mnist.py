"""The MNIST contextual bandit study (docs/algorithms.md, section 9.1): test error of the real agents.

Each RL method is a ``tpo_agents`` agent trained through its public SB3 API on
``MNISTBandit-v0`` (train split; the agent builds the native vector env with
``batch_size`` sub-envs): one sampled class per image, one gradient step per batch of
100 images (``n_epochs=1``). The CE oracle trains the same MLP with cross-entropy to the
labels on the same number of batches. Test error (greedy ``argmax`` of the logits on the
whole test split) is recorded every ``eval_every`` updates and at step 0.

For a seed ``s`` every method starts from the same weights: the agents call SB3's
``set_random_seed(s)`` before building their policy, and the oracle does the same.

Runs (method, seed) are independent jobs; :func:`run_study` runs them on a
:mod:`zoo.jobs.backends` backend (local processes or Ray tasks, one torch thread each), caches
each finished run under ``CACHE/mnist-<dataset>/`` (``--cache``, default ``OUT/cache``) (a rerun resumes), and its results
do not depend on the backend or ``workers``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.utils import set_random_seed

import tpo_gym  # noqa: F401  (registers MNISTBandit-v0)
from tpo_agents import DG, GRPO, PG, TPO, GroupPG, MlpPolicy
from tpo_agents.objectives import cross_entropy_loss
from tpo_gym.datasets import DATASETS, NUM_CLASSES
from zoo.jobs.sweep import code_version, run_sweep

METHODS: tuple[str, ...] = ("ce", "pg", "dg", "tpo", "grpo", "group_pg")
"""Method keys (JSON keys); ``ce`` is the supervised oracle."""

AGENTS = {
    "pg": (PG, {"baseline": "pi_squared"}),
    "dg": (DG, {"baseline": "pi_squared"}),
    "tpo": (TPO, {}),
    "grpo": (GRPO, {}),
    "group_pg": (GroupPG, {}),
}
"""Agent class and its extra keyword arguments per RL method (other settings: defaults)."""


@dataclass(frozen=True)
class MnistConfig:
    """Settings shared by every method (the paper's, except ``dataset``/``steps``)."""

    dataset: str = "mnist"
    steps: int = 10_000
    eval_every: int = 200
    batch_size: int = 100
    learning_rate: float = 1e-3
    net_arch: tuple[int, ...] = (50, 50)
    data_dir: str | None = None

    def __post_init__(self) -> None:
        if self.dataset not in DATASETS:
            raise ValueError(f"dataset must be one of {DATASETS}; got {self.dataset!r}")
        for name in ("steps", "eval_every", "batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer; got {value!r}")

    @property
    def eval_steps(self) -> list[int]:
        """Update counts at which the test error is recorded: 0, every ``eval_every``, last."""
        steps = list(range(0, self.steps + 1, self.eval_every))
        if steps[-1] != self.steps:
            steps.append(self.steps)
        return steps

    def policy_kwargs(self) -> dict:
        return {"net_arch": list(self.net_arch), "activation_fn": torch.nn.ReLU}

    def as_dict(self) -> dict:
        d = asdict(self)
        d["net_arch"] = list(self.net_arch)
        d["activation"] = "ReLU"
        d["optimizer"] = "Adam"
        d["n_epochs"] = 1
        d["agent_kwargs"] = {m: kw for m, (_, kw) in AGENTS.items()}
        return d


# --------------------------------------------------------------------------- data


def make_env(cfg: MnistConfig, split: str) -> gym.Env:
    return gym.make("MNISTBandit-v0", dataset=cfg.dataset, split=split, data_dir=cfg.data_dir)


def dataset_split(cfg: MnistConfig, split: str) -> tuple[np.ndarray, np.ndarray]:
    """Images ``[n, d]`` and labels ``[n]`` of a split, through the env's ``dataset_arrays``."""
    env = make_env(cfg, split)
    try:
        return env.unwrapped.dataset_arrays()
    finally:
        env.close()


def _tensor(x: np.ndarray | torch.Tensor) -> torch.Tensor:
    """A torch copy of a (possibly read-only) array; tensors pass through."""
    return x if isinstance(x, torch.Tensor) else torch.tensor(np.asarray(x))


@torch.no_grad()
def greedy_error(
    policy: MlpPolicy,
    images: np.ndarray | torch.Tensor,
    labels: np.ndarray | torch.Tensor,
    chunk: int = 10_000,
) -> float:
    """Fraction of ``images`` whose greedy class (argmax of the logits) is not the label."""
    images, labels = _tensor(images), _tensor(labels)
    wrong = 0
    for start in range(0, len(images), chunk):
        obs = images[start : start + chunk].to(policy.device)
        pred = policy.action_logits(obs).argmax(-1).cpu()
        wrong += int((pred != labels[start : start + chunk]).sum())
    return wrong / len(images)


class TestErrorCallback(BaseCallback):
    """Records the test error whenever ``model.n_updates`` reaches a step in ``steps``.

    Checked at the start of every rollout (after the previous iteration's update) and at
    the end of training, so the error at update count ``n`` is measured on the policy
    after exactly ``n`` gradient steps (step 0: the initial policy).
    """

    __test__ = False  # not a pytest test class

    def __init__(self, images: np.ndarray, labels: np.ndarray, steps: Sequence[int]):
        super().__init__()
        self.images, self.labels = _tensor(images), _tensor(labels)
        self.steps = set(int(s) for s in steps)
        self.errors: dict[int, float] = {}

    def _record(self) -> None:
        n = int(self.model.n_updates)
        if n in self.steps and n not in self.errors:
            self.errors[n] = greedy_error(self.model.policy, self.images, self.labels)

    def _on_rollout_start(self) -> None:
        self._record()

    def _on_training_end(self) -> None:
        self._record()

    def _on_step(self) -> bool:
        return True


# --------------------------------------------------------------------------- runs


def make_agent(method: str, cfg: MnistConfig, seed: int):
    """The RL agent of ``method`` on the train split, seeded with ``seed``."""
    cls, kwargs = AGENTS[method]
    return cls(
        "MlpPolicy",
        make_env(cfg, "train"),
        learning_rate=cfg.learning_rate,
        batch_size=cfg.batch_size,
        n_epochs=1,
        policy_kwargs=cfg.policy_kwargs(),
        seed=seed,
        **kwargs,
    )


def group_modes(cfg: MnistConfig) -> dict[str, str]:
    """The group mode each RL agent resolves to on this env (``"auto"``), for the record."""
    modes = {}
    for method in AGENTS:
        model = make_agent(method, cfg, seed=0)
        modes[method] = model.resolve_group_mode()
        model.env.close()
    return modes


def run_agent(method: str, cfg: MnistConfig, seed: int) -> np.ndarray:
    """Test-error curve (at ``cfg.eval_steps``) of one RL agent."""
    images, labels = dataset_split(cfg, "test")
    model = make_agent(method, cfg, seed)
    callback = TestErrorCallback(images, labels, cfg.eval_steps)
    model.learn(total_timesteps=cfg.steps * cfg.batch_size, callback=callback)
    if model.n_updates != cfg.steps:
        raise RuntimeError(f"{method} made {model.n_updates} updates, expected {cfg.steps}")
    return np.array([callback.errors[s] for s in cfg.eval_steps])


def run_oracle(cfg: MnistConfig, seed: int) -> np.ndarray:
    """Test-error curve of the supervised oracle: the same MLP, CE to the labels.

    Batches of ``batch_size`` train images are drawn uniformly with replacement (as the
    env draws them).
    """
    train_x, train_y = dataset_split(cfg, "train")
    test_x, test_y = (_tensor(a) for a in dataset_split(cfg, "test"))
    set_random_seed(seed)  # as the agents do before building their policy: same init
    obs_space = spaces.Box(0.0, 1.0, (train_x.shape[1],), np.float32)
    lr = cfg.learning_rate
    policy = MlpPolicy(obs_space, spaces.Discrete(NUM_CLASSES), lambda _: lr, **cfg.policy_kwargs())
    rng = np.random.default_rng(seed)
    train_y_t = _tensor(train_y)
    wanted = set(cfg.eval_steps)
    errors = {0: greedy_error(policy, test_x, test_y)}
    for step in range(1, cfg.steps + 1):
        idx = rng.integers(0, len(train_x), size=cfg.batch_size)
        loss = cross_entropy_loss(policy.action_logits(torch.as_tensor(train_x[idx])), train_y_t[idx])
        policy.optimizer.zero_grad()
        loss.backward()
        policy.optimizer.step()
        if step in wanted:
            errors[step] = greedy_error(policy, test_x, test_y)
    return np.array([errors[s] for s in cfg.eval_steps])


def run_one(method: str, seed: int, cfg: MnistConfig) -> tuple[str, int, np.ndarray, float]:
    """One (method, seed) run: ``(method, seed, curve, seconds)``."""
    t0 = time.perf_counter()
    curve = run_oracle(cfg, seed) if method == "ce" else run_agent(method, cfg, seed)
    return method, seed, curve, time.perf_counter() - t0


@dataclass(frozen=True)
class MnistJob:
    """One (method, seed) run of the study, as a cached sweep job (:mod:`zoo.jobs.sweep`)."""

    method: str
    seed: int
    cfg: MnistConfig

    @property
    def name(self) -> str:
        return f"{self.method}__seed{self.seed}"

    @property
    def episodes(self) -> int:
        return self.cfg.steps

    def spec(self) -> dict:
        """What a cached result must match to be reused (``data_dir`` only says where
        the dataset files were found, so it is left out)."""
        config = {k: v for k, v in self.cfg.as_dict().items() if k != "data_dir"}
        return {"method": self.method, "seed": self.seed, "config": config}

    def cache_path(self, cache: Path) -> Path:
        return Path(cache) / f"mnist-{self.cfg.dataset}" / f"{self.name}.json"


def run_job(job: MnistJob, progress: Any = None) -> dict:
    """Run ``job``; its cache record: spec, test-error curve, seconds and code version."""
    _, _, curve, seconds = run_one(job.method, job.seed, job.cfg)
    return {
        "spec": job.spec(),
        "error": [float(e) for e in curve],
        "seconds": seconds,
        "code_version": code_version(),
    }


# Imported once by the fork server, not per worker: this module (torch, SB3, the agents),
# torch's lazily imported dynamo (the first optimizer built imports it, ~3 s) and
# scikit-learn's datasets (the digits).
_PRELOAD = (__name__, "torch._dynamo", "sklearn.datasets")


def run_study(
    cfg: MnistConfig,
    seeds: Sequence[int],
    methods: Sequence[str] = METHODS,
    workers: int = 1,
    progress: bool = True,
    cache: Path | None = None,
    backend: str = "local",
    ray_address: str | None = None,
    info: dict | None = None,
) -> dict[str, dict]:
    """All (method, seed) runs: per method ``{"error": [n_seeds, n_evals], "seconds": total}``.

    ``backend="local"``: ``workers > 1`` runs them in that many worker processes
    (forkserver with the heavy imports preloaded, else spawn), ``workers == 1`` here;
    ``backend="ray"``: one Ray task per run (:mod:`zoo.jobs.backends`). Either way torch uses
    one thread per run, so the curves do not depend on the backend or ``workers``.
    With ``cache`` (a cache root), each finished run is cached as
    ``cache/mnist-<dataset>/<method>__seed<s>.json``
    and a rerun only runs the missing ones (:func:`zoo.jobs.sweep.run_sweep`).
    """
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError(f"unknown method(s) {unknown}; choose from {METHODS}")
    seeds = [int(s) for s in seeds]
    jobs = [MnistJob(m, s, cfg) for m in methods for s in seeds]
    records = run_sweep(
        jobs,
        run_job,
        cache,
        backend=backend,
        workers=workers,
        ray_address=ray_address,
        progress=progress,
        desc=f"mnist-{cfg.dataset}",
        describe=lambda job: f"{job.method} seed {job.seed}",
        context="forkserver",
        preload=_PRELOAD,
        info=info,
    )
    result = {}
    for m in methods:
        recs = [records[MnistJob(m, s, cfg).name] for s in seeds]
        result[m] = {
            "error": np.array([r["error"] for r in recs], dtype=float),
            "seconds": float(sum(r["seconds"] for r in recs)),
        }
    return result
