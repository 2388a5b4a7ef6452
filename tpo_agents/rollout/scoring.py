"""Scoring K candidate actions in each sub-env's current state.

The env's own protocol (``tpo_gym.candidates``): ``score_candidates(actions [n_envs, K])
-> scores [n_envs, K]``, implemented natively by a vector env or per sub-env.
"""

from __future__ import annotations

import numpy as np

__all__ = ["score_candidates"]


def score_candidates(vec_env, actions: np.ndarray) -> np.ndarray:
    """Scores ``[n_envs, K]`` (float64) of candidate actions through the scoring protocol.

    Uses the vector env's own (vectorized) ``score_candidates`` when it has one, else
    calls each sub-env's ``score_candidates`` through ``env_method``. Raises ``ValueError``
    when the env returns anything but one number per candidate.
    """
    try:
        native = vec_env.score_candidates
    except AttributeError:
        native = None
    if native is not None:
        scores = native(actions)
    else:
        scores = [vec_env.env_method("score_candidates", actions[i], indices=[i])[0] for i in range(len(actions))]
    try:
        scores = np.asarray(scores, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise ValueError(f"score_candidates must return numbers of shape {actions.shape}; got {error}") from None
    if scores.shape != actions.shape:
        raise ValueError(
            f"score_candidates(actions of shape {actions.shape}) must return one score per "
            f"candidate, shape {actions.shape} ([n_envs, K]); got shape {scores.shape}"
        )
    return scores
