"""Step-level collectors: policies that pick one discrete action per observation (MLP).

``all_actions``
    Bandit form (docs/algorithms.md, section 4.1; MNIST): at each visited state sample one
    action ``a ~ pi``, observe its reward ``r`` and form the score vector ``(r - b) e_a``
    over *all* actions, with baseline ``b = sum_a pi(a)^2``. Sampled feedback only.
``per_state``
    At each visited state sample K candidates, score them with the env's
    ``score_candidates`` (:func:`tpo_agents.rollout.scoring.score_candidates`) and follow
    candidate 0.
``sequence``
    K full rollouts per context; the score is the episode return. Contexts are replayed
    by K resets with the same seed, so any env whose reset is deterministic given a seed
    works (CartPole, Acrobot, ...).
``branch``
    Envs whose state can be copied: at each visited state every action (or K sampled ones)
    is played from a deep copy of the state for a short lookahead under the current policy
    (:mod:`~tpo_agents.rollout.branching`); one sampled action is followed. Branch steps
    are simulation and are not counted as timesteps.
``critic``
    Envs without scores of their own (CartPole, FrozenLake, ...): at each visited state one
    sampled action is followed and the group is every action, scored by a learned
    ``Q(s, a)`` (:class:`~tpo_agents.rollout.critic.QCritic`, trained off-policy on the
    transitions before the batch is scored). ``MultiDiscrete``, ``MultiBinary`` and ``Box``
    actions: the group is K actions sampled at the state, scored by a learned ``Q(s, a)``
    with the action as input (:class:`~tpo_agents.rollout.sampled_critic.SampledActionCritic`).
``single``
    One sampled rollout per context (PG, DG, batch-standardized GRPO): K = 1, the score
    is the episode return, and the batch is collected with the env's own autoreset.

Timesteps: every env step of every sub-env counts once (``num_timesteps`` as in SB3).
A ``per_state`` step scores K candidates but counts as one step; a ``sequence`` group of
K rollouts counts the steps of all K episodes. When episodes differ in length, sub-envs
whose rollouts are done keep stepping (a vector env steps all of its sub-envs) until the
batch's last episode ends: those steps are counted too, though they feed no group.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from tpo_agents.policies.base import CategoricalPolicy
from tpo_agents.rollout.batches import GroupBatch
from tpo_agents.rollout.context import Collector, RolloutContext
from tpo_agents.rollout.envs import GymnasiumVecEnv
from tpo_agents.rollout.observations import (
    Obs,
    as_vec_obs,
    concat_obs,
    copy_obs,
    obs_len,
    set_obs_row,
    take_obs,
)
from tpo_agents.rollout.scoring import score_candidates

__all__ = ["STEP_COLLECTORS", "AllActionsCollector", "BranchCollector", "CriticCollector", "PerStateCollector", "SequenceCollector", "SingleCollector"]


def _stack_states(states: list[Obs]) -> Obs:
    """Batches of observations joined (arrays, or dicts of arrays: :mod:`~.observations`)."""
    return concat_obs(states)


def _state_groups(
    states: list[np.ndarray], actions: torch.Tensor, scores: torch.Tensor, baseline: torch.Tensor | None = None
) -> GroupBatch:
    """A batch with one group per visited state: ``actions[g]`` are its K candidates
    (``[G, K]``, or ``[G, K, d]`` for ``Box`` actions)."""
    G, K = actions.shape[:2]
    return GroupBatch(
        states=_stack_states(states),
        step_state=torch.arange(G).repeat_interleave(K),
        step_action=actions.flatten(0, 1),
        step_candidate=torch.arange(G * K),
        scores=scores,
        mask=torch.ones(G, K, dtype=torch.bool),
        old_logp=torch.zeros(G, K),
        baseline=baseline,
    )


class AllActionsCollector(Collector):
    """One group per visited state: all A actions, sampled-feedback scores."""

    mode = "all_actions"

    def collect(self, ctx: RolloutContext, n_groups: int) -> GroupBatch | None:
        n_actions = int(ctx.env.action_space.n)
        states, scores, baselines = [], [], []
        collected = 0
        while collected < n_groups:
            obs = ctx.last_obs
            log_probs = self.policy_log_probs(ctx, obs)
            actions = ctx.policy.sample(log_probs, 1).squeeze(-1)
            pi = log_probs.exp()
            b = (pi**2).sum(-1)
            stepped = ctx.step(actions.numpy())
            if stepped is None:
                return None
            rewards = stepped[1]
            s = torch.zeros(len(actions), n_actions)
            s[torch.arange(len(actions)), actions] = torch.as_tensor(rewards, dtype=torch.float32) - b
            states.append(obs)
            scores.append(s)
            baselines.append(b)
            collected += len(actions)
        G = sum(len(x) for x in scores)
        every_action = torch.arange(n_actions).repeat(G, 1)
        batch = _state_groups(states, every_action, torch.cat(scores), baseline=torch.cat(baselines))
        return self.finish(ctx, batch)


def _true_next_obs(new_obs: np.ndarray, dones: np.ndarray, infos: list[dict]) -> np.ndarray:
    """Next observations with each finished sub-env's terminal observation (the vector env
    has already reset it)."""
    next_obs = copy_obs(new_obs)
    for i in np.flatnonzero(dones):
        if "terminal_observation" in infos[i]:
            set_obs_row(next_obs, i, infos[i]["terminal_observation"])
    return next_obs


def _visit_for_critic(ctx: RolloutContext, n_groups: int, to_env: Callable[[Any], Any]) -> Any:
    """Play ``n_groups`` visited states with one sampled action each (``to_env`` turns the
    policy's actions into the env's), feed the transitions to the critic, update it, and
    return the states to fit: the visited ones, then any the critic replays (None if a
    callback stopped the rollout)."""
    states = []
    collected = 0
    while collected < n_groups:
        obs = ctx.last_obs
        actions = _sample_one(ctx, obs)
        stepped = ctx.step(to_env(actions))
        if stepped is None:
            return None
        new_obs, rewards, dones, infos = stepped
        truncated = np.array([bool(info.get("TimeLimit.truncated", False)) for info in infos])
        terminated = np.asarray(dones, dtype=bool) & ~truncated
        ctx.scorer.add(obs, actions, rewards, _true_next_obs(new_obs, dones, infos), terminated, np.asarray(dones, dtype=bool))
        states.append(obs)
        collected += len(actions)
    ctx.scorer.update(ctx.policy)
    fitted = _stack_states(states)
    replayed = ctx.scorer.replay_states(obs_len(fitted), ctx.policy)
    return fitted if replayed is None else concat_obs([fitted, replayed])


class CriticCollector(Collector):
    """One group per visited state, and per state replayed from the critic's buffer
    (``replay_states`` of them per visited state): every action, scored by the learned critic."""

    mode = "critic"

    def collect(self, ctx: RolloutContext, n_groups: int) -> GroupBatch | None:
        if getattr(ctx.scorer, "sampled", False):
            return self._collect_sampled(ctx, n_groups)
        n_actions = int(ctx.env.action_space.n)
        fitted = _visit_for_critic(ctx, n_groups, lambda actions: actions)
        if fitted is None:
            return None
        every_action = torch.arange(n_actions).repeat(obs_len(fitted), 1)
        batch = _state_groups([fitted], every_action, ctx.scorer.advantages(fitted, ctx.policy))
        batch.standardized = True
        return self.finish(ctx, batch)

    def _collect_sampled(self, ctx: RolloutContext, n_groups: int) -> GroupBatch | None:
        """Actions that cannot be enumerated (``MultiDiscrete``, ``MultiBinary``, ``Box``): the
        group of a visited (or replayed) state is K actions sampled there, scored by a critic
        with the action as input (:class:`~tpo_agents.rollout.sampled_critic.SampledActionCritic`)."""
        fitted = _visit_for_critic(ctx, n_groups, ctx.policy.env_actions)
        if fitted is None:
            return None
        with torch.no_grad():
            obs_t, _ = ctx.policy.obs_to_tensor(fitted)
            candidates = ctx.policy.sample_actions(obs_t, ctx.n_candidates).cpu()
        batch = _state_groups([fitted], candidates, ctx.scorer.advantages(fitted, candidates, ctx.policy))
        batch.standardized = batch.sampled = True
        return self.finish(ctx, batch)


class _ScoredStateCollector(Collector):
    """One group per visited state: candidates proposed at the state, scored there, and one
    action followed. Subclasses say how candidates are proposed and scored."""

    where = ""  # names the scores in a non-finite-reward error

    def propose(self, ctx: RolloutContext, obs) -> tuple[torch.Tensor, torch.Tensor]:
        """``(candidates [n_envs, K(, d)], followed action [n_envs(, d)])``."""
        raise NotImplementedError

    def score(self, ctx: RolloutContext, candidates: torch.Tensor) -> np.ndarray:
        raise NotImplementedError

    def collect(self, ctx: RolloutContext, n_groups: int) -> GroupBatch | None:
        states, cands, scores = [], [], []
        collected = 0
        while collected < n_groups:
            obs = ctx.last_obs
            candidates, follow = self.propose(ctx, obs)
            s = self.score(ctx, candidates)
            ctx.check_rewards(s, self.where)
            if ctx.step(ctx.policy.env_actions(follow.numpy())) is None:
                return None
            states.append(obs)
            cands.append(candidates)
            scores.append(torch.as_tensor(s, dtype=torch.float32))
            collected += len(candidates)
        return self.finish(ctx, _state_groups(states, torch.cat(cands), torch.cat(scores)))


class BranchCollector(_ScoredStateCollector):
    """One group per visited state, scored by playing each candidate from a copy of the
    state (:class:`~tpo_agents.rollout.branching.BranchScorer`); one sampled action is
    followed. The group is every action when there are at most K, else K sampled ones."""

    mode = "branch"
    where = "branch returns"

    @torch.no_grad()
    def propose(self, ctx: RolloutContext, obs) -> tuple[torch.Tensor, torch.Tensor]:
        space = ctx.env.action_space  # only Discrete actions are enumerated (MultiBinary has an n too)
        n_actions = int(space.n) if isinstance(space, spaces.Discrete) else None
        obs_t, _ = ctx.policy.obs_to_tensor(obs)
        if n_actions is not None and n_actions <= ctx.n_candidates:
            every = torch.arange(int(n_actions)).repeat(ctx.n_envs, 1)
            return every, ctx.policy.sample_actions(obs_t, 1)[:, 0].cpu()
        candidates = ctx.policy.sample_actions(obs_t, ctx.n_candidates).cpu()
        return candidates, candidates[:, 0]

    def score(self, ctx: RolloutContext, candidates: torch.Tensor) -> np.ndarray:
        return ctx.scorer.score(candidates.numpy(), ctx.policy)


class PerStateCollector(_ScoredStateCollector):
    """One group per visited state: K sampled candidates scored by the env; follow #0."""

    mode = "per_state"
    where = "score_candidates"

    def propose(self, ctx: RolloutContext, obs) -> tuple[torch.Tensor, torch.Tensor]:
        candidates = ctx.policy.sample(self.policy_log_probs(ctx, obs), ctx.n_candidates)
        return candidates, candidates[:, 0]

    def score(self, ctx: RolloutContext, candidates: torch.Tensor) -> np.ndarray:
        return score_candidates(ctx.env, candidates.numpy())


