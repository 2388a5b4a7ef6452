"""Gym defaults benchmark: TPO and GRPO with default hyperparameters against tuned PPO.

What is compared
    ``tpo_agents.TPO("MlpPolicy", env, seed=s)`` and ``tpo_agents.GRPO("MlpPolicy", env,
    seed=s)`` with no other argument (their defaults pick the group mode from the env:
    a learned critic on discrete actions, branch groups on Box actions) against
    Stable-Baselines3's ``PPO`` with rl-zoo3's tuned hyperparameters for the env (method
    ``ppo_zoo``), read at run time from the installed rl-zoo3's ``hyperparams/ppo.yml``
    and converted the way rl-zoo3 does: ``n_envs`` sub-envs (``make_vec_env``),
    ``normalize`` -> ``VecNormalize`` (gamma from the entry), ``lin_X`` -> a linear
    schedule from X to 0, ``policy_kwargs`` strings evaluated with ``nn`` in scope. Keys
    that are no PPO argument (``n_timesteps``, ``policy``, ``frame_stack``, ...) are
    dropped and listed. Envs without an entry (FrozenLake, IdentityEnv) get SB3's PPO
    defaults, and the result says so per env. The exact hyperparameters of every run are
    in the JSON config. Envs: CartPole-v1, Acrobot-v1, MountainCar-v0, LunarLander-v3
    (skipped, with the reason, when Box2D is not installed), FrozenLake-v1 (slippery and
    not), SB3's ``IdentityEnv(10)`` and Pendulum-v1, each with its own budget and
    "solved" threshold (``ENVS``).

How it is measured
    Every method trains on an env for the same number of env steps (each step of each
    sub-env counts once, SB3's ``num_timesteps``). The greedy policy is evaluated
    (``evaluate_policy``, ``deterministic=True``, ``--n-eval-episodes`` episodes) on a
    separate, separately seeded eval env at steps 0, M, 2M, ..., N with M =
    ``--eval-every-fraction`` x N, and training stops at N, so all methods share one step
    axis (``benchmarks.classic_control``'s callback). With ``VecNormalize`` the eval env
    normalizes observations with the training env's statistics, copied before each
    evaluation, and leaves rewards raw. Runs (env x method x seed) go through
    ``zoo.jobs.sweep``: separate processes with one torch thread each, at most ``--workers``
    at a time (1: in this process), each finished run cached as
    ``OUT/cache/gym_defaults/<env>__<method>__seed<s>.json`` with its config (``spec``). A
    rerun reuses cached runs, retries failed ones, and refuses a cache file whose config
    differs from the one asked for; ``--cached-only`` reports on the cache alone.

Run it from the repository root::

    python benchmarks/gym_defaults.py                          # every env, 5 seeds, 2 workers
    python benchmarks/gym_defaults.py --envs CartPole-v1 Acrobot-v1 --seeds 3
    python benchmarks/gym_defaults.py --timesteps-scale 0.1 --out /tmp/quick   # a quick look
    python benchmarks/gym_defaults.py --cached-only            # report on what is cached

It writes ``OUT/gym_defaults.json`` (config with every run's hyperparameters; per env
and method: step axis, per-seed returns, mean and standard error, final return, mean of
the last 5 evaluations, first step where the seed-mean return reaches the threshold,
seeds reaching it, wall seconds per run; whether TPO and GRPO match PPO-zoo; skipped
envs, failed and missing runs), ``OUT/gym_defaults.png`` (one panel per env, mean return
+- s.e. against env steps) and ``OUT/gym_defaults.md`` (protocol, table, the
"TPO with defaults matches PPO-zoo on N of M envs" line, skipped envs). ``OUT`` defaults
to ``docs/results``.
"""

from __future__ import annotations

import argparse
import copy
import functools
import importlib
import importlib.metadata
import importlib.util
import json
import math
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# ``python benchmarks/gym_defaults.py`` puts benchmarks/ on sys.path, not the repository
# root that ``benchmarks.classic_control`` is imported from (spawned workers run this too).
_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import numpy as np  # noqa: E402

