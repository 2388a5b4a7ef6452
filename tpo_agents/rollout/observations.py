"""Batches of observations as the rollout holds them: an array, or a dict of arrays.

A vector env returns a batch of observations with a leading batch axis: one array for
``Box`` / ``Discrete`` / image spaces, and for ``Dict`` spaces a dict of such arrays, one per
key, each with the same leading axis (SB3's convention: ``DummyVecEnv``, ``VecTransposeImage``
and ``BasePolicy.obs_to_tensor`` all take and give that form). Everywhere a collector, the
critic or the branch scorer stacks, stores, copies or indexes observations, it goes through
these helpers, so the two forms flow the same way. On arrays each helper is exactly the
numpy call it replaces (``np.concatenate``, ``np.array(copy=True)``, ``obs[index]``, ...).

Images are channel-first in the rollout when the training env is wrapped in SB3's
``VecTransposeImage`` (:func:`tpo_agents.rollout.envs.transpose_images`); observations a
sub-env gives directly (a reset through ``env_method``) are put in the same layout by
:func:`as_vec_obs`, and the policy's ``obs_to_tensor`` transposes a channel-last image itself
(SB3's ``maybe_transpose``), as it does in ``predict``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from stable_baselines3.common.vec_env import VecEnv, VecEnvWrapper, VecTransposeImage

__all__ = [
    "Obs",
    "as_vec_obs",
    "concat_obs",
    "copy_obs",
    "obs_buffer",
    "obs_len",
    "put_obs",
    "set_obs_row",
    "stack_obs",
    "take_obs",
]

Obs = Any
"""A batch of observations: ``np.ndarray`` ``[N, ...]`` or ``dict[str, np.ndarray [N, ...]]``."""


def _is_dict(obs: Obs) -> bool:
    return isinstance(obs, dict)


def obs_len(obs: Obs) -> int:
    """The batch size (the leading axis) of a batch of observations."""
    if _is_dict(obs):
        return len(next(iter(obs.values())))
    return len(obs)


def concat_obs(batches: Sequence[Obs]) -> Obs:
    """Batches joined along the batch axis (``np.concatenate(..., axis=0)``, per key for dicts)."""
    if batches and _is_dict(batches[0]):
        return {k: np.concatenate([np.asarray(b[k]) for b in batches], axis=0) for k in batches[0]}
    return np.concatenate([np.asarray(b) for b in batches], axis=0)


def stack_obs(items: Sequence[Obs]) -> Obs:
    """Single observations (no batch axis) stacked into a batch (``np.stack``, per key)."""
    if items and _is_dict(items[0]):
        return {k: np.stack([np.asarray(o[k]) for o in items]) for k in items[0]}
    return np.stack(items)


def take_obs(obs: Obs, index: Any) -> Obs:
    """``obs[index]`` along the batch axis (a slice, an int array or a bool mask), per key."""
    if _is_dict(obs):
        return {k: np.asarray(v)[index] for k, v in obs.items()}
    return np.asarray(obs)[index]


def copy_obs(obs: Obs) -> Obs:
    """A writable copy (``np.array(obs, copy=True)``, per key)."""
    if _is_dict(obs):
        return {k: np.array(v, copy=True) for k, v in obs.items()}
    return np.array(obs, copy=True)


def set_obs_row(obs: Obs, i: int, value: Obs) -> None:
    """``obs[i] = value`` in place, for one single observation ``value`` (per key)."""
    if _is_dict(obs):
        for k, v in obs.items():
            v[i] = value[k]
    else:
        obs[i] = value


def obs_buffer(like: Obs, size: int) -> Obs:
    """Zeros for ``size`` observations shaped and typed like the batch ``like``."""
    if _is_dict(like):
        return {k: np.zeros((size, *np.shape(v)[1:]), dtype=np.asarray(v).dtype) for k, v in like.items()}
    like = np.asarray(like)
    return np.zeros((size, *like.shape[1:]), dtype=like.dtype)


def put_obs(buffer: Obs, index: Any, obs: Obs) -> None:
    """``buffer[index] = obs`` in place (per key)."""
    if _is_dict(buffer):
        for k, v in buffer.items():
            v[index] = obs[k]
    else:
        buffer[index] = obs


def _image_transposer(vec_env: VecEnv) -> VecTransposeImage | None:
    env = vec_env
    while isinstance(env, VecEnvWrapper):
        if isinstance(env, VecTransposeImage):
            return env
        env = env.venv
    return None


def as_vec_obs(vec_env: VecEnv, single: Obs) -> Obs:
    """One observation a sub-env gave directly (``env_method("reset")``), in the layout the
    vector env gives: channel-first images under ``VecTransposeImage``, unchanged otherwise."""
    transposer = _image_transposer(vec_env)
    if transposer is None or transposer.skip:
        return single
    return transposer.transpose_observations(single)
