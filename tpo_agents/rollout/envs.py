"""The adapters and wrappers the agents put around a user's env, and their snapshots.

:class:`GymnasiumVecEnv` shows a Gymnasium ``VectorEnv`` (every tpo_gym env's native
vector implementation) as an SB3 ``VecEnv``, so a rollout step is one call, not a Python
loop; :class:`RewardRangeCheck` refuses rewards float32 cannot hold; :func:`transpose_images`
puts channel-last image envs in SB3's ``VecTransposeImage`` (as SB3's ``_wrap_env`` does);
:func:`dummy_vec_env_state` / :func:`restore_dummy_vec_env_state` snapshot an SB3
``DummyVecEnv`` for checkpoints. The training env is assembled from these by
:func:`tpo_agents.rollout.training_env.make_training_env`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.preprocessing import (
    check_for_nested_spaces,
    is_image_space,
    is_image_space_channels_first,
)
from stable_baselines3.common.vec_env import (
    DummyVecEnv,
    VecEnv,
    VecTransposeImage,
    is_vecenv_wrapped,
)
from stable_baselines3.common.vec_env.base_vec_env import VecEnvIndices, VecEnvStepReturn

FLOAT32_MAX = float(np.finfo(np.float32).max)


def check_reward_range(rewards: Any, where: str = "env.step") -> np.ndarray:
    """``rewards`` as float64, refusing finite values that float32 (the rollout's dtype)
    cannot hold: 1e39 would silently become inf."""
    raw = np.asarray(rewards, dtype=np.float64)
    over = np.isfinite(raw) & (np.abs(raw) > FLOAT32_MAX)
    if over.any():
        i = int(np.flatnonzero(over.reshape(-1))[0])
        raise ValueError(
            f"{where} returned a reward of {float(raw.reshape(-1)[i])!r}, beyond float32's range "
            f"(|r| <= {FLOAT32_MAX:.4g}) in which rewards are stored; rescale the rewards"
        )
    return raw


class RewardRangeCheck(gym.Wrapper):
    """Raises on a reward float32 cannot represent, before ``DummyVecEnv`` stores it as inf."""

    def reset(self, **kwargs):
        # Only what the caller gave: ``gym.Wrapper.reset`` would pass ``options=None`` on to
        # envs whose ``reset(self, seed=None)`` takes no options (SB3's Monitor passes
        # ``**kwargs`` through, and DummyVecEnv gives ``options`` only when set).
        return self.env.reset(**kwargs)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        check_reward_range(reward)
        return obs, reward, terminated, truncated, info


def needs_image_transpose(observation_space: spaces.Space) -> bool:
    """Whether SB3 would wrap an env with this observation space in ``VecTransposeImage``:
    a channel-last image, or a ``Dict`` with at least one channel-last image key."""
    if isinstance(observation_space, spaces.Dict):
        return any(
            is_image_space(space) and not is_image_space_channels_first(space)  # type: ignore[arg-type]
            for space in observation_space.spaces.values()
        )
    return is_image_space(observation_space) and not is_image_space_channels_first(observation_space)  # type: ignore[arg-type]


def transpose_images(venv: VecEnv) -> VecEnv:
    """``venv`` in SB3's ``VecTransposeImage`` when its images are channel-last (PyTorch's
    convolutions read channel-first), as SB3's ``BaseAlgorithm._wrap_env`` does; unchanged
    otherwise, and when it is wrapped already. Nested ``Dict`` spaces are refused, as in SB3."""
    check_for_nested_spaces(venv.observation_space)
    if not is_vecenv_wrapped(venv, VecTransposeImage) and needs_image_transpose(venv.observation_space):
        venv = VecTransposeImage(venv)
    return venv


def _below_image_transpose(vec_env: Any) -> Any:
    """The vector env under SB3's stateless ``VecTransposeImage`` wrappers."""
    while isinstance(vec_env, VecTransposeImage):
        vec_env = vec_env.venv
    return vec_env


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
        rewards = check_reward_range(rewards)
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

    def seed(self, seed: int | Sequence[int | None] | None = None) -> Sequence[None | int]:
        """Seeds for the next ``reset``: an int ``s`` seeds sub-env ``i`` with ``s + i``; a
        list gives one seed per sub-env (``None``: keep its stream), which replays the same
        contexts as single envs reset with those seeds (tpo_gym vector envs)."""
        if seed is not None and not isinstance(seed, int | np.integer):
            seeds = [None if x is None else int(x) for x in seed]
            if len(seeds) != self.num_envs:
                raise ValueError(f"seed list must have one entry per sub-env ({self.num_envs}); got {len(seeds)}")
            self._seed = seeds
            return seeds
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


