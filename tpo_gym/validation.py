"""Argument validation shared by the tpo_gym environments (numpy only, never torch).

Every helper raises ``ValueError`` with a message that names the offending value, and
returns the value in canonical form (``int``, an int64 array, a dict, ...). Numpy scalars
are shown as plain Python numbers in messages (``10``, not ``np.int64(10)``; see :func:`show`).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import numpy as np

__all__ = [
    "check_action_batch",
    "check_index_option",
    "check_int",
    "check_render_mode",
    "check_reset_options",
    "check_scalar_action",
    "check_vector_seed",
    "show",
]


def show(value: Any) -> str:
    """``repr`` of a value, numpy scalars shown as plain Python numbers (``10``, not ``np.int64(10)``)."""
    return repr(value.item() if isinstance(value, np.generic) else value)


def _is_int(value: Any) -> bool:
    """A Python or numpy integer that is not a bool."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _valid_range(plural: str, high: int) -> str:
    return f"valid {plural} are integers in [0, {high - 1}]"


def _check_in_range(arr: np.ndarray, high: int, what: str, valid: str) -> np.ndarray:
    """Raise for the first entry of the 1-d integer ``arr`` outside ``[0, high)``; -> int64."""
    bad = (arr < 0) | (arr >= high)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"invalid {what} {show(arr[i])} for sub-env {i} (out of range); {valid}")
    return arr.astype(np.int64)


def check_int(name: str, value: Any, minimum: int) -> int:
    """A Python or numpy integer (not a bool) ``>= minimum`` -> ``int``.

    Raises ``ValueError("{name} must be an integer >= {minimum}, got ...")`` otherwise.
    """
    if not _is_int(value) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {show(value)}")
    return int(value)


def check_render_mode(render_mode: str | None, render_modes: list[str]) -> str | None:
    """``None`` or one of ``render_modes`` (the env's ``metadata["render_modes"]``), unchanged."""
    if render_mode is not None and render_mode not in render_modes:
        raise ValueError(f"render_mode must be None or one of {render_modes}, got {render_mode!r}")
    return render_mode


def check_scalar_action(action: Any, n_actions: int, what: str = "action") -> int:
    """An int / numpy integer / 0-d integer array in ``[0, n_actions)`` -> ``int``.

    ``what`` names the value in error messages (e.g. ``"context"`` for a context index:
    ``"invalid context 12 (out of range); valid contexts are integers in [0, 9]"``).
    Bools, floats, strings and other types are rejected.
    """
    valid = _valid_range(f"{what}s", n_actions)
    if isinstance(action, np.ndarray) and action.shape == () and action.dtype != object:
        action = action[()]
    if not _is_int(action):
        raise ValueError(f"invalid {what} {show(action)} of type {type(action).__name__}; {valid}")
    if not 0 <= action < n_actions:
        raise ValueError(f"invalid {what} {show(action)} (out of range); {valid}")
    return int(action)


def check_action_batch(actions: Any, n_actions: int, num_envs: int) -> np.ndarray:
    """One action per sub-env: an integer array of shape ``(num_envs,)`` in ``[0, n_actions)``.

    Returns an int64 copy. Raises ``ValueError`` for a wrong shape, a non-integer dtype
    (bools included) or the first out-of-range action (naming its sub-env).
    """
    valid = _valid_range("actions", n_actions)
    arr = np.asarray(actions)
    if arr.shape != (num_envs,):
        raise ValueError(
            f"actions must have shape ({num_envs},) (one action per sub-env), got shape {arr.shape}"
        )
    if arr.dtype == object or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"actions must have an integer dtype, got dtype {arr.dtype}; {valid}")
    return _check_in_range(arr, n_actions, "action", valid)


def check_index_option(
    value: Any, high: int, num_envs: int, key: str, what: str, plural: str | None = None
) -> np.ndarray:
    """A reset option holding one index per sub-env: an int (every sub-env) or ``[num_envs]``.

    Args:
        value: ``options[key]``.
        high: the indices must lie in ``[0, high)``.
        num_envs: the number of sub-envs (``1`` for a single env).
        key: the option's name, for messages (``options['{key}']``).
        what: the name of one index, for messages (``"invalid {what} 12 for sub-env 1"``).
        plural: the plural of ``what`` (default ``what + "s"``), for the closing hint of
            messages: ``"valid {plural} are integers in [0, high-1]"``.

    Returns:
        int64 array ``[num_envs]`` (a scalar is repeated for every sub-env).
    """
    valid = _valid_range(f"{what}s" if plural is None else plural, high)
    arr = np.asarray(value)
    if arr.shape == ():
        arr = np.full(num_envs, arr[()]) if arr.dtype != object else arr
    if arr.shape != (num_envs,):
        raise ValueError(
            f"options['{key}'] must be an integer or an array of shape ({num_envs},), "
            f"got shape {arr.shape}"
        )
    if arr.dtype == object or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"options['{key}'] must be integers, got dtype {arr.dtype}; {valid}")
    return _check_in_range(arr, high, what, valid)


def check_reset_options(
    options: dict[str, Any] | None, allowed_keys: Collection[str]
) -> dict[str, Any]:
    """``reset``'s ``options``: ``None`` (-> ``{}``) or a dict whose keys are all in ``allowed_keys``."""
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise ValueError(f"options must be a dict or None, got {options!r}")
    unknown = set(options) - set(allowed_keys)
    if unknown:
        raise ValueError(
            f"unknown reset option(s) {sorted(unknown)}; supported: {sorted(allowed_keys)}"
        )
    return options


def check_vector_seed(seed: Any, num_envs: int) -> tuple[list[Any], int | None]:
    """A vector env's ``reset(seed=...)`` -> ``(per-sub-env seeds, root seed)``.

    * ``None``: ``([None] * num_envs, None)`` (every sub-env keeps its stream);
    * an int ``s``: ``([s, s + 1, ..., s + num_envs - 1], s)``; the caller seeds its own
      ``np_random`` with the root seed ``s`` (``VectorEnv.reset(seed=s)``);
    * a list / tuple / array of ``num_envs`` seeds (``None`` entries allowed): those seeds
      as given, root ``None``.

    Raises ``ValueError`` for anything else (including a sequence of the wrong length).
    """
    if seed is None:
        return [None] * num_envs, None
    if _is_int(seed):
        return [int(seed) + i for i in range(num_envs)], int(seed)
    seeds = list(seed) if isinstance(seed, (list, tuple, np.ndarray)) else []
    if len(seeds) != num_envs:
        raise ValueError(f"seed must be an int, None or a list of {num_envs} seeds, got {seed!r}")
    return seeds, None
