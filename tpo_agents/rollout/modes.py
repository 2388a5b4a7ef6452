"""Group modes and which collector runs each, for each kind of policy.

A policy declares what it acts on: step-level policies (MLP) pick one action per
observation; ``autoregressive`` policies (the causal transformer) write token sequences on
prompt-then-generate envs; ``language_model`` policies (a Hugging Face causal LM) write
text on prompt envs. Each kind has its own collectors (:mod:`~tpo_agents.rollout.step`,
:mod:`~tpo_agents.rollout.token`, :mod:`~tpo_agents.rollout.lm`).
"""

from __future__ import annotations

from typing import Any

from tpo_agents.rollout.context import Collector

__all__ = ["GROUP_MODES", "policy_kind", "collector_for"]

GROUP_MODES = ("all_actions", "branch", "critic", "per_state", "sequence", "single")


def policy_kind(policy: Any) -> str:
    """``"lm"``, ``"token"`` or ``"step"`` for a policy (class or instance)."""
    if getattr(policy, "language_model", False):
        return "lm"
    return "token" if getattr(policy, "autoregressive", False) else "step"


def _table(kind: str) -> dict[str, type[Collector]]:
    if kind == "lm":
        from tpo_agents.rollout.lm import LM_COLLECTORS  # imports transformers-facing code

        return LM_COLLECTORS
    if kind == "token":
        from tpo_agents.rollout.token import TOKEN_COLLECTORS

        return TOKEN_COLLECTORS
    from tpo_agents.rollout.step import STEP_COLLECTORS

    return STEP_COLLECTORS


def collector_for(policy: Any, mode: str) -> Collector:
    """The collector of ``mode`` for this kind of policy; ValueError naming the options."""
    table = _table(policy_kind(policy))
    if mode not in table:
        name = policy.__name__ if isinstance(policy, type) else type(policy).__name__
        raise ValueError(f"group_mode {mode!r} is not available for {name}; options: {sorted(table)}")
    return table[mode]()