from benchmarks.classic_control import (  # noqa: E402
    EVAL_SEED_OFFSET,
    LAST_EVALS,
    _make_callback,
    eval_grid,
    summarize_method,
)
from tpo_agents.atomic import atomic_path  # noqa: E402
from zoo.cli import positive_float, positive_int  # noqa: E402
from zoo.jobs.results import write_json_atomic  # noqa: E402
from zoo.jobs.sweep import code_version, run_sweep  # noqa: E402

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
    the env needs, the env is skipped without it.
    """

    make: Callable[[], Any]
    timesteps: int
    threshold: float
    zoo_key: str | None
    requires: str | None = None
    note: str = ""


ENVS: dict[str, BenchEnv] = {
    "CartPole-v1": BenchEnv(functools.partial(gym_make, "CartPole-v1"), 100_000, 475.0, "CartPole-v1"),
    "Acrobot-v1": BenchEnv(functools.partial(gym_make, "Acrobot-v1"), 200_000, -100.0, "Acrobot-v1"),
    "MountainCar-v0": BenchEnv(
        functools.partial(gym_make, "MountainCar-v0"), 200_000, -110.0, "MountainCar-v0"
    ),
    "LunarLander-v3": BenchEnv(
        functools.partial(gym_make, "LunarLander-v3"), 300_000, 200.0, "LunarLander-v3", requires="Box2D"
    ),
    "FrozenLake-v1-nonslippery": BenchEnv(
        functools.partial(gym_make, "FrozenLake-v1", is_slippery=False), 30_000, 1.0, None,
        note="FrozenLake-v1 with is_slippery=False (max return 1)",
    ),
    "FrozenLake-v1-slippery": BenchEnv(
        functools.partial(gym_make, "FrozenLake-v1", is_slippery=True), 100_000, 0.7, None,
        note="FrozenLake-v1 with is_slippery=True (max return 1; the optimal policy scores ~0.74)",
    ),
    "IdentityEnv-10": BenchEnv(
        make_identity_env, 10_000, 90.0, None,
        note="stable_baselines3.common.envs.IdentityEnv(10): 100-step episodes, reward 1 per correct step",
    ),
    "Pendulum-v1": BenchEnv(functools.partial(gym_make, "Pendulum-v1"), 100_000, -200.0, "Pendulum-v1"),
}


def missing_requirement(env_name: str) -> str | None:
    """Why ``env_name`` cannot run here (its ``requires`` module fails to import), or None."""
    module = ENVS[env_name].requires
    if module is None:
        return None
    try:
        importlib.import_module(module)
    except ImportError as exc:
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


# ----------------------------------------------------------------------------- one run


@dataclass
class Run:
    """One (env, method, seed) run: a ``zoo.jobs.sweep`` job."""

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
    def episodes(self) -> int:
        """Evaluation points (what the sweep's progress display counts)."""
        return len(eval_grid(self.timesteps, self.eval_every))

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

    def cache_path(self, out: Path) -> Path:
        return Path(out) / "cache" / NAME / f"{self.name}.json"


def _eval_normalize_class():
    from stable_baselines3.common.vec_env import VecNormalize

    class EvalNormalize(VecNormalize):
        """The eval env's ``VecNormalize``: frozen, raw rewards, and the training env's
        observation statistics, copied at each reset (every evaluation starts with one)."""

        def __init__(self, venv, source: VecNormalize, **kwargs: Any) -> None:
            super().__init__(venv, **{**kwargs, "training": False, "norm_reward": False})
            self.source = source

        def reset(self):
            self.obs_rms = copy.deepcopy(self.source.obs_rms)
            return super().reset()

    return EvalNormalize


def build_agent(run: Run):
    """The model of ``run`` and its eval env (a seeded one-env ``VecEnv``)."""
    from stable_baselines3.common.env_util import make_vec_env

    env = ENVS[run.env]
    eval_env = make_vec_env(env.make, n_envs=1)
    eval_env.seed(run.seed + EVAL_SEED_OFFSET)
    if run.method in ("tpo", "grpo"):
        from tpo_agents import GRPO, TPO

        cls = TPO if run.method == "tpo" else GRPO
        return cls("MlpPolicy", env.make(), seed=run.seed), eval_env  # defaults: nothing else
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import VecNormalize

    zoo = convert_zoo_entry(run.hyperparameters.get("zoo_entry") or {})
    train_env = make_vec_env(env.make, n_envs=zoo["n_envs"], seed=run.seed)
    if zoo["normalize"]:
        train_env = VecNormalize(train_env, **zoo["normalize_kwargs"])
        eval_env = _eval_normalize_class()(eval_env, train_env, **zoo["normalize_kwargs"])
    return PPO("MlpPolicy", train_env, seed=run.seed, **zoo["ppo_kwargs"]), eval_env


def _plain(value: Any) -> Any:
    return value if value is None or isinstance(value, (bool, int, float, str)) else repr(value)


def resolved_settings(model) -> dict[str, Any]:
    """What the model ended up with (defaults resolved: group mode, epochs, sub-envs...)."""
    grouped = hasattr(model, "resolve_group_mode")  # TPO, GRPO (SB3's base has use_sde too)
    names = (
        ("n_candidates", "batch_size", "n_epochs", "learning_rate", "logp_reduction", "eta", "anchor", "clip_range", "beta")
        if grouped
        else ("n_steps", "batch_size", "n_epochs", "learning_rate", "clip_range", "gamma", "gae_lambda", "ent_coef", "use_sde", "sde_sample_freq")
    )
    settings = {k: _plain(getattr(model, k)) for k in names if hasattr(model, k)}
    settings.update(n_envs=int(model.n_envs), policy=type(model.policy).__name__)
    if grouped:
        settings["group_mode"] = model.resolve_group_mode()
    return settings


def run_one(run: Run, progress: Any = None) -> dict[str, Any]:
    """Train ``run`` to its budget; its greedy eval returns on the grid, seconds, settings."""
    grid = eval_grid(run.timesteps, run.eval_every)

    def report(step: int, mean_return: float) -> None:
        if progress is not None:
            try:
                progress[run.name] = grid.index(step) + 1
            except Exception:  # progress display only: never fail a run for it
                pass

    started = time.perf_counter()
    model, eval_env = build_agent(run)
    callback = _make_callback(eval_env, grid, run.n_eval_episodes, report)
    try:
        model.learn(run.timesteps, callback=callback)
    finally:
        eval_env.close()
        model.get_env().close()
    if len(callback.returns) < len(grid):
        raise RuntimeError(f"{run.name}: stopped at {model.num_timesteps} steps, {len(callback.returns)}/{len(grid)} evaluations")
    return {
        "returns": callback.returns,
        "seconds": time.perf_counter() - started,
        "num_timesteps": int(model.num_timesteps),
        "resolved": resolved_settings(model),
    }


def run_job(run: Run, progress: Any = None) -> dict[str, Any]:
    """The sweep's job function: ``run_one``'s record, or the run's error as a record
    (``failed``, ``traceback``), so one failing run neither stops nor vanishes from the
    benchmark. Both are cached with the run's ``spec``; a rerun retries failed runs."""
    record: dict[str, Any] = {"spec": run.spec(), "code_version": code_version()}
    started = time.perf_counter()
    try:
        record.update(run_one(run, progress))
    except Exception as exc:  # KeyboardInterrupt (the sweep's interrupt) still stops it
        record.update(failed=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc(),
                      seconds=time.perf_counter() - started)
    return record


# --------------------------------------------------------------------------- the cache


class CacheConfigError(ValueError):
    """Cache files under OUT were made with another config than the one asked for."""


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value))


