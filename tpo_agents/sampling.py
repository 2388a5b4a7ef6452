"""How groups are collected from a ``VecEnv``.

Three grouped collectors and the single-sample one fill a :class:`GroupBatch`:

``all_actions``
    Bandit form (SPEC section 3, MNIST): at each visited state sample one action
    ``a ~ pi``, observe its reward ``r`` and form the score vector ``(r - b) e_a`` over
    *all* actions, with baseline ``b = sum_a pi(a)^2``. Sampled feedback only.
``per_state``
    Token-level form: at each visited state sample K candidates, score them with the
    env's ``score_candidates`` and follow candidate 0.
``sequence``
    K full rollouts per context; the score is the episode return. Contexts are replayed
    by K resets with the same seed, so any env whose reset is deterministic given a seed
    works (CartPole, Acrobot, ...).
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

from typing import TYPE_CHECKING

import numpy as np
import torch
from stable_baselines3.common.callbacks import BaseCallback

from tpo_agents.groups import GroupBatch, SequenceGroupBatch, TokenGroupBatch
from tpo_agents.vec_env import GymnasiumVecEnv

if TYPE_CHECKING:
    from tpo_agents.base import GroupedAlgorithm

GROUP_MODES = ("all_actions", "per_state", "sequence", "single")


def vec_score_candidates(vec_env, actions: np.ndarray) -> np.ndarray:
    """Scores ``[n_envs, K]`` of candidate actions through the scoring protocol.

    Uses the vector env's own (vectorized) ``score_candidates`` when it has one, else
    calls each sub-env's ``score_candidates`` through ``env_method``.
    """
    try:
        native = vec_env.score_candidates
    except AttributeError:
        native = None
    if native is not None:
        scores = native(actions)
    else:
        scores = [vec_env.env_method("score_candidates", actions[i], indices=[i])[0] for i in range(len(actions))]
    try:
        scores = np.asarray(scores, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise ValueError(f"score_candidates must return numbers of shape {actions.shape}; got {error}") from None
    if scores.shape != actions.shape:
        raise ValueError(
            f"score_candidates(actions of shape {actions.shape}) must return one score per "
            f"candidate, shape {actions.shape} ([n_envs, K]); got shape {scores.shape}"
        )
    return scores


def _stack_states(states: list[np.ndarray]) -> np.ndarray:
    return np.concatenate([np.asarray(s) for s in states], axis=0)


def _state_groups(
    states: list[np.ndarray], actions: torch.Tensor, scores: torch.Tensor, baseline: torch.Tensor | None = None
) -> GroupBatch:
    """A batch with one group per visited state: ``actions[g]`` are its K candidates."""
    G, K = actions.shape
    return GroupBatch(
        states=_stack_states(states),
        step_state=torch.arange(G).repeat_interleave(K),
        step_action=actions.flatten(),
        step_candidate=torch.arange(G * K),
        scores=scores,
        mask=torch.ones(G, K, dtype=torch.bool),
        old_logp=torch.zeros(G, K),
        baseline=baseline,
    )


class Collector:
    """Base: runs env steps with callbacks and bookkeeping shared by every mode."""

    mode = ""

    def __init__(self, algo: GroupedAlgorithm):
        self.algo = algo

    @torch.no_grad()
    def policy_log_probs(self, obs: np.ndarray) -> torch.Tensor:
        obs_t, _ = self.algo.policy.obs_to_tensor(obs)
        return self.algo.policy.action_log_probs(obs_t).float().cpu()

    def collect(self, callback: BaseCallback, n_groups: int) -> GroupBatch | None:
        raise NotImplementedError

    def finish(self, batch):
        """Freeze the rollout-time log-probs of every candidate."""
        with torch.no_grad():
            batch.old_logp = batch.log_probs(self.algo.policy).float().cpu()
        return batch


class AllActionsCollector(Collector):
    """One group per visited state: all A actions, sampled-feedback scores."""

    mode = "all_actions"

    def collect(self, callback: BaseCallback, n_groups: int) -> GroupBatch | None:
        algo = self.algo
        n_actions = int(algo.action_space.n)
        states, scores, baselines = [], [], []
        collected = 0
        while collected < n_groups:
            obs = algo._last_obs
            log_probs = self.policy_log_probs(obs)
            actions = algo.policy.sample(log_probs, 1).squeeze(-1)
            pi = log_probs.exp()
            b = (pi**2).sum(-1)
            new_obs, rewards, dones, infos = algo.env.step(actions.numpy())
            if not algo._after_env_step(callback, new_obs, rewards, dones, infos, algo.n_envs):
                return None
            s = torch.zeros(len(actions), n_actions)
            s[torch.arange(len(actions)), actions] = torch.as_tensor(rewards, dtype=torch.float32) - b
            states.append(obs)
            scores.append(s)
            baselines.append(b)
            collected += len(actions)
        G = sum(len(x) for x in scores)
        every_action = torch.arange(n_actions).repeat(G, 1)
        batch = _state_groups(states, every_action, torch.cat(scores), baseline=torch.cat(baselines))
        return self.finish(batch)


class PerStateCollector(Collector):
    """One group per visited state: K sampled candidates scored by the env; follow #0."""

    mode = "per_state"

    def collect(self, callback: BaseCallback, n_groups: int) -> GroupBatch | None:
        algo = self.algo
        K = algo.n_candidates
        states, cands, scores = [], [], []
        collected = 0
        while collected < n_groups:
            obs = algo._last_obs
            log_probs = self.policy_log_probs(obs)
            candidates = algo.policy.sample(log_probs, K)
            s = vec_score_candidates(algo.env, candidates.numpy())
            algo._check_finite_rewards(s, "score_candidates")
            new_obs, rewards, dones, infos = algo.env.step(candidates[:, 0].numpy())
            if not algo._after_env_step(callback, new_obs, rewards, dones, infos, algo.n_envs):
                return None
            states.append(obs)
            cands.append(candidates)
            scores.append(torch.as_tensor(s, dtype=torch.float32))
            collected += len(candidates)
        return self.finish(_state_groups(states, torch.cat(cands), torch.cat(scores)))


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
        self.states.append(np.asarray(obs)[active])
        self.actions.append(actions[active])
        self.cands.append(slot[active])
        np.add.at(self.returns, slot[active], rewards[active])

    def batch(self) -> GroupBatch:
        n_steps = sum(len(a) for a in self.actions)
        return GroupBatch(
            states=_stack_states(self.states),
            step_state=torch.arange(n_steps),
            step_action=torch.as_tensor(np.concatenate(self.actions), dtype=torch.long),
            step_candidate=torch.as_tensor(np.concatenate(self.cands), dtype=torch.long),
            scores=torch.as_tensor(self.returns, dtype=torch.float32).view(self.G, self.K),
            mask=torch.ones(self.G, self.K, dtype=torch.bool),
            old_logp=torch.zeros(self.G, self.K),
            logp_reduction=self.logp_reduction,
        )


