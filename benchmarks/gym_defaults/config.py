"""The gym-defaults benchmark's config: envs (factories, budgets, thresholds), methods,
and the PPO-zoo baseline's hyperparameters read from rl-zoo3's ``hyperparams/ppo.yml``."""

from __future__ import annotations

import copy
import functools
import importlib
import importlib.metadata
import importlib.util
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.harness import LAST_EVALS

NAME = "gym_defaults"
METHODS = ("tpo", "grpo", "ppo_zoo")
METHOD_LABELS = {"tpo": "TPO (defaults)", "grpo": "GRPO (defaults)", "ppo_zoo": "PPO-zoo"}
NO_ZOO_ENTRY = "no rl-zoo3 entry, SB3 defaults"
MATCH_RULE = (
    f"a method matches PPO-zoo on an env when its mean of the last {LAST_EVALS} evaluations "
    f"(seed mean) is >= PPO-zoo's minus one standard error over PPO-zoo's seeds"
)


# ------------------------------------------------------------------------------- envs


def gym_make(env_id: str, **kwargs: Any):
    """``gymnasium.make(env_id, **kwargs)``; with ``functools.partial`` a picklable factory."""
    import gymnasium

    return gymnasium.make(env_id, **kwargs)


def make_identity_env():
    """SB3's ``IdentityEnv(10)``: 100-step episodes, reward 1 when the action equals the
    observation (max return 100)."""
    from stable_baselines3.common.envs import IdentityEnv

    return IdentityEnv(10)


@dataclass(frozen=True)
class BenchEnv:
    """An env of the benchmark.

    ``make``: a module-level factory of the env (worker processes import it);
    ``timesteps``: the default budget; ``threshold``: the "solved" return; ``zoo_key``:
    its entry in rl-zoo3's ``ppo.yml`` (None: SB3's PPO defaults); ``requires``: a module
    the env needs, the env is skipped without it; ``min_eval_episodes``: episodes per
    evaluation at least (more than the benchmark's ``--n-eval-episodes`` where a row's
    verdict would otherwise sit inside its evaluation noise).
    """

    make: Callable[[], Any]
    timesteps: int
    threshold: float
    zoo_key: str | None
    requires: str | None = None
    note: str = ""
    min_eval_episodes: int = 0


ENVS: dict[str, BenchEnv] = {
    "CartPole-v1": BenchEnv(functools.partial(gym_make, "CartPole-v1"), 100_000, 475.0, "CartPole-v1"),
    "Acrobot-v1": BenchEnv(functools.partial(gym_make, "Acrobot-v1"), 200_000, -100.0, "Acrobot-v1"),
    "MountainCar-v0": BenchEnv(
        functools.partial(gym_make, "MountainCar-v0"), 200_000, -110.0, "MountainCar-v0"
    ),
    "LunarLander-v3": BenchEnv(
        functools.partial(gym_make, "LunarLander-v3"), 300_000, 200.0, "LunarLander-v3", requires="gymnasium.envs.box2d"
    ),
    "FrozenLake-v1-nonslippery": BenchEnv(
        functools.partial(gym_make, "FrozenLake-v1", is_slippery=False), 30_000, 1.0, None,
        note="FrozenLake-v1 with is_slippery=False (max return 1)",
    ),
    "FrozenLake-v1-slippery": BenchEnv(
        functools.partial(gym_make, "FrozenLake-v1", is_slippery=True), 100_000, 0.7, None,
        note="FrozenLake-v1 with is_slippery=True (max return 1; the optimal policy scores ~0.74); "
        "100 episodes per evaluation",
        # An optimal policy succeeds about 3 times in 4: with 10 episodes one seed's mean of 5
        # evaluations carries about +-0.065 of noise, more than the gaps the row decides on.
        min_eval_episodes=100,
    ),
    "IdentityEnv-10": BenchEnv(
        make_identity_env, 10_000, 90.0, None,
        note="stable_baselines3.common.envs.IdentityEnv(10): 100-step episodes, reward 1 per correct step",
    ),
    "Pendulum-v1": BenchEnv(functools.partial(gym_make, "Pendulum-v1"), 100_000, -200.0, "Pendulum-v1"),
}


def eval_episodes(env_name: str, n_eval_episodes: int) -> int:
    """Episodes per evaluation of ``env_name``: ``n_eval_episodes``, or its ``min_eval_episodes`` if more."""
    return max(n_eval_episodes, ENVS[env_name].min_eval_episodes)


def missing_requirement(env_name: str) -> str | None:
    """Why ``env_name`` cannot run here (its ``requires`` module fails to import), or None."""
    module = ENVS[env_name].requires
    if module is None:
        return None
    from gymnasium.error import DependencyNotInstalled

    try:
        importlib.import_module(module)
    except (ImportError, DependencyNotInstalled) as exc:  # gymnasium's box2d raises the latter
        return f"needs {module} (pip install -e '.[box2d]': the Box2D wheel and pygame): {exc}"
    return None


# ------------------------------------------------------------------ rl-zoo3's ppo.yml


def zoo_ppo_file() -> Path | None:
    """rl-zoo3's ``hyperparams/ppo.yml``, or None without rl-zoo3.

    Found without importing rl_zoo3: its import patches gymnasium's ``TimeLimit`` for every
    env of the process, which would change the envs of all methods.
    """
    spec = importlib.util.find_spec("rl_zoo3")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "hyperparams" / "ppo.yml"
    return path if path.is_file() else None


