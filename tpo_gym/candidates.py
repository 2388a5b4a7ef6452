"""The candidate-scoring protocol: score several candidate actions in the *same* state.

Grouped methods (TPO, GRPO, ...) need the reward of K candidate actions taken from one
state. Environments that can answer this without being stepped offer
``score_candidates(actions)``:

* on an unwrapped single environment, ``actions`` has shape ``[K]`` (integers) and the
  result has shape ``[K]`` (float64): the reward each candidate would get *now*;
* on a vector environment, ``actions`` has shape ``[num_envs, K]`` and the result has shape
  ``[num_envs, K]``: row ``i`` scores the candidates in sub-environment ``i``'s current state.

Scoring never changes the environment: no observation, random-number generator or episode
state moves, so a later ``step``/``reset`` behaves exactly as if scoring had not happened.

This module imports numpy only (never torch).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = [
    "CandidateScoringEnv",
    "check_candidate_actions",
    "score_candidates",
    "supports_candidate_scoring",
]


@runtime_checkable
class CandidateScoringEnv(Protocol):
    """An environment (single or vector) that scores candidate actions without stepping.

    ``score_candidates(actions)``:

    * single env (call it on ``env.unwrapped``): ``actions`` int array ``[K]`` ->
      float64 rewards ``[K]``;
    * vector env: ``actions`` int array ``[num_envs, K]`` -> float64 rewards ``[num_envs, K]``.

    The result is the reward each candidate would receive if it were taken in the current
    state. The call changes no state (observation, RNG, episode progress). Calling it before
    ``reset()`` (or after a single env's episode ended) raises an error; invalid candidates
    raise ``ValueError`` (see :func:`check_candidate_actions`).
    """

    def score_candidates(self, actions: Any) -> np.ndarray:  # pragma: no cover - protocol
        ...


def check_candidate_actions(
    actions: Any,
    n_actions: int,
    expected_leading_shape: Sequence[int] = (),
) -> np.ndarray:
    """Validate a candidate array and return it as an int64 numpy array.

    Args:
        actions: array-like of integer actions with shape ``(*expected_leading_shape, K)``.
        n_actions: size of the Discrete action space; valid actions are ``0..n_actions-1``.
        expected_leading_shape: ``()`` for a single env, ``(num_envs,)`` for a vector env.

    Returns:
        ``np.ndarray`` of dtype int64 and shape ``(*expected_leading_shape, K)`` (a new array).

    Raises:
        ValueError: wrong number of dimensions or leading shape, ``K < 1``, non-integer dtype
            (bool and float arrays are rejected, even with integral values) or an action
            outside ``[0, n_actions)``; the message names the bad value and what was expected.
    """
    leading = tuple(int(d) for d in expected_leading_shape)
    expected_str = f"({', '.join([*map(str, leading), 'K'])})"
    arr = np.asarray(actions)
    if arr.dtype == object:
        raise ValueError(
            f"candidate actions must be an integer array of shape {expected_str}, "
            f"got a ragged or non-numeric value {actions!r}"
        )
    if arr.ndim != len(leading) + 1:
        raise ValueError(
            f"candidate actions must have shape {expected_str} ({len(leading) + 1}-D), "
            f"got shape {arr.shape} ({arr.ndim}-D)"
        )
    if arr.shape[:-1] != leading:
        raise ValueError(
            f"candidate actions must have shape {expected_str} with leading shape {leading}, "
            f"got shape {arr.shape}"
        )
    if arr.shape[-1] < 1:
        raise ValueError(
            f"candidate actions need at least one candidate (K >= 1), got shape {arr.shape}"
        )
    if not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(
            f"candidate actions must have an integer dtype, got dtype {arr.dtype} "
            f"(first value {arr.flat[0].item()!r}); valid actions are integers in [0, {n_actions - 1}]"
        )
    bad = (arr < 0) | (arr >= n_actions)
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(
            f"candidate action {arr[idx].item()!r} at index {idx} is out of range; "
            f"valid actions are integers in [0, {n_actions - 1}]"
        )
    return arr.astype(np.int64, copy=True)


def supports_candidate_scoring(env: Any) -> bool:
    """Whether ``env`` (looking through wrappers via ``env.unwrapped``) has ``score_candidates``."""
    base = getattr(env, "unwrapped", env)
    return callable(getattr(base, "score_candidates", None))


def score_candidates(env: Any, actions: Any) -> np.ndarray:
    """Call ``score_candidates`` on ``env.unwrapped``; ``TypeError`` if it is not offered."""
    if not supports_candidate_scoring(env):
        raise TypeError(
            f"{env!r} does not implement the candidate-scoring protocol "
            "(no `score_candidates` on env.unwrapped)"
        )
    return getattr(env, "unwrapped", env).score_candidates(actions)


GROUP_MODE_KEY = "tpo_group_mode"
"""Env ``metadata`` key naming how grouped agents should form groups by default.

``"all_actions"`` marks bandit-feedback envs (one step per episode, a small action set):
agents form each group from every action with sampled-feedback scores instead of asking
``score_candidates`` for the reward of unsampled actions, which would reveal the answer.
"""