class SingleCollector(Collector):
    """One rollout per context (K = 1), using the env's own autoreset."""

    mode = "single"

    def collect(self, callback: BaseCallback, n_groups: int) -> GroupBatch | None:
        algo = self.algo
        n = algo.n_envs
        rec = _EpisodeRecorder(n_groups, 1, algo.logp_reduction)
        # Each sub-env plays the episode of one slot; slots are handed out in order.
        next_slot = 0
        slot = np.full(n, -1)
        for i in range(n):
            if next_slot < n_groups:
                slot[i], next_slot = next_slot, next_slot + 1
        # A sub-env may be mid-episode from the last iteration: start fresh episodes so
        # every recorded candidate is a whole episode.
        if algo._episode_in_progress.any():
            algo._last_obs = algo.env.reset()
            algo._episode_in_progress[:] = False
        while (slot >= 0).any():
            obs = algo._last_obs
            actions = algo.policy.sample(self.policy_log_probs(obs), 1)
            actions = actions.squeeze(-1).numpy()
            new_obs, rewards, dones, infos = algo.env.step(actions)
            if not algo._after_env_step(callback, new_obs, rewards, dones, infos, n):
                return None
            rec.record(obs, actions, slot, rewards)
            for i in np.flatnonzero(dones):
                if next_slot < n_groups:
                    slot[i], next_slot = next_slot, next_slot + 1
                else:
                    slot[i] = -1
        return self.finish(rec.batch())