def zoo_version() -> str | None:
    """The installed rl-zoo3's version (None without it)."""
    try:
        return importlib.metadata.version("rl_zoo3")
    except importlib.metadata.PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=1)
def _zoo_table() -> dict:
    import yaml

    path = zoo_ppo_file()
    if path is None:
        raise RuntimeError("ppo_zoo needs rl-zoo3's hyperparams/ppo.yml: pip install -e '.[zoo]'")
    return yaml.safe_load(path.read_text())  # its "!!float 1e5" tags are standard YAML


def zoo_entry(key: str | None) -> dict | None:
    """A copy of rl-zoo3's PPO entry ``key`` as the yml holds it, or None."""
    if key is None:
        return None
    entry = _zoo_table().get(key)
    return copy.deepcopy(entry) if entry is not None else None


@dataclass(frozen=True)
class LinearSchedule:
    """rl-zoo3's ``lin_X`` schedule: ``X * progress_remaining`` (X at the start, 0 at the end)."""

    initial_value: float

    def __call__(self, progress_remaining: float) -> float:
        return progress_remaining * self.initial_value


SCHEDULE_KEYS = ("learning_rate", "clip_range", "clip_range_vf")  # rl-zoo3's, for PPO
ENV_KEYS = ("n_envs", "normalize")  # applied to the training env, not passed to PPO
# Arguments of PPO the benchmark sets itself (a zoo value for them is dropped).
OWN_ARGUMENTS = ("self", "policy", "env", "seed", "verbose", "device", "tensorboard_log", "_init_setup_model")


def _evaluate_zoo_string(text: str) -> Any:
    """A Python expression of the yml (``dict(..., activation_fn=nn.ReLU)``), evaluated as
    rl-zoo3 does, with only ``nn``/``th`` and a few builtins in scope."""
    import torch

    scope = {"nn": torch.nn, "th": torch, "torch": torch, "dict": dict, "list": list, "tuple": tuple, "float": float, "int": int}
    return eval(text, {"__builtins__": {}}, scope)  # rl-zoo3 evals these strings too


@functools.lru_cache(maxsize=1)
def _ppo_arguments() -> frozenset[str]:
    import inspect

    from stable_baselines3 import PPO

    return frozenset(inspect.signature(PPO.__init__).parameters) - set(OWN_ARGUMENTS)


def convert_zoo_entry(entry: Mapping[str, Any]) -> dict[str, Any]:
    """An rl-zoo3 PPO entry as PPO arguments and env settings.

    Returns ``ppo_kwargs`` (``lin_X`` strings as :class:`LinearSchedule`, ``policy_kwargs``
    evaluated), ``n_envs`` (default 1), ``normalize`` (bool) with ``normalize_kwargs`` for
    ``VecNormalize`` (rl-zoo3 adds the entry's ``gamma``), and ``dropped``: the keys that
    are no PPO argument, with their values (``n_timesteps``, ``policy``, ``frame_stack``...).
    """
    ppo_arguments = _ppo_arguments()
    kwargs: dict[str, Any] = {}
    dropped: dict[str, Any] = {}
    for key, value in entry.items():
        if key in ENV_KEYS:
            continue
        if key not in ppo_arguments:
            dropped[key] = value
        elif key in SCHEDULE_KEYS and isinstance(value, str):
            kind, _, initial = value.partition("_")
            if kind != "lin":
                raise ValueError(f"rl-zoo3 schedule {key}={value!r}: only 'lin_<value>' is known")
            kwargs[key] = LinearSchedule(float(initial))
        elif key == "policy_kwargs" and isinstance(value, str):
            kwargs[key] = _evaluate_zoo_string(value)
        else:
            kwargs[key] = value
    normalize = entry.get("normalize", False)
    if isinstance(normalize, str):  # e.g. "dict(norm_obs=False, norm_reward=True)"
        normalize = _evaluate_zoo_string(normalize)
    normalize_kwargs = dict(normalize) if isinstance(normalize, Mapping) else {}
    if normalize and "gamma" in kwargs:
        normalize_kwargs["gamma"] = kwargs["gamma"]
    return {
        "ppo_kwargs": kwargs,
        "n_envs": int(entry.get("n_envs", 1)),
        "normalize": bool(normalize),
        "normalize_kwargs": normalize_kwargs,
        "dropped": dropped,
    }


def method_hyperparameters(env_name: str, method: str) -> dict[str, Any]:
    """What ``method`` is built with on ``env_name`` (JSON; part of each run's cached config)."""
    if method != "ppo_zoo":
        return {"source": "tpo_agents defaults", "constructor_kwargs": {}}
    key = ENVS[env_name].zoo_key
    entry = zoo_entry(key)
    if entry is None:
        return {"source": NO_ZOO_ENTRY, "zoo_key": key, "zoo_entry": None, "ppo_kwargs": {},
                "n_envs": 1, "normalize": False, "normalize_kwargs": {}, "dropped": {}}
    converted = convert_zoo_entry(entry)
    return {
        "source": f"rl-zoo3 {zoo_version()} hyperparams/ppo.yml entry {key!r}",
        "zoo_key": key,
        "zoo_entry": entry,
        "ppo_kwargs": {k: entry[k] for k in converted["ppo_kwargs"]},  # as the yml writes them
        "n_envs": converted["n_envs"],
        "normalize": converted["normalize"],
        "normalize_kwargs": converted["normalize_kwargs"],
        "dropped": converted["dropped"],
    }
