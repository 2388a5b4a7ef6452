"""Hyperparameter files in rl-zoo3's format: where they live, loading and checking them.

A file is one algorithm (``zoo/rlzoo/hyperparams/<algo>.yml``): a mapping from env id (or
``default``) to a section of hyperparameters. A section holds rl-zoo3's own keys
(:data:`ZOO_KEYS`: ``n_timesteps``, ``policy``, ``n_envs``, ``policy_kwargs``,
``env_kwargs``, ...) and keyword arguments of the algorithm's constructor.
``policy_kwargs`` may be a Python expression in a string, as in rl-zoo3's own files; it is
evaluated with :func:`policy_kwargs_namespace` (rl-zoo3's names plus ``MuonAdamW`` and
the transformer classes).

:func:`check_section` checks a section before rl-zoo3 sees it, against the algorithm's
``__init__`` signature and the policy's, and raises :class:`HyperparamsError` naming the
file, the section and the key.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when available: ~10x faster

HYPERPARAMS_DIR = Path(__file__).resolve().parent / "hyperparams"
"""Our hyperparameter files (shipped as package data)."""

ZOO_KEYS = frozenset(
    {
        "n_timesteps",
        "policy",
        "n_envs",
        "policy_kwargs",
        "env_kwargs",
        "normalize",
        "env_wrapper",
        "vec_env_wrapper",
        "frame_stack",
        "callback",
        "monitor_kwargs",
        "noise_type",
        "noise_std",
        "replay_buffer_class",
        "replay_buffer_kwargs",
    }
)
"""Keys rl-zoo3 consumes itself (everything else goes to the algorithm's constructor)."""

SET_BY_ZOO = {
    "env": "the env id (--env) and --env-kwargs",
    "tensorboard_log": "-tb/--tensorboard-log",
    "seed": "--seed",
    "verbose": "--verbose",
    "device": "--device",
    "_init_setup_model": "rl-zoo3 itself",
}
"""Constructor arguments rl-zoo3 passes from its command line: not allowed in a file."""


class HyperparamsError(ValueError):
    """A hyperparameter file or section that cannot be used (the message says where)."""


def default_config(algo: str) -> Path | None:
    """Our file for ``algo`` (``zoo/rlzoo/hyperparams/<algo>.yml``), or None if we have none."""
    path = HYPERPARAMS_DIR / f"{algo}.yml"
    return path if path.is_file() else None


def load_file(path: str | Path) -> dict[str, dict[str, Any]]:
    """Read a hyperparameter file: a YAML mapping of section name -> mapping.

    :raises HyperparamsError: missing file, YAML syntax error (with its line), or a
        structure other than ``{section: {key: value}}``.
    """
    path = Path(path)
    if not path.is_file():
        raise HyperparamsError(f"hyperparameter file {path} does not exist")
    try:
        data = yaml.load(path.read_text(), Loader=_SAFE_LOADER)
    except yaml.YAMLError as e:
        where = ""
        mark = getattr(e, "problem_mark", None)
        if mark is not None:
            where = f" at line {mark.line + 1}, column {mark.column + 1}"
        problem = getattr(e, "problem", None) or str(e)
        raise HyperparamsError(f"hyperparameter file {path} is not valid YAML{where}: {problem}") from None
    if not isinstance(data, dict):
        raise HyperparamsError(
            f"hyperparameter file {path} must be a mapping of env id -> hyperparameters; "
            f"got {type(data).__name__}"
        )
    for name, section in data.items():
        if not isinstance(section, dict):
            raise HyperparamsError(
                f"hyperparameter file {path}: section {name!r} must be a mapping of "
                f"hyperparameter -> value; got {type(section).__name__} {section!r}"
            )
    return data


def select_section(path: str | Path, data: Mapping[str, Any], env_id: str) -> str:
    """The section rl-zoo3 will use for ``env_id``: the env id itself, else ``default``."""
    if env_id in data:
        return env_id
    if "default" in data:
        return "default"
    raise HyperparamsError(
        f"hyperparameter file {path} has no section for {env_id!r} (and no 'default'); "
        f"sections: {sorted(data)}"
    )


def constructor_parameters(cls: type) -> set[str]:
    """Keyword arguments ``cls(...)`` accepts, following ``**kwargs`` up the MRO."""
    names: set[str] = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        params = inspect.signature(init).parameters.values()
        names.update(p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD))
        # GroupedAlgorithm's **unknown refuses what it gets (with SB3's names explained): the end.
        if not any(p.kind == p.VAR_KEYWORD and p.name != "unknown" for p in params):
            break
    names.discard("self")
    return names


