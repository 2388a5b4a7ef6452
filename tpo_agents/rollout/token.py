"""Token-level collectors: autoregressive policies on prompt-then-generate token envs.

The env is a lockstep vector env of prompt-then-generate episodes (every sub-env writes
``T`` tokens after an ``H``-token prompt, like ``TokenReversal``); the policy keeps a
key/value cache across the ``T`` env steps instead of re-reading the prefix.

``per_state``
    K candidate tokens at every prefix state, scored by the env; candidate 0 is followed.
``sequence``
    K sampled completions of each prompt (the prompt replayed in a block of K sub-envs);
    the score is the completion's return.
``single``
    One sampled completion per prompt (PG, DG, critic-free PPO).
"""

from __future__ import annotations

import numpy as np
import torch

from tpo_agents.rollout.batches import SequenceGroupBatch, TokenGroupBatch
from tpo_agents.rollout.context import Collector, RolloutContext
from tpo_agents.rollout.scoring import score_candidates

__all__ = ["TOKEN_COLLECTORS", "TokenPerStateCollector", "TokenSequenceCollector", "TokenSingleCollector"]


def _layout(ctx: RolloutContext) -> tuple[int, int, int]:
    """``(H, T, pad)``: prompt length, tokens written per episode, padding token."""
    H = int(ctx.env.get_attr("prompt_length", indices=[0])[0])
    T = int(np.asarray(ctx.last_obs).shape[1]) - H
    return H, T, int(ctx.policy.pad_id)


def _fresh_prompts(ctx: RolloutContext, H: int, pad: int) -> np.ndarray:
    """Current prompts, after starting new episodes if any sub-env is mid-episode."""
    obs = np.asarray(ctx.last_obs)
    if (obs[:, H:] != pad).any():
        obs = np.asarray(ctx.reset())
    return obs[:, :H]


def _tensor(ctx: RolloutContext, x) -> torch.Tensor:
    return torch.as_tensor(np.asarray(x), dtype=torch.long, device=ctx.device)


class TokenPerStateCollector(Collector):
    """Token-level groups: K candidates at every prefix state, follow candidate 0."""

    mode = "per_state"

    def collect(self, ctx: RolloutContext, n_groups: int) -> TokenGroupBatch | None:
        policy, K = ctx.policy, ctx.n_candidates
        H, T, pad = _layout(ctx)
        prompts, completions, cands, scores = [], [], [], []
        collected = 0
        while collected < n_groups:
            prompt = _fresh_prompts(ctx, H, pad)
            log_probs, cache = policy.start(_tensor(ctx, prompt))
            seq_c, seq_s = [], []
            for t in range(T):
                c = policy.sample(log_probs, K)
                s = score_candidates(ctx.env, c.cpu().numpy())
                ctx.check_rewards(s, "score_candidates")
                if ctx.step(c[:, 0].cpu().numpy()) is None:
                    return None
                seq_c.append(c)
                seq_s.append(torch.as_tensor(s, dtype=torch.float32))
                if t + 1 < T:
                    log_probs, cache = policy.advance(c[:, 0], cache)
            prompts.append(_tensor(ctx, prompt))
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
        return self.finish(ctx, batch)


class TokenSequenceCollector(Collector):
    """Sequence-level groups: K sampled completions per prompt (K = 1: single-sample)."""

    mode = "sequence"

    @staticmethod
    def finish(ctx: RolloutContext, batch: SequenceGroupBatch) -> SequenceGroupBatch:
        """Freeze the rollout-time token log-probs; a candidate's log-prob is their sum.

        They were read off the sampler's own distributions while sampling (the cache makes
        them equal to a teacher-forced pass up to float rounding), so no extra forward pass
        is needed here."""
        tokens = batch.old_token_logp.float().cpu()
        batch.old_token_logp = tokens
        batch.old_logp = tokens.sum(-1).view(batch.n_groups, batch.group_size)
        return batch

    def group_size(self, ctx: RolloutContext) -> int:
        return ctx.n_candidates

    def collect(self, ctx: RolloutContext, n_groups: int) -> SequenceGroupBatch | None:
        policy, K, n = ctx.policy, self.group_size(ctx), ctx.n_envs
        if n % K:
            raise ValueError(f"sequence groups need n_envs to be a multiple of K = {K}; got n_envs = {n}")
        H, T, pad = _layout(ctx)
        prompts, completions, logp_all, rewards_all = [], [], [], []
        collected = 0
        while collected < n_groups:
            prompt = _fresh_prompts(ctx, H, pad)[::K]
            if K > 1:  # replay each prompt in its block of K sub-envs
                ctx.env.set_options({"context": np.repeat(prompt, K, axis=0)})
                ctx.reset()
            log_probs, cache = policy.start(_tensor(ctx, prompt), K)
            tokens, token_logp, rewards = [], [], []
            for t in range(T):
                token = policy.sample(log_probs).squeeze(-1)
                token_logp.append(log_probs.gather(-1, token.unsqueeze(-1)).squeeze(-1))
                stepped = ctx.step(token.cpu().numpy())
                if stepped is None:
                    return None
                tokens.append(token)
                rewards.append(torch.as_tensor(stepped[1], dtype=torch.float32))
                if t + 1 < T:
                    log_probs, cache = policy.advance(token, cache)
            prompts.append(_tensor(ctx, prompt))
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
        return self.finish(ctx, batch)


class TokenSingleCollector(TokenSequenceCollector):
    """One sampled completion per prompt (PG, DG, critic-free PPO)."""

    mode = "single"

    def group_size(self, ctx: RolloutContext) -> int:
        return 1


TOKEN_COLLECTORS = {c.mode: c for c in (TokenPerStateCollector, TokenSequenceCollector, TokenSingleCollector)}