# The DummyVecEnv attributes a step or reset reads besides the sub-envs themselves.
_DUMMY_BUFFERS = ("buf_obs", "buf_dones", "buf_rews", "buf_infos", "actions", "reset_infos", "_seeds", "_options")


# A sub-env snapshot bigger than this (an env holding a dataset) is not put in every checkpoint.
DUMMY_SNAPSHOT_LIMIT_BYTES = 32 * 2**20


def _monitors(env: Any) -> list[Monitor]:
    """The SB3 ``Monitor`` wrappers in ``env``'s wrapper chain, outermost first."""
    found = []
    while isinstance(env, gym.Wrapper):
        if isinstance(env, Monitor):
            found.append(env)
        env = env.env
    return found


@contextlib.contextmanager
def _monitor_logs_detached(envs: Sequence[Any]) -> Iterator[None]:
    """Within the block the sub-envs' ``Monitor`` log writers (open files, which cannot be
    pickled and belong to the live run, not to a snapshot) are set aside."""
    saved = [(m, m.results_writer) for env in envs for m in _monitors(env)]
    for monitor, _ in saved:
        monitor.results_writer = None
    try:
        yield
    finally:
        for monitor, writer in saved:
            monitor.results_writer = writer


def dummy_vec_env_state(vec_env: Any, limit_bytes: int | None = None) -> dict[str, Any] | None:
    """A snapshot of an SB3 ``DummyVecEnv`` whose sub-envs can be pickled (classic control,
    toy text, ...): every sub-env (wrappers, episode counters and random streams included)
    and the vector env's buffers, serialized with cloudpickle. A ``Monitor``'s log file is
    not part of it: a restore keeps logging to the live env's file. None, with a warning saying
    why, when a sub-env cannot be pickled or the snapshot exceeds ``limit_bytes`` (default
    :data:`DUMMY_SNAPSHOT_LIMIT_BYTES`); then a resume starts from a reset. None without a
    warning when ``vec_env`` is not a ``DummyVecEnv``."""
    import warnings

    import cloudpickle

    vec_env = _below_image_transpose(vec_env)
    if not isinstance(vec_env, DummyVecEnv):
        return None
    limit = DUMMY_SNAPSHOT_LIMIT_BYTES if limit_bytes is None else limit_bytes
    buffers = {name: getattr(vec_env, name) for name in _DUMMY_BUFFERS if hasattr(vec_env, name)}
    try:
        with _monitor_logs_detached(vec_env.envs):
            pickled = cloudpickle.dumps((vec_env.envs, buffers))
    except Exception as error:  # noqa: BLE001 - any failure means "no snapshot"
        problem = f"its sub-envs cannot be pickled ({type(error).__name__}: {error})"
    else:
        if len(pickled) <= limit:
            return {"tpo_snapshot": "DummyVecEnv", "env_classes": [type(e.unwrapped).__name__ for e in vec_env.envs],
                    "pickled": pickled}
        problem = f"its snapshot is {len(pickled):,} bytes, over the {limit:,}-byte limit"
    warnings.warn(f"the checkpoint holds no env snapshot: {problem}; resuming with force_reset=False "
                  "will start from a reset env", stacklevel=3)
    return None


def restore_dummy_vec_env_state(vec_env: Any, state: dict[str, Any]) -> None:
    """Put a :func:`dummy_vec_env_state` snapshot into ``vec_env``; ``ValueError`` naming
    the mismatch when it is not a DummyVecEnv of as many sub-envs of the same classes."""
    vec_env = _below_image_transpose(vec_env)
    if not isinstance(vec_env, DummyVecEnv):
        raise ValueError(f"the saved state is a DummyVecEnv's; the env is a {type(vec_env).__name__}")
    have = [type(e.unwrapped).__name__ for e in vec_env.envs]
    if have != state["env_classes"]:
        raise ValueError(f"the saved state holds sub-envs {state['env_classes']}; the env has {have}")
    import cloudpickle

    envs, buffers = cloudpickle.loads(state["pickled"])
    for live, restored in zip(vec_env.envs, envs):  # the snapshot has no log files: keep the live ones
        live_monitors, restored_monitors = _monitors(live), _monitors(restored)
        if len(live_monitors) == len(restored_monitors):
            for a, b in zip(live_monitors, restored_monitors):
                b.results_writer = a.results_writer
    vec_env.envs = envs
    for name, value in buffers.items():
        setattr(vec_env, name, value)