def policy_kwargs_namespace() -> dict[str, Any]:
    """Names a ``policy_kwargs`` string may use: rl-zoo3's (``nn``, ``th``, ...), ``torch``,
    ``MuonAdamW`` and the transformer policy classes."""
    import rl_zoo3.exp_manager
    import torch

    from tpo_agents.optim import MuonAdamW
    from tpo_agents.policies import TransformerExtractor

    namespace = dict(vars(rl_zoo3.exp_manager))
    namespace.update(torch=torch, th=torch, nn=torch.nn, MuonAdamW=MuonAdamW, TransformerExtractor=TransformerExtractor)
    return namespace


def evaluate_policy_kwargs(value: Any, where: str) -> dict[str, Any]:
    """``policy_kwargs`` as a dict (strings are evaluated like rl-zoo3 does)."""
    if isinstance(value, str):
        try:
            value = eval(value, policy_kwargs_namespace())  # rl-zoo3's format: a Python expression
        except Exception as e:
            raise HyperparamsError(f"{where}: policy_kwargs {value!r} cannot be evaluated: {e}") from None
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise HyperparamsError(f"{where}: policy_kwargs must be a dict; got {type(value).__name__} {value!r}")
    return value


def resolve_policy(algo_cls: type, policy: Any, where: str) -> type:
    """The policy class named by ``policy`` (an alias of ``algo_cls`` or a dotted path)."""
    if isinstance(policy, type):
        return policy
    if not isinstance(policy, str):
        raise HyperparamsError(f"{where}: policy must be a string; got {policy!r}")
    if "." in policy:
        from rl_zoo3.utils import get_class_by_name

        try:
            return get_class_by_name(policy)
        except (ImportError, AttributeError, ValueError) as e:
            raise HyperparamsError(f"{where}: policy {policy!r} cannot be imported: {e}") from None
    aliases = getattr(algo_cls, "policy_aliases", {})
    if policy not in aliases:
        raise HyperparamsError(
            f"{where}: unknown policy {policy!r} for {algo_cls.__name__}; expected one of "
            f"{sorted(aliases)} or a dotted class path"
        )
    return aliases[policy]


def check_section(algo_cls: type, section: Mapping[str, Any], where: str, require_timesteps: bool = True) -> None:
    """Check one section against ``algo_cls`` and its policy.

    :param where: how to name the section in errors, e.g. ``"zoo/rlzoo/hyperparams/tpo.yml
        [TokenReversal-v0]"``.
    :raises HyperparamsError: an unknown or forbidden key, a missing ``policy`` or
        ``n_timesteps``, an unknown policy or an unknown ``policy_kwargs`` key.
    """
    allowed = constructor_parameters(algo_cls) - {"policy", "env"}
    for key in section:
        if not isinstance(key, str):
            raise HyperparamsError(f"{where}: hyperparameter names must be strings; got {key!r}")
        if key in ZOO_KEYS:
            continue
        if key in SET_BY_ZOO:
            raise HyperparamsError(f"{where}: key {key!r} cannot be set in a hyperparameter file (set by {SET_BY_ZOO[key]})")
        if key not in allowed:
            from tpo_agents.checks import SB3_ONLY_KEYWORDS  # torch: imported only on this error

            sb3 = f" ({key} is SB3's: {SB3_ONLY_KEYWORDS[key]})" if key in SB3_ONLY_KEYWORDS else ""
            raise HyperparamsError(
                f"{where}: unknown hyperparameter {key!r} for {algo_cls.__name__}{sb3}; expected one of "
                f"{sorted((allowed - set(SET_BY_ZOO)) | ZOO_KEYS)}"
            )
    required = ("policy", "n_timesteps") if require_timesteps else ("policy",)
    for key in required:
        if key not in section:
            raise HyperparamsError(f"{where}: missing required key {key!r}")
    if "n_timesteps" in section:
        n = section["n_timesteps"]
        if isinstance(n, bool) or not isinstance(n, int | float) or n < 1:
            raise HyperparamsError(f"{where}: n_timesteps must be a positive number; got {n!r}")
    if "n_envs" in section:
        n = section["n_envs"]
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise HyperparamsError(f"{where}: n_envs must be a positive integer; got {n!r}")
    policy_cls = resolve_policy(algo_cls, section["policy"], where)
    policy_kwargs = evaluate_policy_kwargs(section.get("policy_kwargs"), where)
    allowed_policy = constructor_parameters(policy_cls) - {"observation_space", "action_space", "lr_schedule"}
    for key in policy_kwargs:
        if key not in allowed_policy:
            raise HyperparamsError(
                f"{where}: unknown policy_kwargs key {key!r} for {policy_cls.__name__}; expected one of "
                f"{sorted(allowed_policy)}"
            )
    env_kwargs = section.get("env_kwargs")
    if env_kwargs is not None and not isinstance(env_kwargs, dict):
        raise HyperparamsError(f"{where}: env_kwargs must be a mapping; got {env_kwargs!r}")

