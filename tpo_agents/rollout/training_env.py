"""The training env of an agent, built once, with its group mode chosen once.

:func:`build_training_env` is the whole walk from what the user passed to the ``VecEnv``
the collectors step: read the env's facts (:class:`~tpo_agents.rollout.facts.EnvFacts`:
its group-mode hint, whether it scores candidates, whether it has a native vector
implementation), check it suits the policy, let the algorithm choose the group mode from
those facts, and build the vector env sized for that mode (:func:`make_training_env`,
from the adapters of :mod:`~tpo_agents.rollout.envs`).

Calls go one way: this builder asks :mod:`~tpo_agents.rollout.facts` about the env and
wraps it with :mod:`~tpo_agents.rollout.envs`; neither calls back here.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from typing import Any

import gymnasium as gym
from gymnasium import spaces
from gymnasium.vector import VectorEnv
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv, VecMonitor

from tpo_agents.rollout.envs import GymnasiumVecEnv, RewardRangeCheck, transpose_images
from tpo_agents.rollout.facts import (
    EnvFacts,
    default_render_mode,
    env_facts,
    native_vector_entry,
    user_wrappers,
    vec_env_name,
)
from tpo_agents.rollout.modes import policy_kind

__all__ = ["build_training_env", "make_training_env"]


SAMPLED_ACTION_MODES = ("branch", "critic", "sequence", "single")
"""The group modes of action spaces that cannot be enumerated (``MultiDiscrete``,
``MultiBinary``, ``Box``): K sampled actions per state (``branch``, ``critic``), K rollouts
(``sequence``) or one (``single``)."""


def _check_action_space(algo: str, action_space: spaces.Space, mode: str) -> None:
    if isinstance(action_space, spaces.Discrete):
        return
    if isinstance(action_space, spaces.Box | spaces.MultiDiscrete | spaces.MultiBinary):
        if mode in SAMPLED_ACTION_MODES:
            return
        raise ValueError(
            f"group_mode={mode!r} enumerates or scores Discrete actions; {algo} trains on "
            f"{type(action_space).__name__} actions ({action_space}) with group_mode 'critic' (K sampled "
            "actions per state scored by a learned Q(s, a); any env), 'branch' (each played from a "
            "copy of the state; an env built here or a DummyVecEnv), 'sequence' or 'single', or 'auto'"
        )
    raise ValueError(
        f"{algo} supports Discrete, MultiDiscrete, MultiBinary and Box action spaces; got {action_space}"
    )


def _branchable(env: Any, facts: EnvFacts) -> bool:
    """Whether ``branch`` groups could copy the state of the vector env ``env`` trains in."""
    if isinstance(env, VecEnv):
        from tpo_agents.rollout.branching import branchable_envs

        try:
            branchable_envs(env)
        except ValueError:
            return False
        return True
    return not isinstance(env, VectorEnv) and not facts.native


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
            f"{user_wrappers(given)} around {vec_env_name(vec)} would be dropped. Pass the env "
            "id (or an unwrapped gym.make(...) instance), or an SB3 VecEnv you built"
        )
    if not vec.has_attr("prompt_length"):  # has_attr: a missing attribute kills a subprocess worker
        raise ValueError(
            f"{policy_name} needs a prompt-then-generate token env with a prompt_length "
            f"attribute (e.g. TokenReversal-*); {vec_env_name(vec)} has none"
        )


def _copies(env: gym.Env, n: int) -> list[gym.Env]:
    """``env`` and ``n - 1`` deep copies of it, wrappers included."""
    try:
        return [env, *(copy.deepcopy(env) for _ in range(n - 1))]
    except Exception as error:  # noqa: BLE001 - any failure to copy means the same thing
        raise ValueError(
            f"cannot make {n} copies of the env you passed ({type(env).__name__}, wrapped by "
            f"{user_wrappers(env)}): {error}. Pass n_envs=1, or pass an SB3 VecEnv / Gymnasium "
            "VectorEnv built the way you want"
        ) from error


def make_training_env(env: Any, n_envs: int | None, seed: int | None = None) -> VecEnv:
    """Turn an id, ``gym.Env``, Gymnasium ``VectorEnv`` or SB3 ``VecEnv`` into a ``VecEnv``.

    * an id, or an unwrapped ``gym.make`` instance, of an env with a native vector
      implementation: the native vector env with ``n_envs`` sub-envs built from the spec
      (the instance serves as the template: its id and kwargs);
    * another id, or such an instance with ``n_envs > 1``: SB3's ``make_vec_env``
      (``DummyVecEnv`` of ``Monitor``-wrapped envs built from the spec);
    * an instance with wrappers of its own (anything beyond what ``gym.make`` adds), or
      made with a time limit other than its id's (``max_episode_steps``): a ``DummyVecEnv``
      of the instance and ``n_envs - 1`` deep copies of it, wrappers included, so what the
      user built is what trains;
    * an unregistered ``gym.Env``: a one-env ``DummyVecEnv`` around it;
    * a Gymnasium ``VectorEnv`` (same-step autoreset) or an SB3 ``VecEnv``: used as is.
    """
    if isinstance(env, VecEnv):
        return env
    if isinstance(env, VectorEnv):
        return VecMonitor(GymnasiumVecEnv(env))
    if isinstance(env, str):
        spec = gym.spec(env)
        kwargs: dict = {}
        instance = None
    elif isinstance(env, gym.Env):
        # A spec whose id is not registered (SB3's BitFlippingEnv names "no-entry-point")
        # cannot remake the env: it is used as given, as an unregistered one.
        spec = env.spec if env.spec is not None and env.spec.id in gym.registry else None
        kwargs = dict(spec.kwargs) if spec is not None else {}
        instance = env
    else:
        raise ValueError(
            f"env must be an env id, a gymnasium.Env, a gymnasium VectorEnv or an SB3 VecEnv; "
            f"got {type(env).__name__}"
        )
    n = 1 if n_envs is None else int(n_envs)
    if n < 1:
        raise ValueError(f"n_envs must be >= 1; got {n_envs}")
    # gym.make(id, max_episode_steps=n) records n in the instance's spec; an env rebuilt from
    # the id would drop it, so such an instance is copied, as one with wrappers of its own.
    wrapped = instance is not None and (
        bool(user_wrappers(instance))
        or (spec is not None and spec.max_episode_steps != gym.spec(spec.id).max_episode_steps)
    )
    if native_vector_entry(spec) and not wrapped:
        venv = gym.make_vec(spec.id, num_envs=n, vectorization_mode="vector_entry_point", **kwargs)
        return VecMonitor(GymnasiumVecEnv(venv))
    if instance is not None and (spec is None or n == 1 or wrapped):
        envs = [instance] if spec is None else _copies(instance, n)  # unregistered: as given
        return DummyVecEnv([lambda e=e: RewardRangeCheck(Monitor(e)) for e in envs])
    kwargs.setdefault("render_mode", default_render_mode(spec))
    return make_vec_env(spec.id, n_envs=n, seed=seed, env_kwargs=kwargs, wrapper_class=RewardRangeCheck)


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
    ``batch_size`` prompt envs. ``choose_mode(facts)`` is the algorithm's choice. Envs of
    channel-last images (or ``Dict`` spaces with such a key) are wrapped in SB3's
    ``VecTransposeImage``, as SB3's ``_wrap_env`` does (:func:`~.envs.transpose_images`).
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
    facts = dataclasses.replace(facts, branchable=_branchable(env, facts))
    mode = choose_mode(facts)
    if vec is None:
        if n_envs is None:
            n_envs = (batch_size * n_candidates if mode == "sequence" else batch_size) if facts.native else n_candidates
        vec = make_training_env(env, n_envs, seed)
    _check_action_space(algo, vec.action_space, mode)
    if policy_kind(policy) == "token":
        _check_token_env(policy_name, vec, env)
    return transpose_images(vec), mode  # channel-last images: VecTransposeImage, as SB3
