"""The gym-defaults benchmark's runs: one run (agent and eval env, training with greedy
evaluations), the run cache and the sweep over every (env, method, seed)."""

from __future__ import annotations

import copy
import json
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.gym_defaults.config import (
    ENVS,
    NAME,
    convert_zoo_entry,
    eval_episodes,
    method_hyperparameters,
)
from benchmarks.harness import EVAL_SEED_OFFSET, Run, run_all, train_run
from zoo.jobs.sweep import code_version

# ----------------------------------------------------------------------------- one run


def env_budget(env_name: str, budget: str = "table") -> int:
    """An env's budget of env interactions before ``--timesteps-scale``: the table's
    (``BenchEnv.timesteps``), or with ``budget="zoo"`` the ``n_timesteps`` rl-zoo3 tuned its
    PPO entry for where that is longer (Acrobot, MountainCar, LunarLander: 1M), so PPO-zoo's
    schedules run as tuned."""
    if budget not in BUDGETS:
        raise ValueError(f"budget must be one of {BUDGETS}, got {budget!r}")
    table = ENVS[env_name].timesteps
    if budget == "table" or ENVS[env_name].zoo_key is None:
        return table
    tuned = (method_hyperparameters(env_name, "ppo_zoo").get("dropped") or {}).get("n_timesteps")
    return max(table, int(float(tuned))) if tuned is not None else table


BUDGETS = ("table", "zoo")


def plan_runs(
    env_names: Sequence[str], methods: Sequence[str], seeds: int, timesteps_scale: float,
    eval_every_fraction: float, n_eval_episodes: int, budget: str = "table",
) -> list[Run]:  # fmt: skip
    """Every (env, seed, method) run, methods interleaved so the workers share them evenly."""
    runs = []
    for env_name in env_names:
        timesteps = max(1, round(env_budget(env_name, budget) * timesteps_scale))
        eval_every = max(1, round(timesteps * eval_every_fraction))
        hyper = {m: method_hyperparameters(env_name, m) for m in methods}
        episodes = eval_episodes(env_name, n_eval_episodes)
        for seed in range(seeds):
            runs += [Run(NAME, env_name, m, seed, timesteps, eval_every, episodes, hyper[m]) for m in methods]
    return runs


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


def build_agent(run: Run, constructor_kwargs: dict[str, Any] | None = None):
    """The model of ``run`` and its eval env (a seeded one-env ``VecEnv``);
    ``constructor_kwargs`` go to TPO or GRPO (the table's runs give none: their defaults)."""
    from stable_baselines3.common.env_util import make_vec_env

    env = ENVS[run.env]
    eval_env = make_vec_env(env.make, n_envs=1)
    eval_env.seed(run.seed + EVAL_SEED_OFFSET)
    if run.method in ("tpo", "grpo"):
        from tpo_agents import GRPO, TPO

        cls = TPO if run.method == "tpo" else GRPO
        return cls("MlpPolicy", env.make(), seed=run.seed, **(constructor_kwargs or {})), eval_env
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
        if settings["group_mode"] == "critic":
            settings.update({f"critic_{k}": v for k, v in model.resolved_critic_settings().items()})
    if hasattr(model, "resolved_target_floor"):  # TPO
        settings["target_floor"] = model.resolved_target_floor()
    if hasattr(model, "resolved_policy_floor"):  # GRPO
        settings["policy_floor"] = model.resolved_policy_floor()
    return settings


_CURRENT_DEFAULTS: dict[tuple[str, str], dict[str, Any]] = {}


def current_defaults(run: Run) -> dict[str, Any]:
    """What TPO's or GRPO's defaults resolve to today on ``run``'s env
    (:func:`resolved_settings` of a freshly built agent; once per env and method)."""
    key = (run.env, run.method)
    if key not in _CURRENT_DEFAULTS:
        model, eval_env = build_agent(run)
        _CURRENT_DEFAULTS[key] = _jsonable(resolved_settings(model))
        model.env.close()
        eval_env.close()
    return _CURRENT_DEFAULTS[key]