class _EpisodeRecorder:
    """Accumulates steps of many concurrent episodes into a GroupBatch."""

    def __init__(self, n_groups: int, group_size: int, logp_reduction: str):
        self.G, self.K = n_groups, group_size
        self.states: list[np.ndarray] = []
        self.actions: list[np.ndarray] = []
        self.cands: list[np.ndarray] = []
        self.returns = np.zeros(n_groups * group_size)
        self.logp_reduction = logp_reduction

    def record(self, obs: np.ndarray, actions: np.ndarray, slot: np.ndarray, rewards: np.ndarray) -> None:
        active = slot >= 0
        self.states.append(take_obs(obs, active))
        self.actions.append(actions[active])
        self.cands.append(slot[active])
        np.add.at(self.returns, slot[active], rewards[active])

    def keep_first(self, n_groups: int) -> None:
        """Keep only the first ``n_groups`` groups, the ones started (and so recorded) when
        ``learn``'s budget ended the rollout early."""
        self.G = n_groups
        self.returns = self.returns[: n_groups * self.K]

    def batch(self) -> GroupBatch:
        n_steps = sum(len(a) for a in self.actions)
        actions = np.concatenate(self.actions)  # [n_steps], or [n_steps, d] for sampled-action policies
        return GroupBatch(
            states=_stack_states(self.states),
            step_state=torch.arange(n_steps),
            step_action=torch.as_tensor(actions, dtype=torch.long if actions.ndim == 1 else None),
            step_candidate=torch.as_tensor(np.concatenate(self.cands), dtype=torch.long),
            scores=torch.as_tensor(self.returns, dtype=torch.float32).view(self.G, self.K),
            mask=torch.ones(self.G, self.K, dtype=torch.bool),
            old_logp=torch.zeros(self.G, self.K),
            logp_reduction=self.logp_reduction,
        )


