"""Group batches: the one structure that feeds every grouped objective.

A batch holds G groups (contexts) of K candidates. A candidate is a sequence of one or
more *steps*; each step is an action taken at a stored state. The log-probability of a
candidate is the sum (or mean, see ``logp_reduction``) of its steps' log-probabilities.

* all-actions groups (bandits): one state per group, K = A steps (every action);
* per-state groups (token level): one state per group, K sampled steps;
* sequence groups (K rollouts per context): one step per visited state, many steps per
  candidate;
* single-sample batches (PG, DG, batch-standardized GRPO): K = 1.

The all-tensor batches of sequence policies are :class:`TokenGroupBatch` (token-level
groups), :class:`SequenceGroupBatch` (K completions per prompt of a token policy) and
:class:`LMGroupBatch` (K sampled texts per prompt of a language model).

Storing unique states once and indexing them keeps the policy forward pass at one row
per state, however many candidates share it. The token batches do the same for their
rows: each distinct prompt is encoded once and each distinct (prompt, completion) pair is
teacher-forced once, whatever the group size (:class:`DistinctRows`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import torch

from tpo_agents.policies.base import CategoricalPolicy

if TYPE_CHECKING:
    from tpo_agents.llm.batch import Completions

__all__ = [
    "LOGP_REDUCTIONS",
    "DistinctRows",
    "Groups",
    "GroupBatch",
    "LMGroupBatch",
    "SequenceGroupBatch",
    "TensorGroups",
    "TokenGroupBatch",
    "distinct_rows",
]

LOGP_REDUCTIONS = ("sum", "mean")


class Groups:
    """Base of every batch: ``scores``, ``mask`` and frozen ``old_logp``, all ``[G, K]``;
    ``log_probs(policy) -> [G, K]`` gives the candidates' log-probs with gradient."""

    scores: torch.Tensor
    mask: torch.Tensor
    old_logp: torch.Tensor
    standardized: bool = False
    """Whether ``scores`` are already the standardized scores ``u`` (see :class:`GroupBatch`)."""

    @property
    def n_groups(self) -> int:
        return self.scores.shape[0]

    @property
    def group_size(self) -> int:
        return self.scores.shape[1]

    def log_probs(self, policy) -> torch.Tensor:
        raise NotImplementedError


