"""A ``VecEnv`` class for rl-zoo3 that builds an env's native numpy vector env.

rl-zoo3 makes its environments with SB3's ``make_vec_env(..., vec_env_cls=cls)``, which
calls ``cls(env_fns)`` with one thunk per sub-env; ``DummyVecEnv`` then steps that many
single envs in a Python loop. :class:`NativeVecEnv` takes the same thunks but builds the
env's registered native vector env instead (``gym.make_vec(id, num_envs=len(env_fns),
vectorization_mode="vector_entry_point", **kwargs)``, every ``tpo_gym`` env has one), so
one rollout step is one numpy call, exactly what the agents build for themselves
(:func:`tpo_agents.rollout.make_training_env`).

How it reads the thunks: it calls the first one (a ``Monitor``-wrapped ``gym.make``
result) to learn the env id, its keyword arguments and the monitor file, closes it and
builds the vector env from the spec. Episode statistics are logged by one ``VecMonitor``
to the file the first sub-env's ``Monitor`` would have written (``0.monitor.csv`` in
rl-zoo3's run folder), with one flush per vector step rather than per episode.

When the env has no native vector implementation with same-step autoreset, or the thunk
adds wrappers beyond ``Monitor`` and ``gym.make``'s own (an ``env_wrapper`` in the
hyperparameters), a native vector env cannot reproduce it: the class then falls back to
``DummyVecEnv(env_fns)`` and warns.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
from gymnasium.wrappers import OrderEnforcing, PassiveEnvChecker, TimeLimit
from stable_baselines3.common.monitor import Monitor, ResultsWriter
from stable_baselines3.common.vec_env import DummyVecEnv, VecMonitor
from stable_baselines3.common.vec_env.base_vec_env import VecEnvStepReturn

from tpo_agents.rollout import GymnasiumVecEnv, native_vector_entry

# Wrappers gym.make adds by itself; anything else cannot be rebuilt natively.
_MAKE_WRAPPERS = (OrderEnforcing, PassiveEnvChecker, TimeLimit)


class _DeferredFlushWriter(ResultsWriter):
    """SB3's monitor-file writer, flushed by the caller once per vector step (SB3's own
    writer flushes after every row: a vector step can end hundreds of episodes)."""

    def write_row(self, epinfo: dict[str, float]) -> None:
        self.logger.writerow(epinfo)

    def flush(self) -> None:
        self.file_handler.flush()


class NativeVecEnv(VecMonitor):
    """``VecEnv`` for ``make_vec_env(..., vec_env_cls=NativeVecEnv)`` and rl-zoo3.

    ``NativeVecEnv(env_fns)`` is ``VecMonitor(GymnasiumVecEnv(native vector env))``
    with ``len(env_fns)`` sub-envs (see the module docstring); for envs it cannot build
    natively it returns ``DummyVecEnv(env_fns)`` instead.

    :param env_fns: thunks as ``make_vec_env`` passes them (each returns one env).
    """

    def __new__(cls, env_fns: Sequence[Callable[[], gym.Env]], **kwargs: Any):
        if not env_fns:
            raise ValueError("NativeVecEnv needs at least one env thunk; got an empty list")
        template = env_fns[0]()
        try:
            plan = _native_plan(template)
        finally:
            template.close()
        if isinstance(plan, str):
            warnings.warn(f"NativeVecEnv: {plan}; using DummyVecEnv instead", stacklevel=2)
            return DummyVecEnv(list(env_fns))
        self = super().__new__(cls)
        self._plan = plan
        return self

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]], **kwargs: Any):
        if kwargs:
            raise ValueError(f"NativeVecEnv takes no vec_env_kwargs; got {sorted(kwargs)}")
        spec, monitor_file, info_keywords = self._plan
        venv = gym.make_vec(
            spec.id, num_envs=len(env_fns), vectorization_mode="vector_entry_point", **spec.kwargs
        )
        super().__init__(GymnasiumVecEnv(venv), info_keywords=info_keywords)
        self.env_id = spec.id
        if monitor_file is not None:
            header = {"t_start": self.t_start, "env_id": spec.id}
            self.results_writer = _DeferredFlushWriter(monitor_file, header=header, extra_keys=info_keywords)

    def step_wait(self) -> VecEnvStepReturn:
        result = super().step_wait()
        if self.results_writer is not None:
            self.results_writer.flush()
        return result


def _native_plan(template: gym.Env) -> tuple[gym.envs.registration.EnvSpec, str | None, tuple] | str:
    """(spec, monitor file, info keywords) to rebuild ``template`` natively, or the
    reason it cannot be."""
    monitor_file, info_keywords = None, ()
    env = template
    if isinstance(env, Monitor):
        if env.results_writer is not None:
            monitor_file = env.results_writer.file_handler.name
        info_keywords = tuple(env.info_keywords)
        env = env.env
    while isinstance(env, gym.Wrapper):
        if not isinstance(env, _MAKE_WRAPPERS):
            return f"{type(env).__name__} wraps the env and has no native vector form"
        env = env.env
    spec = env.spec
    if spec is None or not native_vector_entry(spec):
        name = spec.id if spec is not None else type(env).__name__
        return f"{name} has no native vector env with same-step autoreset"
    return spec, monitor_file, info_keywords


def is_native(env_id: str) -> bool:
    """Whether ``env_id`` is registered with a native same-step-autoreset vector env."""
    return native_vector_entry(gym.spec(env_id))


__all__ = ["NativeVecEnv", "is_native"]
