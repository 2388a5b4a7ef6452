"""Facts about the env a user passes: what it is, what it offers, what wraps it.

Everything here only reads the env (an id, a ``gym.Env``, a Gymnasium ``VectorEnv`` or an
SB3 ``VecEnv``) and builds nothing of the training env: its name, its spaces, its
group-mode hint, whether it scores candidates itself (and whether the user's wrappers would
bypass that), whether it has a native vector implementation, which wrappers are the user's.
:class:`EnvFacts` gathers what choosing a group mode needs. The builder
(:mod:`~tpo_agents.rollout.training_env`) asks these questions; nothing here calls back
into it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import load_env_creator
from gymnasium.vector import AutoresetMode, VectorEnv
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv

from tpo_agents.rollout.envs import RewardRangeCheck

__all__ = [
    "MAKE_WRAPPERS",
    "EnvFacts",
    "check_can_score",
    "default_render_mode",
    "env_facts",
    "env_name",
    "native_vector_entry",
    "scores_hidden_by_wrappers",
    "user_wrappers",
    "vec_env_name",
]


@dataclass(frozen=True)
class EnvFacts:
    """What choosing a group mode needs to know about an env.

    :param name: the env's id when registered, else its class name.
    :param hint: the env's ``metadata["tpo_group_mode"]`` (None when it gives none).
    :param can_score: it implements ``score_candidates`` and no wrapper of the user's sits
        in between (see :func:`scores_hidden_by_wrappers`).
    :param hidden_by: the user's wrappers that scoring would bypass.
    :param native: it is registered with a native (numpy) vector implementation, so its
        vector env is sized to gather a whole batch in one pass.
    :param observation_space: a single env's observation space.
    :param action_space: a single env's action space.
    :param branchable: ``branch`` groups can copy the state of the vector env it trains in (an
        SB3 ``DummyVecEnv``, under no wrapper but ``VecMonitor``, as the agents build from an
        id or a ``gym.Env``); False for a ``SubprocVecEnv``, under ``VecNormalize`` or frame
        stacking, and for native vector envs. Set by the builder
        (:func:`~tpo_agents.rollout.training_env.build_training_env`).
    """

    name: str
    hint: str | None
    can_score: bool
    hidden_by: tuple[str, ...] = ()
    native: bool = False
    observation_space: Any = None
    action_space: Any = None
    branchable: bool = True


# ------------------------------------------------------------------ registration


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


def default_render_mode(spec: gym.envs.registration.EnvSpec) -> str | None:
    """SB3's ``make_vec_env`` asks for ``rgb_array`` rendering; only when the env has it."""
    creator = load_env_creator(spec.entry_point) if isinstance(spec.entry_point, str) else spec.entry_point
    modes = (getattr(creator, "metadata", {}) or {}).get("render_modes", [])
    return "rgb_array" if "rgb_array" in modes else None


# ------------------------------------------------------------------ names


def env_name(env: Any) -> str:
    """A ``gym.Env``'s (or ``VectorEnv``'s) id when registered, else its class name."""
    spec = getattr(env, "spec", None)
    if spec is not None and getattr(spec, "id", None):
        return str(spec.id)
    return type(getattr(env, "unwrapped", env)).__name__


def vec_env_name(vec: VecEnv) -> str:
    """An SB3 ``VecEnv``'s first sub-env id when registered, else its class name."""
    # Every gym.Env has a ``spec`` (None when unregistered; an EnvSpec pickles), so this
    # get_attr is safe in a SubprocVecEnv worker too.
    try:
        spec = vec.get_attr("spec", indices=[0])[0]
    except AttributeError:
        spec = None
    if spec is not None and getattr(spec, "id", None):
        return str(spec.id)
    base = getattr(vec, "unwrapped", vec)
    inner = getattr(base, "venv", None) or (getattr(base, "envs", None) or [base])[0]
    return type(getattr(inner, "unwrapped", inner)).__name__


# ------------------------------------------------------------------ wrappers

MAKE_WRAPPERS = (
    gym.wrappers.TimeLimit,
    gym.wrappers.OrderEnforcing,
    gym.wrappers.PassiveEnvChecker,
)
"""What ``gym.make`` adds around every env by itself: not the user's wrappers."""


