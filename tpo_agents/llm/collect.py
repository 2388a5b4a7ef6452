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
from stable_baselines3.common.callbacks import BaseCallback

from tpo_agents.llm.batch import Completions, LMGroupBatch
from tpo_agents.sampling import Collector

__all__ = ["LM_COLLECTORS", "CausalLMSequenceCollector", "CausalLMSingleCollector"]


def adopt_system_prompt(algo) -> None:
    """Give the policy the env's ``system_prompt`` when the policy has none."""
    if algo.policy.system_prompt is not None:
        return
    try:
        env_prompt = algo.env.get_attr("system_prompt", indices=[0])[0]
    except AttributeError:
        return
    if isinstance(env_prompt, str) and env_prompt:
        algo.policy.system_prompt = env_prompt


class CausalLMSequenceCollector(Collector):
    """K sampled completions per prompt, scored by the env (sequence-level groups)."""

    mode = "sequence"

    def group_size(self) -> int:
        return self.algo.n_candidates

    def finish(self, batch: LMGroupBatch) -> LMGroupBatch:
        """Freeze the rollout-time token log-probs and completion log-probs."""
        with torch.no_grad():
            tokens = batch.token_log_probs(self.algo.policy).float().cpu()
        batch.old_token_logp = tokens
        batch.old_logp = batch.reduce_tokens(tokens)
        return batch

    def collect(self, callback: BaseCallback, n_groups: int) -> LMGroupBatch | None:
        algo, policy, K = self.algo, self.algo.policy, self.group_size()
        adopt_system_prompt(algo)
        if algo._last_obs is None:
            algo._last_obs = algo.env.reset()
        parts: list[Completions] = []
        scores: list[np.ndarray] = []
        collected = 0
        while collected < n_groups:
            prompts = list(algo._last_obs)
            completions = policy.sample_completions(prompts, K)
            grouped = [completions.texts[i * K : (i + 1) * K] for i in range(len(prompts))]
            s = np.asarray(algo.env.score_candidates(grouped), dtype=np.float64).reshape(
                len(prompts), K
            )
            algo._check_finite_rewards(s, "score_candidates")
            if not self._advance(callback, s):
                return None
            parts.append(completions)
            scores.append(s)
            collected += len(prompts)
        joined = Completions.cat(parts, policy.tokenizer.pad_token_id)
        batch = LMGroupBatch.from_completions(
            joined,
            torch.as_tensor(np.concatenate(scores), dtype=torch.float32),
            logp_reduction=algo.logp_reduction,
        )
        return self.finish(batch)

    def _advance(self, callback: BaseCallback, scores: np.ndarray) -> bool:
        """Count the scored completions, record them as episodes, draw new prompts."""
        algo = self.algo
        elapsed = round(time.time() - algo.start_time / 1e9, 6)
        episodes = [{"episode": {"r": float(r), "l": 1, "t": elapsed}} for r in scores.flatten()]
        new_obs = algo.env.reset()
        algo.num_timesteps += scores.size
        algo._last_obs = new_obs
        algo._update_info_buffer(episodes)
        callback.update_locals(locals())
        return bool(callback.on_step())


class CausalLMSingleCollector(CausalLMSequenceCollector):
    """One sampled completion per prompt (PG, DG, critic-free PPO)."""

    mode = "single"

    def group_size(self) -> int:
        return 1


LM_COLLECTORS = {c.mode: c for c in (CausalLMSequenceCollector, CausalLMSingleCollector)}