def read_cache(runs: list[Run], out: Path) -> dict[str, dict]:
    """The cached records of ``runs`` (finished or failed), by run name.

    Raises :class:`CacheConfigError` naming the files whose config differs from the
    run's (a changed budget, eval setting or hyperparameter is never mixed in). A file
    that cannot be read is left to ``zoo.jobs.sweep`` (which warns and runs the job again).
    """
    found, differing = {}, []
    for run in runs:
        path = run.cache_path(out)
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(record, dict):
            continue
        want, have = _jsonable(run.spec()), record.get("spec")
        if have != want:
            have = have if isinstance(have, dict) else {}
            keys = sorted(k for k in set(want) | set(have) if have.get(k) != want.get(k))
            differing.append(f"{path} (differs in {', '.join(keys)})")
            continue
        found[run.name] = record
    if differing:
        raise CacheConfigError(
            f"{len(differing)} cache file(s) hold a run config that differs from the one asked for: "
            + "; ".join(differing[:3]) + (f"; and {len(differing) - 3} more" if len(differing) > 3 else "")
            + ". Use another --out, the same settings, or delete those files."
        )
    return found


# --------------------------------------------------------------------------- summaries


def summarize_env(env_name: str, runs: list[Run], records: Mapping[str, dict], methods: list[str]) -> dict:
    """Per method: ``classic_control.summarize_method`` over the seeds that finished, plus
    the resolved settings and the failed seeds; and which methods match PPO-zoo."""
    env = ENVS[env_name]
    steps = eval_grid(runs[0].timesteps, runs[0].eval_every)
    summaries: dict[str, dict] = {}
    for method in methods:
        mine = [r for r in runs if r.method == method and r.name in records]
        done = [r for r in mine if "failed" not in records[r.name]]
        failures = [{"seed": r.seed, "error": records[r.name]["failed"]} for r in mine if r not in done]
        hyper = method_hyperparameters(env_name, method)
        if done:
            summary = summarize_method(steps, [records[r.name] for r in done], [r.seed for r in done], env.threshold, hyper)
            summary["resolved"] = records[done[0].name].get("resolved", {})
        else:
            summary = {"settings": hyper, "seeds": [], "steps": steps}
        summary["failures"] = failures
        summaries[method] = summary
    return {
        "threshold": env.threshold,
        "timesteps": runs[0].timesteps,
        "default_timesteps": env.timesteps,
        "eval_every": runs[0].eval_every,
        "note": env.note,
        "ppo_zoo": method_hyperparameters(env_name, "ppo_zoo")["source"],
        "methods": summaries,
        "matches_ppo_zoo": {m: matches_ppo_zoo(summaries, m) for m in methods if m != "ppo_zoo"},
    }