def _sample_one(ctx: RolloutContext, obs: np.ndarray) -> np.ndarray:
    """One action per sub-env as the policy samples it: ``[n_envs]`` categorical actions, or
    ``[n_envs, d]`` for the Gaussian and factorized policies (step the env with
    ``ctx.policy.env_actions`` of it)."""
    if isinstance(ctx.policy, CategoricalPolicy):
        return ctx.policy.sample(Collector.policy_log_probs(ctx, obs), 1).squeeze(-1).numpy()
    with torch.no_grad():
        obs_t, _ = ctx.policy.obs_to_tensor(obs)
        return ctx.policy.sample_actions(obs_t, 1)[:, 0].cpu().numpy()


def _play(ctx: RolloutContext, rec: _EpisodeRecorder, obs: np.ndarray, slot: np.ndarray, on_done) -> np.ndarray | None:
    """Step every sub-env, recording the steps of those with a slot (``slot >= 0``), until
    no slot is left; ``on_done(i, obs)`` gives a finished sub-env ``i`` its next slot (or
    -1) and may reset ``obs[i]``. The last observations, or None when a callback stopped."""
    while (slot >= 0).any():
        actions = _sample_one(ctx, obs)
        stepped = ctx.step(ctx.policy.env_actions(actions))
        if stepped is None:
            return None
        new_obs, rewards, dones, _ = stepped
        rec.record(obs, actions, slot, rewards)
        obs = copy_obs(new_obs)
        for i in np.flatnonzero(dones):
            on_done(i, obs)
    return obs


