"""The training env of an agent, built once, with its group mode chosen once.

:func:`build_training_env` is the whole walk from what the user passed to the ``VecEnv``
the collectors step: read the env's facts (:class:`EnvFacts`: its group-mode hint, whether
it scores candidates, whether it has a native vector implementation), check it suits the
policy, let the algorithm choose the group mode from those facts, and build the vector env
sized for that mode. An env id is made once as a single env to read its facts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
from gymnasium import spaces
from gymnasium.vector import VectorEnv
from stable_baselines3.common.vec_env import VecEnv

from tpo_agents.rollout.envs import (
    make_training_env,
    native_vector_entry,
    scores_hidden_by_wrappers,
    user_wrappers,
)
from tpo_agents.rollout.modes import policy_kind

__all__ = ["EnvFacts", "env_facts", "build_training_env", "check_can_score"]


@dataclass(frozen=True)
class EnvFacts:
    """What choosing a group mode needs to know about an env.

    :param name: the env's id when registered, else its class name.
    :param hint: the env's ``metadata["tpo_group_mode"]`` (None when it gives none).
    :param can_score: it implements ``score_candidates`` and no wrapper of the user's sits
        in between (see :func:`~tpo_agents.rollout.envs.scores_hidden_by_wrappers`).
    :param hidden_by: the user's wrappers that scoring would bypass.
    :param native: it is registered with a native (numpy) vector implementation, so its
        vector env is sized to gather a whole batch in one pass.
    :param observation_space: a single env's observation space.
    :param action_space: a single env's action space.
    """

    name: str
    hint: str | None
    can_score: bool
    hidden_by: tuple[str, ...] = ()
    native: bool = False
    observation_space: Any = None
    action_space: Any = None


def _name(env: Any) -> str:
    spec = getattr(env, "spec", None)
    if spec is not None and getattr(spec, "id", None):
        return str(spec.id)
    return type(getattr(env, "unwrapped", env)).__name__


def _vec_name(vec: VecEnv) -> str:
    try:
        spec = vec.get_attr("spec", indices=[0])[0]
    except AttributeError:
        spec = None
    if spec is not None and getattr(spec, "id", None):
        return str(spec.id)
    base = getattr(vec, "unwrapped", vec)
    inner = getattr(base, "venv", None) or (getattr(base, "envs", None) or [base])[0]
    return type(getattr(inner, "unwrapped", inner)).__name__


def _facts_of_instance(env: Any, native: bool) -> EnvFacts:
    hidden = tuple(scores_hidden_by_wrappers(env)) if isinstance(env, gym.Env) else ()
    scores = hasattr(getattr(env, "unwrapped", env), "score_candidates")
    hint = (getattr(env, "metadata", None) or {}).get("tpo_group_mode")
    space = getattr(env, "single_observation_space", None) or env.observation_space
    actions = getattr(env, "single_action_space", None) or env.action_space
    return EnvFacts(_name(env), hint, scores and not hidden, hidden, native, space, actions)


def env_facts(env: Any) -> EnvFacts:
    """The facts of an id, a ``gym.Env``, a Gymnasium ``VectorEnv`` or an SB3 ``VecEnv``."""
    if isinstance(env, VecEnv):
        hint = (env.get_attr("metadata", indices=[0])[0] or {}).get("tpo_group_mode")
        try:
            env.get_attr("score_candidates", indices=[0])
            scores = True
        except AttributeError:
            scores = False
        hidden = tuple(scores_hidden_by_wrappers(env))
        return EnvFacts(_vec_name(env), hint, scores and not hidden, hidden,
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


def _check_action_space(algo: str, action_space: spaces.Space, mode: str) -> None:
    if isinstance(action_space, spaces.Discrete):
        return
    if isinstance(action_space, spaces.Box) and len(action_space.shape) == 1:
        if mode == "branch":
            return
        raise ValueError(
            f"{algo} trains on Box actions ({action_space}) with group_mode='branch' only (K "
            f"sampled actions per state, each played from a copy of the state); got group_mode={mode!r}"
        )
    raise ValueError(
        f"{algo} supports Discrete action spaces, and one-dimensional Box ones with "
        f"group_mode='branch'; got {action_space}"
    )


def _check_observations(policy_name: str, space: spaces.Space, env_name: str) -> None:
    if isinstance(space, spaces.Text):
        raise ValueError(
            f"{policy_name} cannot read the Text observations of {env_name} (a prompt env for "
            "language models); use CausalLMPolicy"
        )


def _check_token_env(policy_name: str, vec: VecEnv, given: Any) -> None:
    if isinstance(given, gym.Env) and user_wrappers(given):
        raise ValueError(
            f"{policy_name} trains on the native vector token env; your wrappers "
            f"{user_wrappers(given)} around {_vec_name(vec)} would be dropped. Pass the env "
            "id (or an unwrapped gym.make(...) instance), or an SB3 VecEnv you built"
        )
    try:
        vec.get_attr("prompt_length", indices=[0])
    except AttributeError:
        raise ValueError(
            f"{policy_name} needs a prompt-then-generate token env with a prompt_length "
            f"attribute (e.g. TokenReversal-*); {_vec_name(vec)} has none"
        ) from None


def build_training_env(
    env: Any,
    *,
    algo: str,
    policy: type,
    choose_mode: Callable[[EnvFacts], str],
    n_envs: int | None,
    batch_size: int,
    n_candidates: int,
    seed: int | None,
) -> tuple[VecEnv, str]:
    """The training ``VecEnv`` and its group mode.

    Native vector envs get ``batch_size`` sub-envs, or ``batch_size * n_candidates`` when
    groups are K rollouts per context (``sequence``), so one pass of the vector env gathers
    a whole batch; other envs get ``n_candidates`` copies; an explicit ``n_envs`` wins.
    Language-model policies get a :class:`~tpo_agents.llm.vec_env.PromptVecEnv` of
    ``batch_size`` prompt envs. ``choose_mode(facts)`` is the algorithm's choice.
    """
    policy_name = getattr(policy, "__name__", "this policy")
    if policy_kind(policy) == "lm":
        from tpo_agents.llm.vec_env import make_prompt_vec_env

        vec = make_prompt_vec_env(env, n_envs or batch_size, seed)
        return vec, choose_mode(env_facts(vec))
    facts = env_facts(env)
    # SB3's DummyVecEnv cannot even hold some spaces (Text): check before building.
    _check_observations(policy_name, facts.observation_space, facts.name)
    vec = env if isinstance(env, VecEnv) else None
    mode = choose_mode(facts)
    if vec is None:
        if n_envs is None:
            n_envs = (batch_size * n_candidates if mode == "sequence" else batch_size) if facts.native else n_candidates
        vec = make_training_env(env, n_envs, seed)
    _check_action_space(algo, vec.action_space, mode)
    if policy_kind(policy) == "token":
        _check_token_env(policy_name, vec, env)
    return vec, mode
