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
    "unexpected_keywords",
    "SB3_ONLY_KEYWORDS",
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


SB3_ONLY_KEYWORDS = {
    "n_steps": "a rollout here is batch_size groups (contexts) per iteration",
    "gae_lambda": "candidates are scored by the env, a learned critic (critic_kwargs) or whole-episode returns; there is no GAE",
    "gamma": "the critic's discount is critic_kwargs={'gamma': ...}; branch lookaheads take branch_kwargs",
    "ent_coef": "there is no entropy bonus; on Discrete critic groups TPO's target_floor keeps every action played",
    "vf_coef": "the policy has no value head; the critic of critic groups is set with critic_kwargs",
    "use_sde": "there is no state-dependent exploration; the Gaussian policy learns its log std (policy_kwargs={'log_std_init': ...})",
    "sde_sample_freq": "there is no state-dependent exploration",
    "normalize_advantage": "scores are standardized within each group already",
    "target_kl": "TPO's update stops by itself at its target (n_epochs steps); GRPO takes clip_range",
    "rollout_buffer_class": "groups are collected by the agent's own collectors",
    "rollout_buffer_kwargs": "groups are collected by the agent's own collectors",
    "buffer_size": "the critic's replay is critic_kwargs={'buffer_size': ...}",
    "learning_starts": "the critic's warm-up is critic_kwargs={'learning_starts': ...}",
    "train_freq": "the agent trains once per batch of groups",
}
"""What each SB3 hyperparameter that the agents do not take means here."""


def unexpected_keywords(owner: str, names) -> TypeError:
    """The TypeError for keyword arguments ``owner`` does not take, saying for SB3's (PPO's,
    DQN's, ...) what plays their part here, for a user porting an rl-zoo3 entry."""
    lines = [f"{owner}.__init__() got unexpected keyword argument(s) {', '.join(map(repr, names))}"]
    lines += [f"  {name}: SB3's; {SB3_ONLY_KEYWORDS[name]}" for name in names if name in SB3_ONLY_KEYWORDS]
    return TypeError("\n".join(lines))