@dataclass
class GroupBatch(Groups):
    """Candidates, frozen rollout-time log-probs and raw scores of G groups of K.

    :param states: observations, one row per distinct state (numpy, as the env gives them;
        for ``Dict`` spaces a dict of arrays with that leading axis,
        :mod:`~tpo_agents.rollout.observations`).
    :param step_state: ``[n_steps]`` index into ``states`` of each step.
    :param step_action: ``[n_steps]`` action of each step (``[n_steps, d]`` for ``Box`` actions).
    :param step_candidate: ``[n_steps]`` flat candidate index ``g * K + k`` of each step.
    :param scores: ``[G, K]`` raw scores (rewards or returns) of each candidate.
    :param mask: ``[G, K]`` bool, False for padded candidates.
    :param old_logp: ``[G, K]`` log pi_old(candidate | context), frozen at rollout.
    :param baseline: ``[G]`` optional per-group baseline for single-sample methods.
    :param logp_reduction: ``"sum"`` (the paper) or ``"mean"`` over a candidate's steps.
    :param standardized: ``scores`` are already standardized (see the attribute).
    :param sampled: the candidates are samples from ``pi_old`` (see the attribute).
    """

    states: np.ndarray | dict[str, np.ndarray]
    step_state: torch.Tensor
    step_action: torch.Tensor
    step_candidate: torch.Tensor
    scores: torch.Tensor
    mask: torch.Tensor
    old_logp: torch.Tensor
    baseline: torch.Tensor | None = None
    logp_reduction: str = "sum"
    standardized: bool = False
    """The scores are already the objective's standardized scores ``u`` (critic groups:
    advantages on one batch-wide scale), not to be standardized again within each group."""
    sampled: bool = False
    """The candidates are actions sampled from ``pi_old`` at the state (critic groups of
    ``MultiDiscrete``, ``MultiBinary`` and ``Box`` actions), not every action of it: an
    objective that weights every action by ``pi_old`` (GRPO on critic groups) weights these
    uniformly, since sampling already did."""

    def __post_init__(self) -> None:
        if self.logp_reduction not in LOGP_REDUCTIONS:
            raise ValueError(f"logp_reduction must be one of {LOGP_REDUCTIONS}; got {self.logp_reduction!r}")
        G, K = self.scores.shape
        self._steps_per_candidate = torch.zeros(G * K, dtype=torch.float32).index_add_(
            0, self.step_candidate, torch.ones(len(self.step_candidate))
        )

    @property
    def n_steps(self) -> int:
        return len(self.step_action)

    def log_probs(self, policy: CategoricalPolicy) -> torch.Tensor:
        """``[G, K]`` log pi(candidate | context) under ``policy`` (with gradient)."""
        obs, _ = policy.obs_to_tensor(self.states)
        return self.reduce_steps(policy.step_log_probs(obs, self.step_state, self.step_action))

    def reduce_steps(self, step_logp: torch.Tensor) -> torch.Tensor:
        """Sum (or average) per-step log-probs into ``[G, K]`` candidate log-probs."""
        G, K = self.scores.shape
        flat = torch.zeros(G * K, dtype=step_logp.dtype, device=step_logp.device)
        flat = flat.index_add(0, self.step_candidate.to(step_logp.device), step_logp)
        if self.logp_reduction == "mean":
            flat = flat / self._steps_per_candidate.to(flat).clamp_min(1)
        return flat.view(G, K)

    def to(self, device: torch.device) -> GroupBatch:
        """The same batch with its tensors on ``device`` (states stay numpy)."""
        moved = {
            name: getattr(self, name).to(device)
            for name in ("step_state", "step_action", "step_candidate", "scores", "mask", "old_logp")
        }
        baseline = None if self.baseline is None else self.baseline.to(device)
        return GroupBatch(
            self.states,
            baseline=baseline,
            logp_reduction=self.logp_reduction,
            standardized=self.standardized,
            sampled=self.sampled,
            **moved,
        )