def user_wrappers(env: Any) -> list[str]:
    """Names of the wrappers around a ``gym.Env`` other than those ``gym.make`` adds
    (``TimeLimit``, ``OrderEnforcing``, ``PassiveEnvChecker``), outermost first."""
    names = []
    while isinstance(env, gym.Wrapper):
        if not isinstance(env, MAKE_WRAPPERS):
            names.append(type(env).__name__)
        env = env.env
    return names


def scores_hidden_by_wrappers(env: Any) -> list[str]:
    r"""The user's wrappers that ``score_candidates`` would bypass, for a ``gym.Env`` or the
    first sub-env of a ``DummyVecEnv`` (possibly under SB3 ``VecEnvWrapper``\ s).

    A wrapper that changes rewards (``TransformReward``, ...) does not change what the
    wrapped env's ``score_candidates`` returns, so scoring through it would silently drop
    the wrapper; a wrapper that defines ``score_candidates`` itself is trusted. The
    wrappers the agents add (``Monitor``, :class:`~tpo_agents.rollout.envs.RewardRangeCheck`)
    are not the user's."""
    if isinstance(env, VecEnv):
        base = getattr(env, "unwrapped", env)
        if not isinstance(base, DummyVecEnv):
            return []
        env = base.envs[0]
    hiding = []
    while isinstance(env, gym.Wrapper):
        if hasattr(type(env), "score_candidates"):
            return hiding
        if not isinstance(env, (*MAKE_WRAPPERS, Monitor, RewardRangeCheck)):
            hiding.append(type(env).__name__)
        env = env.env
    return hiding


# ------------------------------------------------------------------ the facts


def _facts_of_instance(env: Any, native: bool) -> EnvFacts:
    hidden = tuple(scores_hidden_by_wrappers(env)) if isinstance(env, gym.Env) else ()
    scores = hasattr(getattr(env, "unwrapped", env), "score_candidates")
    hint = (getattr(env, "metadata", None) or {}).get("tpo_group_mode")
    space = getattr(env, "single_observation_space", None) or env.observation_space
    actions = getattr(env, "single_action_space", None) or env.action_space
    return EnvFacts(env_name(env), hint, scores and not hidden, hidden, native, space, actions)


def env_facts(env: Any) -> EnvFacts:
    """The facts of an id, a ``gym.Env``, a Gymnasium ``VectorEnv`` or an SB3 ``VecEnv``.

    An env id is made once as a single env to read its facts."""
    if isinstance(env, VecEnv):
        hint = (env.get_attr("metadata", indices=[0])[0] or {}).get("tpo_group_mode")
        # has_attr, never get_attr, for what may be missing or unpicklable: a SubprocVecEnv
        # worker dies on an AttributeError or on a value it cannot pickle back (a bound
        # method), and the user's vec env with it.
        scores = env.has_attr("score_candidates")
        hidden = tuple(scores_hidden_by_wrappers(env))
        return EnvFacts(vec_env_name(env), hint, scores and not hidden, hidden,
                        observation_space=env.observation_space, action_space=env.action_space)
    if isinstance(env, VectorEnv):
        return _facts_of_instance(env, native=False)
    if isinstance(env, str):
        single = gym.make(env)
        try:
            return _facts_of_instance(single, native=native_vector_entry(single.spec))
        finally:
            single.close()
    if isinstance(env, gym.Env):
        return _facts_of_instance(env, native=native_vector_entry(env.spec))
    raise ValueError(
        f"env must be an env id, a gymnasium.Env, a gymnasium VectorEnv or an SB3 VecEnv; "
        f"got {type(env).__name__}"
    )


def check_can_score(facts: EnvFacts) -> None:
    """``group_mode="per_state"`` needs candidate scores: say why there are none."""
    if facts.can_score:
        return
    if facts.hidden_by:
        raise ValueError(
            f"group_mode='per_state' scores K candidates with the env's score_candidates, which "
            f"would bypass your wrappers {list(facts.hidden_by)}; use group_mode='sequence' (K "
            "rollouts through the wrappers) or 'auto', or define score_candidates on the wrapper"
        )
    raise ValueError(
        f"group_mode='per_state' needs an env that scores K candidates per state, "
        f"score_candidates(actions [n_envs, K]) -> scores [n_envs, K] (tpo_gym.candidates); "
        f"the env ({facts.name}) has none: use group_mode='sequence' or 'auto'"
    )