class SequenceCollector(Collector):
    """K rollouts per context from K resets with one seed per context.

    Sub-envs that can be reset one at a time (SB3 ``DummyVecEnv``/``SubprocVecEnv``) start
    the next rollout as soon as theirs ends. A native vector env resets all its sub-envs
    at once, so there the rollouts run in rounds: one seeded reset of every sub-env (a seed
    list, one context seed per sub-env), then steps until each has finished its episode."""

    mode = "sequence"

    def collect(self, callback: BaseCallback, n_groups: int) -> GroupBatch | None:
        algo = self.algo
        K, n = algo.n_candidates, algo.n_envs
        rec = _EpisodeRecorder(n_groups, K, algo.logp_reduction)
        context_seeds = algo._np_rng.integers(0, 2**31 - 1, size=n_groups)
        if isinstance(getattr(algo.env, "unwrapped", algo.env), GymnasiumVecEnv):
            return self._collect_in_rounds(callback, rec, context_seeds)
        slots = iter(range(n_groups * K))
        slot = np.full(n, -1)
        obs = np.array(algo._last_obs, copy=True)

        def start(i: int) -> None:
            s = next(slots, -1)
            slot[i] = s
            if s >= 0:
                obs[i] = algo.env.env_method("reset", seed=int(context_seeds[s // K]), indices=[i])[0][0]

        for i in range(n):
            start(i)
        while (slot >= 0).any():
            actions = algo.policy.sample(self.policy_log_probs(obs), 1)
            actions = actions.squeeze(-1).numpy()
            new_obs, rewards, dones, infos = algo.env.step(actions)
            if not algo._after_env_step(callback, new_obs, rewards, dones, infos, n):
                return None
            rec.record(obs, actions, slot, rewards)
            obs = np.array(new_obs, copy=True)
            for i in np.flatnonzero(dones):
                start(i)
        algo._last_obs = obs
        return self.finish(rec.batch())

    def _collect_in_rounds(self, callback: BaseCallback, rec: _EpisodeRecorder, context_seeds) -> GroupBatch | None:
        algo = self.algo
        K, n = algo.n_candidates, algo.n_envs
        total = len(context_seeds) * K
        for first in range(0, total, n):
            slot = np.arange(first, first + n)
            slot[slot >= total] = -1
            algo.env.seed([int(context_seeds[s // K]) if s >= 0 else None for s in slot])
            obs = np.array(algo.env.reset(), copy=True)
            while (slot >= 0).any():
                actions = algo.policy.sample(self.policy_log_probs(obs), 1).squeeze(-1).numpy()
                new_obs, rewards, dones, infos = algo.env.step(actions)
                if not algo._after_env_step(callback, new_obs, rewards, dones, infos, n):
                    return None
                rec.record(obs, actions, slot, rewards)
                obs = np.array(new_obs, copy=True)
                slot[np.asarray(dones, dtype=bool)] = -1  # one episode per sub-env and round
        algo._last_obs = obs
        return self.finish(rec.batch())


class _TokenCollector(Collector):
    """Base of the collectors for autoregressive policies on token envs.

    The env is a lockstep vector env of prompt-then-generate episodes (every sub-env
    writes ``T`` tokens after an ``H``-token prompt, like ``TokenReversal``); the policy
    keeps a key/value cache across the ``T`` env steps instead of re-reading the prefix.
    """

    def layout(self) -> tuple[int, int, int]:
        env = self.algo.env
        H = int(env.get_attr("prompt_length", indices=[0])[0])
        pad = int(self.algo.policy.pad_id)
        T = int(np.asarray(self.algo._last_obs).shape[1]) - H
        return H, T, pad

    def fresh_prompts(self, H: int, pad: int) -> np.ndarray:
        """Current prompts, after starting new episodes if any sub-env is mid-episode."""
        obs = np.asarray(self.algo._last_obs)
        if (obs[:, H:] != pad).any():
            obs = np.asarray(self.algo.env.reset())
            self.algo._last_obs = obs
        return obs[:, :H]

    def tensor(self, x) -> torch.Tensor:
        return torch.as_tensor(np.asarray(x), dtype=torch.long, device=self.algo.device)


class TokenPerStateCollector(_TokenCollector):
    """Token-level groups: K candidates at every prefix state, follow candidate 0."""

    mode = "per_state"

    def collect(self, callback: BaseCallback, n_groups: int) -> TokenGroupBatch | None:
        algo, policy, K = self.algo, self.algo.policy, self.algo.n_candidates
        H, T, pad = self.layout()
        prompts, completions, cands, scores = [], [], [], []
        collected = 0
        while collected < n_groups:
            prompt = self.fresh_prompts(H, pad)
            log_probs, cache = policy.start(self.tensor(prompt))
            seq_c, seq_s = [], []
            for t in range(T):
                c = policy.sample(log_probs, K)
                s = vec_score_candidates(algo.env, c.cpu().numpy())
                algo._check_finite_rewards(s, "score_candidates")
                new_obs, rewards, dones, infos = algo.env.step(c[:, 0].cpu().numpy())
                if not algo._after_env_step(callback, new_obs, rewards, dones, infos, algo.n_envs):
                    return None
                seq_c.append(c)
                seq_s.append(torch.as_tensor(s, dtype=torch.float32))
                if t + 1 < T:
                    log_probs, cache = policy.advance(c[:, 0], cache)
            prompts.append(self.tensor(prompt))
            cands.append(torch.stack(seq_c, 1))
            scores.append(torch.stack(seq_s, 1))
            completions.append(cands[-1][..., 0])
            collected += len(prompt)
        cands_t = torch.cat(cands)
        N = len(cands_t)
        batch = TokenGroupBatch(
            prompts=torch.cat(prompts),
            completions=torch.cat(completions),
            candidates=cands_t,
            scores=torch.cat(scores).view(N * T, K),
            mask=torch.ones(N * T, K, dtype=torch.bool),
            old_logp=torch.zeros(N * T, K),
        )
        return self.finish(batch)


class TokenSequenceCollector(_TokenCollector):
    """Sequence-level groups: K sampled completions per prompt (K = 1: single-sample)."""

    mode = "sequence"

    def finish(self, batch: SequenceGroupBatch) -> SequenceGroupBatch:
        """Freeze the rollout-time token log-probs; a candidate's log-prob is their sum.

        They were read off the sampler's own distributions while sampling (the cache makes
        them equal to a teacher-forced pass up to float rounding), so no extra forward pass
        is needed here."""
        tokens = batch.old_token_logp.float().cpu()
        batch.old_token_logp = tokens
        batch.old_logp = tokens.sum(-1).view(batch.n_groups, batch.group_size)
        return batch

    def group_size(self) -> int:
        return self.algo.n_candidates

    def collect(self, callback: BaseCallback, n_groups: int) -> SequenceGroupBatch | None:
        algo, policy, K = self.algo, self.algo.policy, self.group_size()
        n = algo.n_envs
        if n % K:
            raise ValueError(f"sequence groups need n_envs to be a multiple of K = {K}; got n_envs = {n}")
        H, T, pad = self.layout()
        prompts, completions, logp_all, rewards_all = [], [], [], []
        collected = 0
        while collected < n_groups:
            prompt = self.fresh_prompts(H, pad)[::K]
            if K > 1:  # replay each prompt in its block of K sub-envs
                algo.env.set_options({"context": np.repeat(prompt, K, axis=0)})
                algo._last_obs = algo.env.reset()
            log_probs, cache = policy.start(self.tensor(prompt), K)
            tokens, token_logp, rewards = [], [], []
            for t in range(T):
                token = policy.sample(log_probs).squeeze(-1)
                token_logp.append(log_probs.gather(-1, token.unsqueeze(-1)).squeeze(-1))
                new_obs, r, dones, infos = algo.env.step(token.cpu().numpy())
                if not algo._after_env_step(callback, new_obs, r, dones, infos, n):
                    return None
                tokens.append(token)
                rewards.append(torch.as_tensor(r, dtype=torch.float32))
                if t + 1 < T:
                    log_probs, cache = policy.advance(token, cache)
            prompts.append(self.tensor(prompt))
            completions.append(torch.stack(tokens, 1))
            logp_all.append(torch.stack(token_logp, 1))
            rewards_all.append(torch.stack(rewards, 1))
            collected += len(prompt)
        step_rewards = torch.cat(rewards_all)
        G = len(step_rewards) // K
        batch = SequenceGroupBatch(
            prompts=torch.cat(prompts),
            completions=torch.cat(completions),
            scores=step_rewards.sum(1).view(G, K),
            mask=torch.ones(G, K, dtype=torch.bool),
            old_logp=torch.zeros(G, K),
            step_rewards=step_rewards,
            old_token_logp=torch.cat(logp_all),
        )
        return self.finish(batch)


class TokenSingleCollector(TokenSequenceCollector):
    """One sampled completion per prompt (PG, DG, critic-free PPO)."""

    mode = "single"

    def group_size(self) -> int:
        return 1


COLLECTORS = {
    c.mode: c for c in (AllActionsCollector, PerStateCollector, SequenceCollector, SingleCollector)
}
TOKEN_COLLECTORS = {c.mode: c for c in (TokenPerStateCollector, TokenSequenceCollector, TokenSingleCollector)}


def collector_for(algo: GroupedAlgorithm, mode: str) -> Collector:
    """The collector of ``mode`` suited to the agent's policy."""
    table = TOKEN_COLLECTORS if getattr(algo.policy, "autoregressive", False) else COLLECTORS
    if getattr(algo.policy, "language_model", False):
        from tpo_agents.llm.collect import LM_COLLECTORS

        table = LM_COLLECTORS
    if mode not in table:
        raise ValueError(f"group_mode {mode!r} is not available for {type(algo.policy).__name__}; options: {sorted(table)}")
    return table[mode](algo)