def matches_ppo_zoo(summaries: Mapping[str, dict], method: str) -> bool | None:
    """``MATCH_RULE`` for ``method`` (None when either side has no finished seed)."""
    ours, ppo = summaries.get(method, {}), summaries.get("ppo_zoo", {})
    if not ours.get("seeds") or not ppo.get("seeds"):
        return None
    return bool(ours["last_evals_mean_return"] >= ppo["last_evals_mean_return"] - ppo["last_evals_se"])


def match_lines(envs: Mapping[str, dict]) -> dict[str, dict]:
    """Per method compared: on how many envs it matches PPO-zoo, and the sentence."""
    lines = {}
    for method in ("tpo", "grpo"):
        verdicts = {e: v["matches_ppo_zoo"][method] for e, v in envs.items() if v["matches_ppo_zoo"].get(method) is not None}
        if not any(method in v["matches_ppo_zoo"] for v in envs.values()):
            continue
        n = sum(verdicts.values())
        label = METHOD_LABELS[method].split()[0]
        lines[method] = {
            "matches": n,
            "compared": len(verdicts),
            "envs": [e for e, ok in verdicts.items() if ok],
            "line": f"{label} with defaults matches PPO-zoo on {n} of {len(verdicts)} envs"
            if verdicts
            else f"{label} with defaults: no env to compare with PPO-zoo (both need finished runs)",
        }
    return lines


def _row(env_name: str, env: dict, key: str, m: dict) -> str:
    label = METHOD_LABELS[key]
    if not m["seeds"]:
        errors = "; ".join(f"seed {f['seed']}: {f['error']}" for f in m["failures"])
        errors = errors.replace("|", "/").replace("\n", " ")  # keep the table row one row
        text = f"all runs failed ({errors})" if errors else "no run in the cache"
        return f"| {env_name} | {label} | {env['timesteps']} | {text} | | | | | |"
    reached = sum(s is not None for s in m["steps_to_threshold_per_seed"])
    to_th = m["steps_to_threshold"]
    verdict = env["matches_ppo_zoo"].get(key)
    failed = f" ({len(m['failures'])} failed)" if m["failures"] else ""
    cells = [
        env_name,
        label,
        str(env["timesteps"]),
        f"{m['final_mean_return']:.2f} +- {m['final_se']:.2f}",
        f"{m['last_evals_mean_return']:.2f} +- {m['last_evals_se']:.2f}",
        f"{'-' if to_th is None else to_th} (>= {env['threshold']:g})",
        f"{reached}/{len(m['seeds'])}{failed}",
        f"{np.mean(m['seconds']):.0f}",
        "" if verdict is None else ("yes" if verdict else "no"),
    ]
    return "| " + " | ".join(cells) + " |"


