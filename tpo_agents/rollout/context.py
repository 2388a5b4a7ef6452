"""What a collector is given: the narrow seam between an algorithm and its rollouts.

A collector never reads or writes the algorithm. It receives a :class:`RolloutContext`
(the env, the policy, K, a random generator, the last observation, and hooks for the
algorithm's bookkeeping), steps the env through :meth:`RolloutContext.step`, and returns a
batch (:mod:`tpo_agents.rollout.batches`). The algorithm reads the context's
``last_obs`` / ``episode_in_progress`` back when the collector is done.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

__all__ = ["Collector", "OnStep", "RolloutContext"]

OnStep = Callable[[Any, np.ndarray, np.ndarray | None, list[dict], int], bool]
"""``on_step(new_obs, rewards, dones, infos, n_counted) -> keep_going``: the algorithm's
bookkeeping after one vector step (timesteps, episode stats, callbacks)."""


def _no_check(values: np.ndarray, where: str) -> None:
    """Default reward check: none."""


@dataclass
class RolloutContext:
    """Everything a collector may use.

    :param env: the training ``VecEnv``.
    :param policy: the policy being trained (sampling and log-probs).
    :param n_candidates: K, candidates per group.
    :param rng: the algorithm's generator for context seeds (advanced by collectors).
    :param last_obs: the observation the next step starts from (updated by :meth:`step`).
    :param episode_in_progress: ``[n_envs]`` bool, whether a sub-env is mid-episode.
    :param on_step: the algorithm's hook after each vector step (see :data:`OnStep`).
    :param check_rewards: ``check_rewards(values, where)`` raises on unusable rewards.
    :param logp_reduction: ``"sum"`` or ``"mean"`` of a candidate's step log-probs.
    :param start_time: when training started (``time.time_ns()``), for episode records.
    :param scorer: what scores the candidates of ``critic`` groups (the learned
        :class:`~tpo_agents.rollout.critic.QCritic`) or ``branch`` groups
        (:class:`~tpo_agents.rollout.branching.BranchScorer`); None in other modes.
    :param steps_left: env steps left in ``learn``'s budget when the rollout starts,
        counted down by :meth:`step` (None: no budget, e.g. ``collect_rollouts`` called
        outside ``learn``). Collectors of whole episodes start no new episode (context)
        once it is spent (:attr:`budget_spent`) and return the groups they started.
    """

    env: Any
    policy: Any
    n_candidates: int
    rng: np.random.Generator
    last_obs: Any
    episode_in_progress: np.ndarray
    on_step: OnStep
    check_rewards: Callable[[np.ndarray, str], None] = _no_check
    logp_reduction: str = "sum"
    start_time: int = field(default=0)
    scorer: Any = None
    steps_left: int | None = None

    @property
    def n_envs(self) -> int:
        return self.env.num_envs

    @property
    def device(self) -> torch.device:
        return self.policy.device

    @property
    def budget_spent(self) -> bool:
        """Whether ``learn``'s budget is reached (never when there is none)."""
        return self.steps_left is not None and self.steps_left <= 0

    def step(self, actions: np.ndarray, n_counted: int | None = None):
        """Step every sub-env; ``(new_obs, rewards, dones, infos)``, or None when a callback
        stopped training. ``n_counted`` timesteps are counted (default: one per sub-env)."""
        new_obs, rewards, dones, infos = self.env.step(actions)
        self.check_rewards(rewards, "env.step")
        self.last_obs = new_obs
        self.episode_in_progress = ~np.asarray(dones, dtype=bool)
        counted = self.n_envs if n_counted is None else n_counted
        if self.steps_left is not None:
            self.steps_left -= counted
        if not self.on_step(new_obs, rewards, dones, infos, counted):
            return None
        return new_obs, rewards, dones, infos

    def reset(self) -> Any:
        """Start new episodes in every sub-env."""
        self.last_obs = self.env.reset()
        self.episode_in_progress = np.zeros(self.n_envs, dtype=bool)
        return self.last_obs


class Collector:
    """Base of the collectors: ``collect(ctx, n_groups) -> batch | None``."""

    mode = ""

    @staticmethod
    @torch.no_grad()
    def policy_log_probs(ctx: RolloutContext, obs: np.ndarray) -> torch.Tensor:
        obs_t, _ = ctx.policy.obs_to_tensor(obs)
        return ctx.policy.action_log_probs(obs_t).float().cpu()

    def collect(self, ctx: RolloutContext, n_groups: int):
        raise NotImplementedError

    @staticmethod
    def finish(ctx: RolloutContext, batch):
        """Freeze the rollout-time log-probs of every candidate."""
        with torch.no_grad():
            batch.old_logp = batch.log_probs(ctx.policy).float().cpu()
        return batch