def _gather_candidates(table: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
    return table.gather(-1, candidates)


class DistinctRows(NamedTuple):
    """The distinct prompts and distinct (prompt, completion) pairs of a token batch's rows.

    A token policy's teacher-forced pass costs one prompt encoding per prompt and one pass
    per row; with a small vocabulary prompts repeat across a batch (vocabulary 2, H = 7:
    at most 128 distinct prompts in a batch of 800) and, once a policy is confident, so do
    whole (prompt, completion) pairs. Sending each distinct prompt and each distinct pair
    through the network once and scattering the result back with ``inverse`` gives every
    row the log-probs of its own pass; the backward of that scatter sums the duplicates'
    gradients into their shared row, which is the per-row gradient up to the order of the
    float additions.
    """

    prompts: torch.Tensor
    """``[P, H]`` the distinct prompts."""
    prompt_index: torch.Tensor
    """``[R]`` index into ``prompts`` of each distinct row's prompt."""
    rows: torch.Tensor
    """``[R, T]`` the distinct completions (one per distinct (prompt, completion) pair)."""
    inverse: torch.Tensor
    """``[N]`` index into ``rows`` of each of the batch's rows."""

    def table(self, policy) -> torch.Tensor:
        """``[R, T, V]`` teacher-forced log-probs of the distinct rows (with gradient)."""
        return policy.token_log_probs(self.prompts, self.rows, prompt_index=self.prompt_index)


def distinct_rows(prompts: torch.Tensor, completions: torch.Tensor, rows_per_prompt: int = 1) -> DistinctRows:
    """The :class:`DistinctRows` of ``completions`` ``[N, T]`` whose row ``r`` continues
    ``prompts[r // rows_per_prompt]`` (``prompts`` ``[N / rows_per_prompt, H]``)."""
    unique_prompts, prompt_id = torch.unique(prompts, dim=0, return_inverse=True)
    if rows_per_prompt > 1:
        prompt_id = prompt_id.repeat_interleave(rows_per_prompt)
    keyed = torch.cat([prompt_id.unsqueeze(1), completions], dim=1)
    unique, inverse = torch.unique(keyed, dim=0, return_inverse=True)
    return DistinctRows(unique_prompts, unique[:, 0], unique[:, 1:], inverse)


class TensorGroups(Groups):
    """Base of the all-tensor batches (token, sequence and language-model dataclasses)."""

    def to(self, device: torch.device):
        """The same batch with its tensors on ``device``."""
        fields = {k: getattr(self, k) for k in self.__dataclass_fields__}
        return type(self)(**{k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in fields.items()})


@dataclass
class TokenGroupBatch(TensorGroups):
    """Token-level groups: at each position t of N behaviour sequences, K candidate tokens.

    The behaviour sequence (candidate 0 at every position) is teacher-forced in one
    forward pass, which gives the log-probs of all N * T groups at once.

    :param prompts: ``[N, H]`` prompt tokens.
    :param completions: ``[N, T]`` followed tokens.
    :param candidates: ``[N, T, K]`` candidate tokens per position.
    :param scores: ``[N * T, K]`` the env's score of each candidate.
    """

    prompts: torch.Tensor
    completions: torch.Tensor
    candidates: torch.Tensor
    scores: torch.Tensor
    mask: torch.Tensor
    old_logp: torch.Tensor

    def behaviour_returns(self) -> torch.Tensor:
        """``[N]`` return of each followed sequence (its candidate-0 scores summed)."""
        N, T = self.completions.shape
        return self.scores.view(N, T, -1)[..., 0].sum(1)

    @functools.cached_property
    def distinct_rows(self) -> DistinctRows:
        """The distinct prompts and (prompt, followed sequence) pairs (see :class:`DistinctRows`)."""
        return distinct_rows(self.prompts, self.completions)

    def log_probs(self, policy) -> torch.Tensor:
        # Each distinct (prompt, behaviour sequence) is teacher-forced once; its rows of the
        # [N, T, V] table are shared by its duplicates (see SequenceGroupBatch.token_log_probs).
        distinct = self.distinct_rows
        table = distinct.table(policy)[distinct.inverse]
        return _gather_candidates(table, self.candidates).reshape(self.n_groups, self.group_size)


@dataclass
class SequenceGroupBatch(TensorGroups):
    """Sequence-level groups: K sampled completions of each of G prompts.

    A candidate's log-prob is the sum of its token log-probs, all from one forward pass.

    :param prompts: ``[G, H]``.
    :param completions: ``[G * K, T]`` (rows ``g * K + k``).
    :param scores: ``[G, K]`` returns of the completions.
    :param step_rewards: ``[G * K, T]`` per-token rewards (for per-position advantages).
    :param old_token_logp: ``[G * K, T]`` rollout-time token log-probs (``old_logp`` is
        their sum), kept for per-token objectives.
    """

    prompts: torch.Tensor
    completions: torch.Tensor
    scores: torch.Tensor
    mask: torch.Tensor
    old_logp: torch.Tensor
    step_rewards: torch.Tensor
    old_token_logp: torch.Tensor | None = None

    def behaviour_returns(self) -> torch.Tensor:
        """``[G * K]`` return of every sampled completion."""
        return self.scores.flatten()

    def token_log_probs(self, policy) -> torch.Tensor:
        """``[G * K, T]`` log-prob of each sampled token.

        Every distinct prompt of the batch is encoded once, and every distinct (prompt,
        completion) pair goes through the network once (:attr:`distinct_completions`),
        whatever the group size: identical rows, within a group or across groups and
        single-sample rows alike (common with a small vocabulary and once a policy is
        confident), get the same log-probs, and the backward of the scatter back to the rows
        sums their gradients into the shared row. The values, and the gradient as a sum,
        are the plain per-row pass's; only the order in which float gradient terms are added
        differs, so fixed-seed runs agree with the per-row pass up to float rounding.
        """
        return self._distinct_token_log_probs(policy)[self.distinct_completions.inverse]

    def _distinct_token_log_probs(self, policy) -> torch.Tensor:
        """``[R, T]`` token log-probs of the distinct rows."""
        distinct = self.distinct_completions
        return _gather_candidates(distinct.table(policy), distinct.rows.unsqueeze(-1)).squeeze(-1)

    @functools.cached_property
    def distinct_completions(self) -> DistinctRows:
        """The distinct prompts and (prompt, completion) pairs of the rows (see
        :class:`DistinctRows`) ``d``: ``completions == d.rows[d.inverse]`` and row
        ``g * K + k`` continues ``prompts[g] == d.prompts[d.prompt_index[d.inverse[g * K + k]]]``."""
        return distinct_rows(self.prompts, self.completions, self.group_size)

    def log_probs(self, policy) -> torch.Tensor:
        seq = self._distinct_token_log_probs(policy).sum(-1)
        return seq[self.distinct_completions.inverse].view(self.n_groups, self.group_size)


@dataclass
class LMGroupBatch(TensorGroups):
    """G prompts x K sampled completions (rows ``g * K + k``) of a language-model policy.

    :param prompt_ids, prompt_mask, completion_ids, completion_mask: as in
        :class:`~tpo_agents.llm.batch.Completions`.
    :param scores: ``[G, K]`` verifier scores.
    :param mask: ``[G, K]`` bool validity (all True: every prompt gets its K completions).
    :param old_logp: ``[G, K]`` rollout-time sequence log-probs (frozen).
    :param old_token_logp: ``[G * K, T]`` rollout-time token log-probs (0 on padding).
    :param logp_reduction: a completion's log-prob is the ``"sum"`` (default) or the
        ``"mean"`` of its token log-probs.
    """

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor
    scores: torch.Tensor
    mask: torch.Tensor
    old_logp: torch.Tensor
    old_token_logp: torch.Tensor | None = None
    logp_reduction: str = "sum"

    def __post_init__(self) -> None:
        if self.logp_reduction not in LOGP_REDUCTIONS:
            raise ValueError(
                f"logp_reduction must be one of {LOGP_REDUCTIONS}; got {self.logp_reduction!r}"
            )

    @classmethod
    def from_completions(
        cls, completions: Completions, scores: torch.Tensor, logp_reduction: str = "sum"
    ) -> LMGroupBatch:
        """A batch from ``G * K`` completions and their ``[G, K]`` scores."""
        G, K = scores.shape
        if completions.completion_ids.shape[0] != G * K:
            raise ValueError(
                f"{completions.completion_ids.shape[0]} completions do not form {G} groups of {K}"
            )
        return cls(
            prompt_ids=completions.prompt_ids,
            prompt_mask=completions.prompt_mask,
            completion_ids=completions.completion_ids,
            completion_mask=completions.completion_mask,
            scores=scores.float(),
            mask=torch.ones(G, K, dtype=torch.bool),
            old_logp=torch.zeros(G, K),
            logp_reduction=logp_reduction,
        )

    def token_log_probs(self, policy) -> torch.Tensor:
        """``[G * K, T]`` log-prob of each completion token under ``policy`` (0 on padding)."""
        return policy.completion_log_probs(
            self.prompt_ids, self.prompt_mask, self.completion_ids, self.completion_mask
        )

    def log_probs(self, policy) -> torch.Tensor:
        """``[G, K]`` sequence log-probs (sum, or mean, of the completion's token
        log-probs), with gradient."""
        return self.reduce_tokens(self.token_log_probs(policy))

    def reduce_tokens(self, token_logp: torch.Tensor) -> torch.Tensor:
        """``[G * K, T]`` token log-probs -> ``[G, K]`` completion log-probs."""
        seq = token_logp.sum(-1)
        if self.logp_reduction == "mean":
            seq = seq / self.completion_mask.sum(-1).clamp_min(1).to(seq)
        return seq.view(self.n_groups, self.group_size)

    def completion_lengths(self) -> torch.Tensor:
        """``[G, K]`` number of tokens of each completion (EOS included)."""
        return self.completion_mask.sum(-1).view(self.n_groups, self.group_size)