TABLE_HEAD = (
    "| env | method | env steps | final return (mean +- s.e.) | "
    f"mean of last {LAST_EVALS} evals (+- s.e.) | steps to threshold (seed mean) | "
    "seeds reaching threshold | wall s per run | matches PPO-zoo |\n"
    "|---|---|---|---|---|---|---|---|---|"
)


def protocol(cfg: dict) -> str:
    """The page's opening paragraph: what each method is and how it was measured."""
    return (
        f"Every method gets the same env-step budget per env ({cfg['timesteps_scale']:g} x the "
        f"env's default); {cfg['n_seeds']} seeds; the greedy policy is evaluated on "
        f"{cfg['n_eval_episodes']} episodes of a separately seeded eval env every "
        f"{cfg['eval_every_fraction']:g} of the budget. TPO and GRPO: `TPO(\"MlpPolicy\", env, seed=s)`, "
        "no other argument. PPO-zoo: SB3 PPO with rl-zoo3's hyperparameters for the env "
        f"(rl-zoo3 {cfg['rl_zoo3_version']}); its `n_timesteps` is dropped (every method gets this "
        "budget, `lin_` schedules anneal over it) and `VecNormalize` statistics are shared with "
        "the eval env, frozen."
    )


def budget_remark(timesteps: int, hyperparameters: Mapping[str, Any]) -> str:
    """Where the benchmark's budget is below the ``n_timesteps`` rl-zoo3 tuned the entry for,
    a clause saying so (PPO-zoo is then read before the end of the run it was tuned for);
    otherwise ''."""
    tuned = (hyperparameters.get("dropped") or {}).get("n_timesteps")
    if tuned is None or timesteps >= float(tuned):
        return ""
    return (
        f"; the budget here, {timesteps:,} env steps, is {timesteps / float(tuned):.3g} x the "
        f"n_timesteps rl-zoo3 tuned this entry for ({float(tuned):,.0f})"
    )


def markdown(result: dict) -> str:
    """The summary page: protocol, table, match lines, PPO-zoo settings, skipped envs."""
    title = "# Gym defaults: TPO and GRPO with default hyperparameters vs PPO with rl-zoo3's tuned ones"
    cfg = result["config"]
    lines = [title, "", protocol(cfg), "", TABLE_HEAD]
    for env_name, env in result["envs"].items():
        lines += [_row(env_name, env, key, m) for key, m in env["methods"].items()]
    lines += ["", f"Matches PPO-zoo: {MATCH_RULE}.", ""]
    lines += [f"**{s['line']}**" + (f" ({', '.join(s['envs'])})." if s["envs"] else ".") for s in result["summary"].values()]
    lines += ["", "## PPO-zoo hyperparameters per env", ""]
    for env_name in result["envs"]:
        hp = cfg["hyperparameters"].get(env_name, {}).get("ppo_zoo")
        if hp is None:
            continue
        if hp["zoo_entry"] is None:
            lines.append(f"- {env_name}: ppo_zoo: {NO_ZOO_ENTRY}.")
            continue
        norm = f", VecNormalize({json.dumps(hp['normalize_kwargs'])})" if hp["normalize"] else ""
        lines.append(
            f"- {env_name}: {hp['source']}: n_envs {hp['n_envs']}{norm}, PPO `{json.dumps(hp['ppo_kwargs'])}`; "
            f"dropped `{json.dumps(hp['dropped'])}`{budget_remark(result['envs'][env_name]['timesteps'], hp)}."
        )
    if result["skipped"]:
        lines += ["", "## Skipped envs", ""]
        lines += [f"- {e}: {why}" for e, why in result["skipped"].items()]
    if result["failures"]:
        lines += ["", "## Failed runs", ""]
        lines += [f"- {f['id']}: {f['error']}" for f in result["failures"]]
    if result["missing"]:
        lines += ["", f"## Not in the cache ({len(result['missing'])} runs)", ""]
        lines += [f"- {name}" for name in result["missing"]]
    where = " (report from the cache only)" if cfg["cached_only"] else ""
    lines.append(
        "\nAll returns come from greedy (deterministic) evaluation. Steps to threshold: the first "
        "evaluation at which the seed-mean return is at or above the env's threshold; at step 0 "
        "the policy is untrained and may already score high by chance.\n\n"
        f"Total wall time: {result['total_seconds']:.0f} s, {cfg['workers']} worker(s){where}; "
        f"compute time (sum over runs): {result['compute_seconds']:.0f} s."
    )
    return "\n".join(lines) + "\n"


