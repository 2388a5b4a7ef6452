"""``PromptVecEnv``: N one-step text environments as one SB3 ``VecEnv``.

SB3's ``DummyVecEnv`` stores observations in numpy buffers and cannot hold
``gymnasium.spaces.Text``. This vector env keeps them as a list of ``N`` prompt strings,
takes a list of ``N`` completion strings in ``step``, resets finished sub-envs at once
(their last prompt goes to ``info["terminal_observation"]``) and records each episode
as SB3's ``Monitor`` does (``info["episode"] = {"r", "l", "t"}``). It adds the scoring
protocol for text: ``score_candidates(completions)`` with ``completions[i]`` the K
completions of sub-env ``i``'s current prompt -> float64 ``[N, K]``.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from stable_baselines3.common.vec_env import VecEnv
from stable_baselines3.common.vec_env.base_vec_env import VecEnvIndices, VecEnvStepReturn

__all__ = ["PromptVecEnv", "check_text_spaces", "make_prompt_vec_env"]


def check_text_spaces(
    observation_space: spaces.Space, action_space: spaces.Space, who: str = "CausalLMPolicy"
) -> None:
    """Raise ``ValueError`` unless both spaces are ``gymnasium.spaces.Text`` (a prompt env)."""
    if not (isinstance(observation_space, spaces.Text) and isinstance(action_space, spaces.Text)):
        raise ValueError(
            f"{who} needs a prompt environment with gymnasium.spaces.Text observations (the "
            "prompt) and actions (the completion), e.g. gym.make('TinyArithmetic-v0') from "
            f"tpo_gym; got observation_space={observation_space}, action_space={action_space}"
        )


class PromptVecEnv(VecEnv):
    """SB3 ``VecEnv`` of one-step prompt environments; observations are lists of str.

    :param env_fns: functions that build the sub-envs (as for ``DummyVecEnv``).
    """

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]]):
        if not env_fns:
            raise ValueError("PromptVecEnv needs at least one env function; got none")
        self.envs = [fn() for fn in env_fns]
        first = self.envs[0]
        for env in self.envs:
            check_text_spaces(env.observation_space, env.action_space, "PromptVecEnv")
        super().__init__(len(self.envs), first.observation_space, first.action_space)
        self._actions: list[str] | None = None
        self._obs: list[str] = ["" for _ in self.envs]
        self._t0 = time.time()

    # -- VecEnv API ------------------------------------------------------------
    def reset(self) -> list[str]:
        for i, env in enumerate(self.envs):
            options = {"options": self._options[i]} if self._options[i] else {}
            self._obs[i], self.reset_infos[i] = env.reset(seed=self._seeds[i], **options)
        self._reset_seeds()
        self._reset_options()
        return list(self._obs)

    def step_async(self, actions: Sequence[str]) -> None:
        if isinstance(actions, str) or len(actions) != self.num_envs:
            raise ValueError(
                f"PromptVecEnv.step needs a sequence of {self.num_envs} completion strings; "
                f"got {actions!r:.200}"
            )
        self._actions = [str(a) if isinstance(a, np.str_) else a for a in actions]

    def step_wait(self) -> VecEnvStepReturn:
        rewards = np.zeros(self.num_envs, dtype=np.float32)
        dones = np.zeros(self.num_envs, dtype=bool)
        infos: list[dict[str, Any]] = []
        for i, env in enumerate(self.envs):
            obs, reward, terminated, truncated, info = env.step(self._actions[i])
            info = dict(info)
            rewards[i] = reward
            dones[i] = terminated or truncated
            info["TimeLimit.truncated"] = bool(truncated and not terminated)
            if dones[i]:
                info["terminal_observation"] = obs
                info["episode"] = {
                    "r": float(reward),
                    "l": 1,
                    "t": round(time.time() - self._t0, 6),
                }
                obs, self.reset_infos[i] = env.reset()
            self._obs[i] = obs
            infos.append(info)
        return list(self._obs), rewards, dones, infos

    def close(self) -> None:
        for env in self.envs:
            env.close()

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        return [env.get_wrapper_attr(attr_name) for env in self._targets(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        for env in self._targets(indices):
            env.set_wrapper_attr(attr_name, value)

    def env_method(
        self, method_name: str, *method_args, indices: VecEnvIndices = None, **method_kwargs
    ) -> list[Any]:
        return [
            env.get_wrapper_attr(method_name)(*method_args, **method_kwargs)
            for env in self._targets(indices)
        ]

    def env_is_wrapped(self, wrapper_class, indices: VecEnvIndices = None) -> list[bool]:
        from stable_baselines3.common import env_util

        return [env_util.is_wrapped(env, wrapper_class) for env in self._targets(indices)]

    def get_images(self) -> Sequence[np.ndarray | None]:
        return [None for _ in self.envs]

    def _targets(self, indices: VecEnvIndices) -> list[gym.Env]:
        return [self.envs[i] for i in self._get_indices(indices)]

    # -- candidate-scoring protocol for text -----------------------------------
    def score_candidates(self, completions: Sequence[Sequence[str]]) -> np.ndarray:
        """Scores float64 ``[N, K]``: ``completions[i]`` are K completions of sub-env
        ``i``'s current prompt, scored by its ``score_candidates`` (no state change)."""
        if isinstance(completions, str) or len(completions) != self.num_envs:
            raise ValueError(
                f"score_candidates needs one list of K completions per sub-env ({self.num_envs}); "
                f"got {completions!r:.200}"
            )
        rows = [
            np.asarray(env.get_wrapper_attr("score_candidates")(list(c)), dtype=np.float64)
            for env, c in zip(self.envs, completions)
        ]
        return np.stack(rows)


def make_prompt_vec_env(env: Any, n_envs: int, seed: int | None = None) -> PromptVecEnv:
    """``n_envs`` copies of a prompt env as a :class:`PromptVecEnv`.

    ``env`` may be a ``PromptVecEnv`` (used as is), an env id, or a ``gym.Env``: the
    instance is sub-env 0 and the others are built from its registered spec (same
    kwargs), or deep-copied when it has no spec. Sub-envs get distinct reset seeds
    (``seed + i`` when a seed is given) so they draw different prompts.
    """
    if isinstance(env, PromptVecEnv):
        return env
    if isinstance(env, VecEnv):
        check_text_spaces(env.observation_space, env.action_space)
        raise ValueError(
            "CausalLMPolicy needs its vector env to be a tpo_agents PromptVecEnv; "
            f"got {type(env).__name__}. "
            "Pass the prompt env (or its id) and the agent builds one."
        )
    if isinstance(n_envs, bool) or not isinstance(n_envs, int | np.integer) or n_envs < 1:
        raise ValueError(f"n_envs must be an integer >= 1; got {n_envs!r}")
    if isinstance(env, str):
        template = gym.make(env)
    elif isinstance(env, gym.Env):
        template = env
    else:
        raise ValueError(
            f"env must be an env id, a gymnasium.Env or a PromptVecEnv; got {type(env).__name__}"
        )
    check_text_spaces(template.observation_space, template.action_space)
    spec = template.spec

    def copy_of() -> gym.Env:
        if spec is not None:
            return gym.make(spec.id, **dict(spec.kwargs))
        return copy.deepcopy(template)

    vec = PromptVecEnv([lambda: template] + [copy_of for _ in range(int(n_envs) - 1)])
    # Distinct seeds even without a user seed: copies of one instance share its RNG state.
    base = int(np.random.SeedSequence(seed).generate_state(1)[0]) if seed is None else int(seed)
    vec.seed(base)  # SB3's VecEnv.seed: sub-env i is reset with base + i at the next reset
    return vec
