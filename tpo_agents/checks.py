"""Hyperparameter checks shared by the agents: each names the bad value and what was expected."""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.preprocessing import check_for_nested_spaces, get_obs_shape

__all__ = [
    "int_at_least",
    "real_number",
    "timesteps",
    "check_device",
    "check_learning_rate",
    "check_observation_space",
]


def int_at_least(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}; got {value!r}")
    return int(value)


def real_number(name: str, value: Any, *, above: float | None = None, at_least: float | None = None) -> float:
    """``value`` as a finite float, else a ValueError naming it and the expected range.

    Strings and bools are refused (``eta="1"`` is a typo, not a number)."""
    expected = f" > {above:g}" if above is not None else f" >= {at_least:g}" if at_least is not None else ""
    if isinstance(value, bool | str) or not isinstance(value, int | float | np.integer | np.floating):
        raise ValueError(f"{name} must be a finite number{expected}; got {value!r} ({type(value).__name__})")
    v = float(value)
    if not math.isfinite(v) or (above is not None and not v > above) or (at_least is not None and not v >= at_least):
        raise ValueError(f"{name} must be a finite number{expected}; got {value!r}")
    return v


def timesteps(value: Any) -> int:
    """``learn``'s budget: a non-negative whole number of env steps (``1e5`` is accepted)."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise ValueError(f"total_timesteps must be a whole number of env steps >= 0; got {value!r}")
    if not math.isfinite(float(value)) or float(value) != int(value) or value < 0:
        raise ValueError(f"total_timesteps must be a whole number of env steps >= 0; got {value!r}")
    return int(value)


def check_device(device: torch.device | str) -> torch.device | str:
    """The device to use: ``device`` itself, or ``"cpu"`` (with a warning) when it names an
    accelerator this torch cannot reach, as SB3's ``get_device`` falls back to the CPU when
    CUDA is missing (SB3 does so silently; MPS falls back the same way here)."""
    kind = torch.device(device).type if device != "auto" else "auto"
    missing = None
    if kind == "cuda" and not torch.cuda.is_available():
        missing = f"CUDA is not available to this torch ({torch.__version__})"
    if kind == "mps" and not torch.backends.mps.is_available():
        missing = "MPS is not available"
    if missing is None:
        return device
    warnings.warn(f"device={device!r} but {missing}: using the CPU instead (as SB3 does)", stacklevel=3)
    return "cpu"


def check_learning_rate(learning_rate: Any) -> None:
    value = learning_rate(1.0) if callable(learning_rate) else learning_rate
    what = "learning_rate" if not callable(learning_rate) else "learning_rate(1.0) (the schedule's first value)"
    real_number(what, value, at_least=0.0)


def check_observation_space(space: spaces.Space) -> None:
    """A ValueError, at construction, for an observation space SB3's policies cannot read
    (``Tuple``, ``Graph``, ``Sequence``, a ``Dict`` nested in a ``Dict``, ...): the agent would
    otherwise fail inside ``learn``. SB3's ``PPO`` refuses them too."""
    try:
        check_for_nested_spaces(space)
        get_obs_shape(space)
    except NotImplementedError as err:
        raise ValueError(
            f"observation space {space} is not supported: the policies read Box, Discrete, "
            "MultiDiscrete and MultiBinary observations and a flat Dict of them, as SB3's do. "
            "Wrap the env, e.g. in gymnasium.wrappers.FlattenObservation (a Tuple of Discrete "
            "spaces becomes one one-hot Box)"
        ) from err