def plot(result: dict, path: Path) -> None:
    """One panel per env: greedy return mean +- s.e. against env steps, a line per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    envs = result["envs"]
    cols = min(3, max(1, len(envs)))
    rows = math.ceil(max(1, len(envs)) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.6 * rows), squeeze=False)
    for ax in axes.flat[len(envs):]:
        ax.set_visible(False)
    for ax, (env_name, env) in zip(axes.flat, envs.items()):
        for key, m in env["methods"].items():
            if m["seeds"]:
                x, mean, se = (np.asarray(m[k], dtype=float) for k in ("steps", "mean", "se"))
                color = ax.plot(x, mean, label=METHOD_LABELS[key])[0].get_color()
                ax.fill_between(x, mean - se, mean + se, color=color, alpha=0.2)
        ax.axhline(env["threshold"], color="grey", lw=0.8, ls=":")
        ax.set(title=env_name, xlabel="env steps", ylabel="greedy eval return")
        if ax.get_legend_handles_labels()[0]:  # (no line where every run failed)
            ax.legend(loc="best", fontsize="small")
    fig.suptitle(f"{result['config']['n_seeds']} seeds, mean +- s.e.")
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)


def write_outputs(result: dict, out_dir: Path) -> dict[str, Path]:
    """``gym_defaults.json``, ``.png`` and ``.md`` in ``out_dir``, each written atomically."""
    paths = {ext: Path(out_dir) / f"{NAME}.{ext}" for ext in ("json", "png", "md")}
    write_json_atomic(paths["json"], result)
    plot(result, paths["png"])
    with atomic_path(paths["md"]) as tmp:
        tmp.write_text(markdown(result))
    return paths


# ------------------------------------------------------------------------------ driver


def fraction(text: str) -> float:
    """argparse type: a number in (0, 1], with an error naming the bad value."""
    value = positive_float(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"expected a fraction in (0, 1], got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python benchmarks/gym_defaults.py", description=__doc__.split("\n")[0])
    parser.add_argument("--envs", nargs="+", default=list(ENVS), choices=list(ENVS), metavar="ENV",
                        help="environments (default: all): " + ", ".join(ENVS))
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS), metavar="METHOD",
                        help="methods (default: all): " + ", ".join(METHODS))
    parser.add_argument("--seeds", type=positive_int, default=5, help="seeds 0..N-1 per env and method")
    parser.add_argument("--workers", type=positive_int, default=2, help="parallel processes (1: in this process)")
    parser.add_argument("--timesteps-scale", type=positive_float, default=1.0,
                        help="multiplies every env's default budget (e.g. 0.1 for a quick look)")
    parser.add_argument("--eval-every-fraction", type=fraction, default=0.05,
                        help="evaluate every this fraction of the budget (0.05: 20 evaluations)")
    parser.add_argument("--n-eval-episodes", type=positive_int, default=10, help="episodes per evaluation")
    parser.add_argument("--out", type=Path, default=Path("docs/results"), help="output folder")
    parser.add_argument("--cached-only", action="store_true",
                        help="train nothing: report on the runs cached under OUT/cache/gym_defaults")
    parser.add_argument("--quiet", action="store_true", help="no progress output")
    return parser


def plan_runs(args: argparse.Namespace, env_names: list[str]) -> list[Run]:
    """Every (env, seed, method) run, methods interleaved so the workers share them evenly."""
    runs = []
    for env_name in env_names:
        timesteps = max(1, round(ENVS[env_name].timesteps * args.timesteps_scale))
        eval_every = max(1, round(timesteps * args.eval_every_fraction))
        hyper = {m: method_hyperparameters(env_name, m) for m in args.methods}
        for seed in range(args.seeds):
            runs += [Run(env_name, m, seed, timesteps, eval_every, args.n_eval_episodes, hyper[m]) for m in args.methods]
    return runs


def main(argv: list[str] | None = None) -> dict:
    """Run (or resume, or with ``--cached-only`` only report on) the benchmark; write and
    return the result."""
    parser = build_parser()
    args = parser.parse_args(argv)
    args.envs, args.methods = list(dict.fromkeys(args.envs)), list(dict.fromkeys(args.methods))
    if "ppo_zoo" in args.methods and zoo_ppo_file() is None:
        parser.error("--methods ppo_zoo reads rl-zoo3's hyperparams/ppo.yml: install rl-zoo3 (pip install -e '.[zoo]')")
    skipped = {e: why for e in args.envs if (why := missing_requirement(e)) is not None}
    env_names = [e for e in args.envs if e not in skipped]
    if not env_names:
        parser.error("no env can run here: " + "; ".join(f"{e} {why}" for e, why in skipped.items()))
    out = Path(args.out)
    runs = plan_runs(args, env_names)
    cached = read_cache(runs, out)
    t0 = time.perf_counter()
    backend: dict = {}
    if args.cached_only:
        if not cached:
            raise SystemExit(f"--cached-only: none of the {len(runs)} runs is cached under {out / 'cache' / NAME}")
        records = cached
    else:
        for run in runs:  # failed runs are tried again
            if "failed" in cached.get(run.name, {}):
                run.cache_path(out).unlink(missing_ok=True)
        records = run_sweep(runs, run_job, out, workers=args.workers, progress=not args.quiet, desc=NAME,
                            describe=lambda run: run.name.replace("__", " "), info=backend)
    total = time.perf_counter() - t0
    envs = {e: summarize_env(e, [r for r in runs if r.env == e], records, args.methods) for e in env_names}
    result: dict[str, Any] = {
        "benchmark": NAME,
        "config": {
            "envs": env_names,
            "methods": args.methods,
            "n_seeds": args.seeds,
            "timesteps_scale": args.timesteps_scale,
            "timesteps": {e: envs[e]["timesteps"] for e in env_names},
            "eval_every_fraction": args.eval_every_fraction,
            "eval_every": {e: envs[e]["eval_every"] for e in env_names},
            "n_eval_episodes": args.n_eval_episodes,
            "eval_deterministic": True,
            "eval_seed_offset": EVAL_SEED_OFFSET,
            "workers": args.workers,
            "torch_threads_per_run": 1,
            "cached_only": args.cached_only,
            "backend": backend,
            "rl_zoo3_version": zoo_version(),
            "hyperparameters": {e: {m: method_hyperparameters(e, m) for m in args.methods} for e in env_names},
            "match_rule": MATCH_RULE,
        },
        "envs": envs,
        "summary": match_lines(envs),
        "skipped": skipped,
        "failures": [{"id": r.name, "env": r.env, "method": r.method, "seed": r.seed,
                      "error": records[r.name]["failed"], "traceback": records[r.name].get("traceback", "")}
                     for r in runs if "failed" in records.get(r.name, {})],
        "missing": [r.name for r in runs if r.name not in records],
        "total_seconds": round(total, 1),  # this call's (near 0 for a --cached-only report)
        "compute_seconds": round(sum(r.get("seconds", 0.0) for r in records.values()), 1),
    }
    paths = write_outputs(result, out)
    if not args.quiet:
        print(paths["md"].read_text() + "\nwrote " + ", ".join(map(str, paths.values())))
    return result


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except CacheConfigError as exc:
        sys.exit(f"error: {exc}")