def made_with_current_defaults(run: Run, record: dict) -> bool:
    """False for a TPO or GRPO record whose agent resolved its defaults otherwise than
    today's code does (a default changed since it ran, as the target floor on critic groups
    did): the row is about the defaults, so it is run again. PPO-zoo records keep."""
    if run.method not in ("tpo", "grpo"):
        return True
    resolved, current = record.get("resolved"), current_defaults(run)
    if isinstance(resolved, dict) and run.method == "grpo":
        resolved = {"policy_floor": 0.0, **resolved}  # made before GRPO's floor was recorded
    if isinstance(resolved, dict) and resolved.get("group_mode") == "critic":
        # Made before the critics' bootstrap, novelty bonus and n-step targets were recorded:
        # every critic bootstrapped from its own target net after one step, with no bonus.
        # Made before the ensemble's size was recorded: four critics (the default until 2026-12-07);
        # before the batch and the steps per transition were: 256 rows, 0.25 steps (sampled
        # actions: 128 rows, 0.2 steps and two next actions since 2026-12-08).
        resolved = {"critic_bootstrap": "own", "critic_novelty": 0.0, "critic_novelty_stop": "never",
                    "critic_n_step": 1, "critic_n_critics": 4, "critic_batch_size": 256,
                    "critic_updates_per_step": 0.25, **resolved}
        if "critic_n_target_actions" in current:  # sampled actions: four next actions until 2026-12-08
            resolved = {"critic_n_target_actions": 4, **resolved}
        if resolved["critic_novelty"] > 0.0:  # made before 2026-12-08's bonus once per critic update
            resolved = {"critic_novelty_training": "per_step", **resolved}
        if (
            resolved.get("critic_novelty_training") == "per_step"
            and {**resolved, "critic_novelty_training": "per_update"} == current
            and stopped_bonus_never_scored(run)
        ):  # a bonus never scored was never trained either: the same run
            resolved = {**resolved, "critic_novelty_training": "per_update"}
        if (
            resolved["critic_novelty"] == 0.0
            and current.get("critic_novelty", 0.0) > 0.0
            and current.get("critic_novelty_stop") == "signal"
            and stopped_bonus_never_scored(run)
        ):  # then no bonus and today's bonus, stopped at the signal, make the same run
            resolved = {**resolved, "critic_novelty": current["critic_novelty"], "critic_novelty_stop": "signal",
                        "critic_novelty_training": "per_update"}
    return resolved == current


_BONUS_NEVER_SCORED: dict[tuple[str, str, int], bool] = {}


def stopped_bonus_never_scored(run: Run) -> bool:
    """Whether ``run`` with today's defaults sees its env's first signal
    (``QCritic.signal_seen``) before the critic's first step scores a novelty bonus: then the
    bonus, stopped at the signal, never enters a TD target and the run is bitwise the run
    without it (``tests/test_novelty.py``). Found by training the run until one of the two
    happens (on most envs within the first episode); once per env, method and seed."""
    key = (run.env, run.method, run.seed)
    if key not in _BONUS_NEVER_SCORED:
        from stable_baselines3.common.callbacks import BaseCallback

        class UntilSignalOrBonus(BaseCallback):
            def _on_step(self) -> bool:  # go on while the bonus is on and not yet scored
                critic = self.model.critic
                return critic is not None and critic.novelty_active and not critic.novelty_scored

        model, eval_env = build_agent(run)
        model.learn(run.timesteps, callback=UntilSignalOrBonus())
        _BONUS_NEVER_SCORED[key] = model.critic is None or not model.critic.novelty_scored
        model.env.close()
        eval_env.close()
    return _BONUS_NEVER_SCORED[key]


def run_one(run: Run, progress: Any = None) -> dict[str, Any]:
    """Train ``run`` to its budget; its greedy eval returns on the grid, seconds, settings."""
    return train_run(run, build_agent, progress, extra=lambda model: {"resolved": resolved_settings(model)})


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
    """Cache files under the cache root were made with another config than the one asked for."""


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value))


def counts_every_interaction(record: dict) -> bool:
    """False for a record made before branch simulation steps were counted: a ``branch``
    run without ``env_steps_total`` had a budget of real env steps while it made many more
    env transitions, so it is not comparable and is run again."""
    return "env_steps_total" in record or record.get("resolved", {}).get("group_mode") != "branch"


def read_cache(runs: list[Run], cache: Path) -> dict[str, dict]:
    """The cached records of ``runs`` (finished or failed) under the cache root ``cache``,
    by run name; records that do not count every env interaction
    (:func:`counts_every_interaction`) or were made under other defaults
    (:func:`made_with_current_defaults`) are left out, as if not cached.

    Raises :class:`CacheConfigError` naming the files whose config differs from the
    run's (a changed budget, eval setting or hyperparameter is never mixed in). A file
    that cannot be read is left to ``zoo.jobs.sweep`` (which warns and runs the job again).
    """
    found, differing = {}, []
    for run in runs:
        path = run.cache_path(cache)
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
        if counts_every_interaction(record) and ("failed" in record or made_with_current_defaults(run, record)):
            found[run.name] = record
    if differing:
        raise CacheConfigError(
            f"{len(differing)} cache file(s) hold a run config that differs from the one asked for: "
            + "; ".join(differing[:3]) + (f"; and {len(differing) - 3} more" if len(differing) > 3 else "")
            + ". Use another --cache (or --out), the same settings, or delete those files."
        )
    return found


# --------------------------------------------------------------------------- the sweep


def run_missing(
    runs: list[Run], cached: dict[str, dict], cache: Path, workers: int, quiet: bool, info: dict | None = None
) -> dict[str, dict]:
    """Every run's record: the cached ones reused, failed ones (``"failed"`` in their cached
    record), uncounted ones (not in ``cached``, see :func:`read_cache`) and uncached ones run
    with :func:`run_job` in ``workers`` processes and cached under the cache root ``cache``."""
    for run in runs:  # failed and uncounted runs are tried again
        if run.name not in cached or "failed" in cached[run.name]:
            run.cache_path(cache).unlink(missing_ok=True)
    return run_all(runs, run_job, cache, workers, quiet=quiet, desc=NAME, info=info)