def _finished(slot: np.ndarray):
    """``on_done`` of one episode per sub-env: a finished sub-env records nothing more."""

    def done(i: int, obs: np.ndarray) -> None:
        slot[i] = -1

    return done


class SingleCollector(Collector):
    """One rollout per context (K = 1), using the env's own autoreset."""

    mode = "single"

    def collect(self, ctx: RolloutContext, n_groups: int) -> GroupBatch | None:
        n = ctx.n_envs
        rec = _EpisodeRecorder(n_groups, 1, ctx.logp_reduction)
        # Each sub-env plays the episode of one slot; slots are handed out in order.
        next_slot = 0
        slot = np.full(n, -1)
        for i in range(n):
            if next_slot < n_groups:
                slot[i], next_slot = next_slot, next_slot + 1
        # A sub-env may be mid-episode from the last iteration: start fresh episodes so
        # every recorded candidate is a whole episode.
        if ctx.episode_in_progress.any():
            ctx.reset()

        def next_episode(i: int, obs: np.ndarray) -> None:
            nonlocal next_slot
            if next_slot < n_groups and not ctx.budget_spent:  # no new episode past the budget
                slot[i], next_slot = next_slot, next_slot + 1
            else:
                slot[i] = -1

        if _play(ctx, rec, copy_obs(ctx.last_obs), slot, next_episode) is None:
            return None
        rec.keep_first(next_slot)
        return self.finish(ctx, rec.batch())


class SequenceCollector(Collector):
    """K rollouts per context from K resets with one seed per context.

    Sub-envs that can be reset one at a time (SB3 ``DummyVecEnv``/``SubprocVecEnv``) start
    the next rollout as soon as theirs ends. A native vector env resets all its sub-envs
    at once, so there the rollouts run in rounds: one seeded reset of every sub-env (a seed
    list, one context seed per sub-env), then steps until each has finished its episode."""

    mode = "sequence"

    def collect(self, ctx: RolloutContext, n_groups: int) -> GroupBatch | None:
        K, n = ctx.n_candidates, ctx.n_envs
        rec = _EpisodeRecorder(n_groups, K, ctx.logp_reduction)
        context_seeds = ctx.rng.integers(0, 2**31 - 1, size=n_groups)
        if isinstance(getattr(ctx.env, "unwrapped", ctx.env), GymnasiumVecEnv):
            return self._collect_in_rounds(ctx, rec, context_seeds)
        next_slot = 0
        slot = np.full(n, -1)
        obs = copy_obs(ctx.last_obs)

        def start(i: int, obs: np.ndarray) -> None:
            nonlocal next_slot
            # Past learn's budget no new context starts; the started ones get all K rollouts.
            new_context = next_slot % K == 0
            s = next_slot if next_slot < n_groups * K and not (new_context and ctx.budget_spent) else -1
            next_slot += int(s >= 0)
            slot[i] = s
            if s >= 0:
                first = ctx.env.env_method("reset", seed=int(context_seeds[s // K]), indices=[i])[0][0]
                set_obs_row(obs, i, as_vec_obs(ctx.env, first))

        for i in range(n):
            start(i, obs)
        obs = _play(ctx, rec, obs, slot, start)
        if obs is None:
            return None
        ctx.last_obs = obs
        rec.keep_first(-(-next_slot // K))
        return self.finish(ctx, rec.batch())

    def _collect_in_rounds(self, ctx: RolloutContext, rec: _EpisodeRecorder, context_seeds) -> GroupBatch | None:
        K, n = ctx.n_candidates, ctx.n_envs
        total = len(context_seeds) * K
        obs = ctx.last_obs
        for first in range(0, total, n):
            if ctx.budget_spent and first % K == 0:  # past learn's budget: no new context
                rec.keep_first(first // K)
                break
            slot = np.arange(first, first + n)
            slot[slot >= total] = -1
            ctx.env.seed([int(context_seeds[s // K]) if s >= 0 else None for s in slot])
            obs = _play(ctx, rec, copy_obs(ctx.reset()), slot, _finished(slot))
            if obs is None:
                return None
        ctx.last_obs = obs
        return self.finish(ctx, rec.batch())


STEP_COLLECTORS = {
    c.mode: c for c in (AllActionsCollector, BranchCollector, CriticCollector, PerStateCollector, SequenceCollector, SingleCollector)
}
