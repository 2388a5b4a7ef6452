"""Environments as the agents see them: an SB3 ``VecEnv``.

``make_training_env`` turns whatever the user passes (an id, a ``gym.Env``, a Gymnasium
``VectorEnv`` or an SB3 ``VecEnv``) into an SB3 ``VecEnv``. Environments registered with
a native ``vector_entry_point`` (every tpo_gym env) become one numpy-vectorized env
wrapped by :class:`GymnasiumVecEnv`, so a rollout step is one call, not a Python loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.envs.registration import load_env_creator
from gymnasium.vector import AutoresetMode, VectorEnv
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv, VecMonitor
from stable_baselines3.common.vec_env.base_vec_env import VecEnvIndices, VecEnvStepReturn


class GymnasiumVecEnv(VecEnv):
    """SB3 ``VecEnv`` view of a Gymnasium ``VectorEnv`` with same-step autoreset.

    Finished sub-envs are already reset when ``step`` returns (both APIs agree on that);
    their last observation goes to ``info["terminal_observation"]`` as SB3 expects.
    ``score_candidates`` is forwarded to the vector env when it implements the protocol.
    """

    def __init__(self, venv: VectorEnv):
        mode = venv.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
        if mode != AutoresetMode.SAME_STEP:
            raise ValueError(
                f"GymnasiumVecEnv needs a vector env with autoreset_mode SAME_STEP; got {mode}. "
                "Build it with gym.make_vec(id, n, vector_kwargs={'autoreset_mode': "
                "gymnasium.vector.AutoresetMode.SAME_STEP}) or pass an SB3 VecEnv instead."
            )
        self.venv = venv
        super().__init__(venv.num_envs, venv.single_observation_space, venv.single_action_space)
        self._actions: np.ndarray | None = None
        self._seed: int | None = None
        self._options: dict | None = None

    # -- VecEnv API ------------------------------------------------------------
    def reset(self):
        obs, info = self.venv.reset(seed=self._seed, options=self._options)
        self._seed, self._options = None, None
        self.reset_infos = self._split_info(info, np.ones(self.num_envs, dtype=bool))
        return obs

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = np.asarray(actions)

    def step_wait(self) -> VecEnvStepReturn:
        obs, rewards, terminated, truncated, info = self.venv.step(self._actions)
        dones = np.logical_or(terminated, truncated)
        infos = self._split_info(info, dones)
        final_obs = info.get("final_obs")
        for i in np.flatnonzero(dones):
            infos[i]["terminal_observation"] = final_obs[i] if final_obs is not None else obs[i]
            infos[i]["TimeLimit.truncated"] = bool(truncated[i] and not terminated[i])
        return obs, np.asarray(rewards, dtype=np.float32), dones, infos

    def _split_info(self, info: dict, done: np.ndarray) -> list[dict[str, Any]]:
        """Gymnasium's dict of arrays (with ``_key`` masks) -> SB3's list of dicts."""
        infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        final_info = info.get("final_info", {})
        for source in (info, final_info):
            for key, values in source.items():
                if key.startswith("_") or key in ("final_obs", "final_info"):
                    continue
                present = source.get(f"_{key}", np.ones(self.num_envs, dtype=bool))
                for i in np.flatnonzero(present):
                    infos[i][key] = values[i]
        return infos

    def seed(self, seed: int | None = None) -> Sequence[None | int]:
        self._seed = seed
        return [None if seed is None else seed + i for i in range(self.num_envs)]

    def set_options(self, options: list[dict] | dict | None = None) -> None:
        self._options = options if isinstance(options, dict) or options is None else options[0]

    def close(self) -> None:
        self.venv.close()

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        value = getattr(self.venv, attr_name)
        return [value for _ in self._get_indices(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        setattr(self.venv, attr_name, value)

    def env_method(self, method_name: str, *method_args, indices: VecEnvIndices = None, **method_kwargs) -> list[Any]:
        raise NotImplementedError(
            f"{type(self.venv).__name__} is one vectorized env: per-sub-env method calls "
            f"({method_name!r}) are not available; call methods of the vector env itself"
        )

    def env_is_wrapped(self, wrapper_class, indices: VecEnvIndices = None) -> list[bool]:
        return [False for _ in self._get_indices(indices)]

    def get_images(self):
        return [None for _ in range(self.num_envs)]

    # -- snapshots (exact resume) -------------------------------------------------
    def get_state(self) -> dict[str, Any]:
        """The vector env's snapshot (``get_state()`` of tpo_gym envs), for checkpoints."""
        if not hasattr(self.venv, "get_state"):
            raise AttributeError(f"{type(self.venv).__name__} cannot snapshot its state (no get_state)")
        return self.venv.get_state()

    def set_state(self, state: dict[str, Any]) -> None:
        if not hasattr(self.venv, "set_state"):
            raise AttributeError(f"{type(self.venv).__name__} cannot restore a state (no set_state)")
        self.venv.set_state(state)

    # -- candidate-scoring protocol ---------------------------------------------
    def score_candidates(self, actions: np.ndarray) -> np.ndarray:
        if not hasattr(self.venv, "score_candidates"):
            raise AttributeError(f"{type(self.venv).__name__} does not implement score_candidates")
        return self.venv.score_candidates(actions)


