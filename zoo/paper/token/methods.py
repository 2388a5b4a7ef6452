"""The Token Reversal studies' methods: one agent configuration per key, and the old names.

``METHODS`` maps each canonical key to its agent class in :mod:`tpo_agents` and the
constructor overrides; every agent uses ``"TransformerPolicy"`` and the paper defaults
(K = 8, B = 100, 4 epochs, eta = 1, Muon lr 1e-3), which are the agents' own defaults.

Aliases (``ALIASES``): names that earlier versions of these studies used for a method that
has a canonical key. ``--methods`` accepts both; they train the same jobs:

=========  ===================  ==============================================================
alias      canonical key        why
=========  ===================  ==============================================================
tpo_token  ``tpo``              the paper's Tables 1, 2 and 5 write TPO_token for TPO on
                                per-token rewards; it is the same agent (``TPO()``)
ppo        ``critic_free_ppo``  the paper's "PPO" has no critic (``CriticFreePPO``); it is not
                                SB3's PPO, which ``zoo.rlzoo.train --algo ppo`` trains
cfppo      ``critic_free_ppo``  ``zoo.rlzoo.train``'s ``--algo`` name for it
=========  ===================  ==============================================================

``grpo_token`` is not an alias of ``grpo``: ``grpo`` is the sequence-level GRPO of the
paper's Table 3 (``ratio_level="sequence"``: one clipped ratio and one KL term per
completion), ``grpo_token`` standard GRPO (``ratio_level="token"``: per-token ratios and
KL). The two train alike on bag and sequential rewards, whose groups are the K candidate
tokens of one position (``ratio_level`` applies to groups of whole completions only), and
differently on terminal reward.

Stored names. A job's name, its cache file (``cache/<experiment>/<method>__<tag>__seed<n>``)
and a result's method keys use the name the committed results already use
(:func:`record_key`): the experiment's own name for the method (``tpo_token`` in
``token-vocab``, ``token-variations`` and ``eta-sweep``; ``tpo`` elsewhere), and ``ppo`` for
the critic-free PPO everywhere. So ``--methods critic_free_ppo``, ``--methods ppo`` and
``--methods cfppo`` all run (or find in the cache) the jobs ``ppo__<tag>__seed<n>``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from zoo.jobs.results import METHOD_LABELS

METHODS: dict[str, tuple[str, dict[str, Any]]] = {
    "tpo": ("TPO", {}),
    # Sequence-level GRPO (terminal reward) as the paper's Table 3 ran it: one clipped ratio
    # and one KL term per completion, on whole-sequence log-probs.
    "grpo": ("GRPO", {"beta": 0.04, "clip_range": 0.2, "ratio_level": "sequence"}),
    # Standard (token-level) GRPO: per-token ratios and KL (GRPO's default ratio_level).
    "grpo_token": ("GRPO", {"beta": 0.04, "clip_range": 0.2}),
    "grpo_no_kl": ("GRPO", {"beta": 0.0, "clip_range": 0.2, "ratio_level": "sequence"}),
    "grpo_masked": (
        "GRPO",
        {"beta": 0.04, "clip_range": 0.2, "mask_zero_variance": True, "ratio_level": "sequence"},
    ),
    "dg": ("DG", {"n_epochs": 1}),
    "pg": ("PG", {}),
    "critic_free_ppo": ("CriticFreePPO", {}),
    "tpo_no_anchor": ("TPO", {"anchor": False}),
    "group_pg": ("GroupPG", {}),
}
"""Canonical method key -> (agent class name in :mod:`tpo_agents`, constructor overrides)."""

ALIASES: dict[str, str] = {
    "tpo_token": "tpo",
    "ppo": "critic_free_ppo",
    "cfppo": "critic_free_ppo",
}
"""Other accepted name -> canonical key (see the module docstring)."""

METHOD_NAMES: tuple[str, ...] = tuple(sorted({*METHODS, *ALIASES}))
"""Every name ``--methods`` accepts: the canonical keys and the aliases."""

RECORD_KEYS: dict[str, str] = {"critic_free_ppo": "ppo"}
"""Canonical key -> the name jobs, cache files and results store it under, where that is
not the key itself (and the experiment does not name it otherwise)."""

SINGLE_SAMPLE = frozenset({"dg", "pg", "critic_free_ppo"})
"""Methods (canonical keys) with one rollout per prompt: ``--match interactions`` gives them
batch B*K and learning rate x sqrt(K) (``interaction_matched=True``)."""

LABELS = {**METHOD_LABELS, "grpo_masked": "GRPO (zero-var. masked)"}


def canonical(method: str) -> str:
    """The canonical key of a method name or alias (``ppo`` -> ``critic_free_ppo``)."""
    return ALIASES.get(method, method)


def record_key(method: str, named: Iterable[str] = ()) -> str:
    """The stored name of ``method`` (a key or an alias): the name in ``named`` (an
    experiment's own method names) that means the same method, else
    ``RECORD_KEYS``'s name for it, else its canonical key."""
    key = canonical(method)
    for name in named:
        if canonical(name) == key:
            return name
    return RECORD_KEYS.get(key, key)


def unknown_methods(methods: Sequence[str]) -> list[str]:
    """The names in ``methods`` that are neither a method key nor an alias."""
    return [m for m in methods if canonical(m) not in METHODS]


def agent_config(method: str) -> tuple[str, dict[str, Any]]:
    """``(agent class name, constructor overrides)`` of a method name, alias or stored name."""
    return METHODS[canonical(method)]


def is_single_sample(method: str) -> bool:
    return canonical(method) in SINGLE_SAMPLE


def label(method: str) -> str:
    return LABELS.get(method, method)
