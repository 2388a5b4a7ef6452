"""State branching: score K candidate actions by playing each from a copy of the state.

For envs whose state can be copied (most Python simulators: CartPole, Acrobot, FrozenLake,
MountainCar, ...), the candidates of a visited state need neither the env's own
``score_candidates`` nor a learned critic. :class:`BranchScorer` deep-copies each sub-env
(its wrapper chain below SB3's ``Monitor``, so observation wrappers and ``TimeLimit`` apply
in the branch and no episode is recorded), steps candidate ``k`` in copy ``k``, then follows
the current policy for up to ``horizon - 1`` more steps. A candidate's score is its
discounted lookahead return ``sum_t gamma^t r_t``, ended early by termination or truncation.

Copies are made with :func:`copy.deepcopy`, so the branches of one state share the env's
random stream as it stood (common random numbers) and the live env's stream is untouched.
An env whose state cannot be deep-copied (a handle to an external simulator) can instead
offer the pair ``clone_state() -> state`` / ``restore_state(state)`` on its unwrapped env
(as ALE does); then the branches are played one after another on the unwrapped env itself,
each from the restored state, and the state is restored at the end. That path bypasses the
wrappers (so ``TimeLimit`` and ``Monitor`` counters are not disturbed) and is refused under
an observation wrapper, whose observations the branch would not see. The branch steps are simulation, not experience: they are not counted in
``num_timesteps`` but in :attr:`BranchScorer.env_steps` (logged as
``rollout/branch_env_steps``).

Supported: SB3 ``DummyVecEnv`` (optionally under ``VecMonitor`` and the agents'
``VecTransposeImage``), the env ``TPO`` builds
from an id or a ``gym.Env``. Not supported: ``SubprocVecEnv`` (the state lives in another
process), native vector envs, and ``VecNormalize``/frame stacking (their statistics would
not follow the branch): each raises a ``ValueError`` saying so.
"""

from __future__ import annotations

import copy
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import (
    DummyVecEnv,
    VecEnv,
    VecEnvWrapper,
    VecMonitor,
    VecTransposeImage,
)

from tpo_agents.checks import int_at_least, real_number
from tpo_agents.rollout.observations import stack_obs

__all__ = ["BranchScorer", "branchable_envs"]


def branchable_envs(vec_env: VecEnv) -> list[Any]:
    """The sub-envs a branch copies, one per sub-env of ``vec_env`` (SB3's ``Monitor`` left
    out); ``ValueError`` when the vector env keeps its state where a copy cannot reach."""
    base = vec_env
    while isinstance(base, VecEnvWrapper):
        # VecTransposeImage keeps no state: a branch's raw (channel-last) images are
        # transposed by the policy's obs_to_tensor, as in predict.
        if not isinstance(base, VecMonitor | VecTransposeImage):
            raise ValueError(
                f"group_mode='branch' cannot branch through {type(base).__name__}: its state "
                "(normalization statistics, stacked frames) would not follow the copies; "
                "use group_mode='critic' or pass the env without it"
            )
        base = base.venv
    if not isinstance(base, DummyVecEnv):
        raise ValueError(
            f"group_mode='branch' copies sub-envs in this process and needs a DummyVecEnv; got "
            f"{type(base).__name__} (a SubprocVecEnv's or a native vector env's state is out of "
            "reach): pass an env id or a gym.Env, or use group_mode='critic'"
        )
    return [env.env if isinstance(env, Monitor) else env for env in base.envs]