def native_vector_entry(spec: gym.envs.registration.EnvSpec | None) -> bool:
    """Whether the registered env has its own vector implementation with same-step autoreset.

    (Gymnasium's own vector CartPole resets on the next step and cannot replay a seed
    per sub-env, so such envs go through SB3's ``make_vec_env`` instead.)
    """
    if spec is None or spec.vector_entry_point is None:
        return False
    entry = spec.vector_entry_point
    creator = load_env_creator(entry) if isinstance(entry, str) else entry
    metadata = getattr(creator, "metadata", {}) or {}
    return metadata.get("autoreset_mode") == AutoresetMode.SAME_STEP


def make_training_env(env: Any, n_envs: int | None, seed: int | None = None) -> VecEnv:
    """Turn an id, ``gym.Env``, Gymnasium ``VectorEnv`` or SB3 ``VecEnv`` into a ``VecEnv``.

    * an id or a registered ``gym.Env`` with a native vector implementation: the native
      vector env with ``n_envs`` sub-envs built from the spec (the given env instance
      serves as the template: its id and kwargs);
    * another id, or a registered ``gym.Env`` with ``n_envs > 1``: SB3's ``make_vec_env``
      (``DummyVecEnv`` of ``Monitor``-wrapped copies);
    * an unregistered ``gym.Env``: a one-env ``DummyVecEnv`` around it;
    * a Gymnasium ``VectorEnv`` (same-step autoreset) or an SB3 ``VecEnv``: used as is.
    """
    if isinstance(env, VecEnv):
        return env
    if isinstance(env, VectorEnv):
        return VecMonitor(GymnasiumVecEnv(env))
    if isinstance(env, str):
        spec = gym.spec(env)
        kwargs: dict = {}
        instance = None
    elif isinstance(env, gym.Env):
        spec = env.spec
        kwargs = dict(spec.kwargs) if spec is not None else {}
        instance = env
    else:
        raise ValueError(
            f"env must be an env id, a gymnasium.Env, a gymnasium VectorEnv or an SB3 VecEnv; "
            f"got {type(env).__name__}"
        )
    n = 1 if n_envs is None else int(n_envs)
    if n < 1:
        raise ValueError(f"n_envs must be >= 1; got {n_envs}")
    if native_vector_entry(spec):
        venv = gym.make_vec(spec.id, num_envs=n, vectorization_mode="vector_entry_point", **kwargs)
        return VecMonitor(GymnasiumVecEnv(venv))
    if instance is not None and (spec is None or n == 1):
        from stable_baselines3.common.monitor import Monitor

        return DummyVecEnv([lambda: Monitor(instance)])
    return make_vec_env(spec.id, n_envs=n, seed=seed, env_kwargs=kwargs)
