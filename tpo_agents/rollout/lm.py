"""Collectors for language-model policies on prompt environments.

``sequence`` (TPO, GRPO): each vector step reads the N current prompts of the
:class:`~tpo_agents.llm.vec_env.PromptVecEnv`, samples K completions per prompt (one
batched ``generate``), scores them with the env's ``score_candidates`` and starts new
episodes (new prompts) with ``reset``. ``single`` (PG, DG, critic-free PPO) is the same
with K = 1. Each completion counts as one timestep (an episode of one step) and is
recorded as an episode, so ``rollout/ep_rew_mean`` is the mean reward of the sampled
completions. The rollout-time log-probs come from the same forward pass as training
(:meth:`LMGroupBatch.log_probs`), so the first epoch's ratios are exactly 1.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from tpo_agents.llm.batch import Completions
from tpo_agents.rollout.batches import LMGroupBatch
from tpo_agents.rollout.context import Collector, RolloutContext

__all__ = ["LM_COLLECTORS", "CausalLMSequenceCollector", "CausalLMSingleCollector"]


def adopt_system_prompt(ctx: RolloutContext) -> None:
    """Give the policy the env's ``system_prompt`` when the policy has none."""
    if ctx.policy.system_prompt is not None:
        return
    try:
        env_prompt = ctx.env.get_attr("system_prompt", indices=[0])[0]
    except AttributeError:
        return
    if isinstance(env_prompt, str) and env_prompt:
        ctx.policy.system_prompt = env_prompt


class CausalLMSequenceCollector(Collector):
    """K sampled completions per prompt, scored by the env (sequence-level groups)."""

    mode = "sequence"

    def group_size(self, ctx: RolloutContext) -> int:
        return ctx.n_candidates

    @staticmethod
    def finish(ctx: RolloutContext, batch: LMGroupBatch) -> LMGroupBatch:
        """Freeze the rollout-time token log-probs and completion log-probs."""
        with torch.no_grad():
            tokens = batch.token_log_probs(ctx.policy).float().cpu()
        batch.old_token_logp = tokens
        batch.old_logp = batch.reduce_tokens(tokens)
        return batch

    def collect(self, ctx: RolloutContext, n_groups: int) -> LMGroupBatch | None:
        policy, K = ctx.policy, self.group_size(ctx)
        adopt_system_prompt(ctx)
        if ctx.last_obs is None:
            ctx.reset()
        parts: list[Completions] = []
        scores: list[np.ndarray] = []
        collected = 0
        while collected < n_groups:
            prompts = list(ctx.last_obs)
            completions = policy.sample_completions(prompts, K)
            grouped = [completions.texts[i * K : (i + 1) * K] for i in range(len(prompts))]
            s = np.asarray(ctx.env.score_candidates(grouped), dtype=np.float64).reshape(
                len(prompts), K
            )
            ctx.check_rewards(s, "score_candidates")
            if not self._advance(ctx, s):
                return None
            parts.append(completions)
            scores.append(s)
            collected += len(prompts)
        joined = Completions.cat(parts, policy.tokenizer.pad_token_id)
        batch = LMGroupBatch.from_completions(
            joined,
            torch.as_tensor(np.concatenate(scores), dtype=torch.float32),
            logp_reduction=ctx.logp_reduction,
        )
        return self.finish(ctx, batch)

    @staticmethod
    def _advance(ctx: RolloutContext, scores: np.ndarray) -> bool:
        """Count the scored completions, record them as episodes, draw new prompts."""
        elapsed = round(time.time() - ctx.start_time / 1e9, 6)
        episodes = [{"episode": {"r": float(r), "l": 1, "t": elapsed}} for r in scores.flatten()]
        new_obs = ctx.reset()
        return ctx.on_step(new_obs, scores, None, episodes, scores.size)


class CausalLMSingleCollector(CausalLMSequenceCollector):
    """One sampled completion per prompt (PG, DG, critic-free PPO)."""

    mode = "single"

    def group_size(self, ctx: RolloutContext) -> int:
        return 1


LM_COLLECTORS = {c.mode: c for c in (CausalLMSequenceCollector, CausalLMSingleCollector)}