class BranchScorer:
    """Discounted lookahead returns of candidate actions, from copies of each sub-env.

    :param vec_env: the training env (see :func:`branchable_envs`).
    :param horizon: steps played per branch, the candidate's own step included (>= 1).
    :param gamma: discount of the lookahead return.
    """

    def __init__(self, vec_env: VecEnv, horizon: int = 16, gamma: float = 0.99):
        self.envs = branchable_envs(vec_env)
        self.horizon = int_at_least("horizon", horizon, 1)
        self.gamma = real_number("gamma", gamma, at_least=0.0)
        if self.gamma > 1.0:
            raise ValueError(f"gamma must be a discount in [0, 1]; got {gamma!r}")
        self.env_steps = 0
        """Env steps played in branches so far (not counted as timesteps)."""

    def _restorable(self, i: int) -> Any | None:
        """The unwrapped sub-env ``i`` when it offers ``clone_state`` / ``restore_state``."""
        base = self.envs[i].unwrapped
        if not (callable(getattr(base, "clone_state", None)) and callable(getattr(base, "restore_state", None))):
            return None
        env = self.envs[i]
        while isinstance(env, gym.Wrapper):
            if isinstance(env, gym.ObservationWrapper):
                raise ValueError(
                    f"group_mode='branch' would play sub-env {i}'s branches on the unwrapped env "
                    f"(clone_state/restore_state), bypassing the observation wrapper "
                    f"{type(env).__name__}; remove it or make the wrapped env deep-copyable"
                )
            env = env.env
        return base

    def _score_by_restoring(self, base: Any, candidates: np.ndarray, policy: Any) -> np.ndarray:
        """The K branches of one sub-env, one after another on its unwrapped env."""
        saved = base.clone_state()
        returns = np.zeros(len(candidates))
        try:
            for k, action in enumerate(candidates):
                base.restore_state(saved)
                discount, obs = 1.0, None
                for t in range(self.horizon):
                    if t > 0:
                        obs_t, _ = policy.obs_to_tensor(stack_obs([obs]))
                        action = policy.sample_actions(obs_t, 1)[0, 0].cpu().numpy()
                    a = policy.env_actions(np.asarray(action))
                    obs, r, terminated, truncated, _ = base.step(a.item() if a.ndim == 0 else a)
                    returns[k] += discount * float(r)
                    self.env_steps += 1
                    if terminated or truncated:
                        break
                    discount *= self.gamma
        finally:
            base.restore_state(saved)
        return returns

    def _copy(self, i: int) -> Any:
        try:
            return copy.deepcopy(self.envs[i])
        except Exception as error:  # noqa: BLE001 - any failure means "cannot branch"
            raise ValueError(
                f"group_mode='branch' could not copy sub-env {i} ({type(self.envs[i]).__name__}) "
                f"with copy.deepcopy: {type(error).__name__}: {error}. Define __deepcopy__ on the "
                "env or use group_mode='critic'"
            ) from error

    @torch.no_grad()
    def score(self, candidates: np.ndarray, policy: Any) -> np.ndarray:
        """Scores ``[n_envs, K]`` (float64) of ``candidates`` (``[n_envs, K]``, or
        ``[n_envs, K, d]`` for ``Box`` actions) in the sub-envs' current states; later branch
        actions are sampled from ``policy`` (its ``sample_actions`` and ``env_actions``)."""
        n, K = candidates.shape[:2]
        if n != len(self.envs):
            raise ValueError(f"candidates have {n} rows; the env has {len(self.envs)} sub-envs")
        restorable = [self._restorable(i) for i in range(n)]
        if all(base is not None for base in restorable):
            return np.stack([self._score_by_restoring(base, np.asarray(candidates[i]), policy)
                             for i, base in enumerate(restorable)])
        branches = [self._copy(i) for i in range(n) for _ in range(K)]
        # A copy (later steps overwrite it), one row per branch; Box actions keep their dims.
        actions = np.array(candidates).reshape(n * K, *candidates.shape[2:])
        returns = np.zeros(n * K)
        active = np.ones(n * K, dtype=bool)
        obs: list[Any] = [None] * (n * K)
        discount = 1.0
        for t in range(self.horizon):
            if t > 0:
                idx = np.flatnonzero(active)
                if len(idx) == 0:
                    break
                obs_t, _ = policy.obs_to_tensor(stack_obs([obs[j] for j in idx]))
                actions[idx] = policy.sample_actions(obs_t, 1)[:, 0].cpu().numpy()
            stepped = policy.env_actions(actions)
            for j in np.flatnonzero(active):
                a = stepped[j]
                o, r, terminated, truncated, _ = branches[j].step(a.item() if a.ndim == 0 else a)
                returns[j] += discount * float(r)
                obs[j] = o
                if terminated or truncated:
                    active[j] = False
                self.env_steps += 1
            discount *= self.gamma
        for env in branches:
            env.close()
        return returns.reshape(n, K)
