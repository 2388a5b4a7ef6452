"""The paper's two tabular bandit studies (docs/algorithms.md, section 7), batched over seeds.

Both studies move tabular logits by a normalized step ``logits += alpha * g / ||g||``
where ``g = -d loss / d logits`` and the loss is one of the objectives in
:mod:`tpo_agents.objectives` (the single place for the math). The norm is taken per
seed, jointly over all contexts of that seed.

* single-context (:func:`run_single_context`): ``SymmetricBandit``, A actions, B
  sampled actions per step scored through the env's ``score_candidates``.
* multi-context (:func:`run_multi_context`): ``MultiContextBandit``, N contexts, EXACT
  population updates: every action of every context is a candidate, weighted by its
  probability ``pi(a | x)`` (the expectation the sampled update estimates).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from tpo_agents import objectives as obj
from tpo_gym.bandits import MultiContextBanditEnv, SymmetricBanditEnv

SINGLE_METHODS = ("pg", "dg", "grpo", "tpo")
MULTI_METHODS = ("ce", "pg", "dg", "grpo", "tpo")
SAMPLED_BASELINE = 0.5
"""Baseline of the sampled single-context updates: scores are ``reward - 0.5`` (docs/algorithms.md, section 7.2)."""


@dataclass
class Curves:
    """Per-seed curves: ``error[seed, step]`` (step 0 = before any update) and
    ``misalignment[seed, step - 1]`` of each update direction."""

    error: np.ndarray
    misalignment: np.ndarray


def descent_direction(loss_fn: Callable[[torch.Tensor], torch.Tensor], logits: torch.Tensor) -> torch.Tensor:
    """``g = -d loss / d logits`` for a loss built from the logits by ``loss_fn``."""
    theta = logits.detach().requires_grad_(True)
    (grad,) = torch.autograd.grad(loss_fn(theta), theta)
    return -grad


def normalized_step(logits: torch.Tensor, g: torch.Tensor, alpha: float) -> torch.Tensor:
    """``logits + alpha * g / ||g||`` with one norm per seed (leading axis); g = 0 stays put."""
    norms = g.flatten(1).norm(dim=1).view(-1, *([1] * (g.dim() - 1)))
    safe = torch.where(norms > 0, norms, torch.ones_like(norms))
    return logits + alpha * torch.where(norms > 0, g / safe, torch.zeros_like(g))


def cosine_misalignment(g: torch.Tensor, g_oracle: torch.Tensor) -> torch.Tensor:
    """``1 - cos(g, g_oracle)`` per seed (leading axis); a zero direction counts as 1."""
    a, b = g.flatten(1), g_oracle.flatten(1)
    denom = a.norm(dim=1) * b.norm(dim=1)
    cos = torch.where(denom > 0, (a * b).sum(1) / denom.clamp_min(1e-300), torch.zeros_like(denom))
    return (1.0 - cos).clamp_min(0.0)  # rounding can push cos a hair above 1


# ---------------------------------------------------------------- exact (population)


def exact_direction(method: str, logits: torch.Tensor, rewards: torch.Tensor, eta: float = 1.0) -> torch.Tensor:
    """Exact expected update direction for one-hot-reward contexts.

    ``logits`` and ``rewards`` have shape ``[G, A]`` (G contexts, all A actions as the
    candidates); the expectation over ``a ~ pi(. | x)`` is taken with ``weights = pi``.
    In logit space every method gives ``beta(p) (e_y - pi) / G`` (docs/algorithms.md, section 7.1):
    CE 1, PG p, DG p / (1 + p), GRPO sqrt(p / (1 - p)), TPO p (lam - 1) / (1 - p + lam p).
    """
    pi = torch.softmax(logits, -1).detach()
    labels = rewards.argmax(-1)

    def loss(theta: torch.Tensor) -> torch.Tensor:
        logp = torch.log_softmax(theta, -1)
        if method == "ce":
            return obj.cross_entropy_loss(theta, labels)
        if method == "pg":
            return obj.reinforce_loss(logp, rewards, weights=pi)
        if method == "dg":
            # Baseline 0: the delight gate sees the raw reward (docs/algorithms.md 7.1: beta_DG = p / (1 + p)).
            return obj.dg_loss(logp, rewards, eta=eta, weights=pi)
        if method == "grpo":
            return obj.grpo_loss(logp, logp.detach(), rewards, weights=pi)
        if method == "tpo":
            u = obj.standardize_scores(rewards)
            q = obj.tpo_target(logp.detach(), u, eta=eta)
            return obj.tpo_loss(logp, q)
        raise ValueError(f"unknown method {method!r}; expected one of {MULTI_METHODS}")

    return descent_direction(loss, logits)


def run_multi_context(
    method: str,
    seeds: list[int],
    n_contexts: int = 100,
    n_actions: int = 10,
    steps: int = 1000,
    alpha: float = 0.1,
    eta: float = 1.0,
) -> Curves:
    """Exact multi-context study: logits ~ N(0, 1), one correct action per context."""
    rewards, logits = [], []
    for seed in seeds:
        env = MultiContextBanditEnv(n_contexts=n_contexts, n_actions=n_actions, task_seed=seed)
        rewards.append(_reward_table(env, n_contexts, n_actions))
        gen = torch.Generator().manual_seed(seed)
        logits.append(torch.randn(n_contexts, n_actions, generator=gen, dtype=torch.float64))
    r = torch.as_tensor(np.stack(rewards))  # [S, N, A]
    theta = torch.stack(logits)
    S = len(seeds)
    error = np.empty((S, steps + 1))
    mis = np.empty((S, steps))
    error[:, 0] = _multi_error(theta, r)
    flat_r = r.reshape(S * n_contexts, n_actions)
    for t in range(steps):
        flat = theta.reshape(S * n_contexts, n_actions)
        g = exact_direction(method, flat, flat_r, eta).reshape(theta.shape)
        g_ce = exact_direction("ce", flat, flat_r).reshape(theta.shape)
        mis[:, t] = cosine_misalignment(g, g_ce).numpy()
        theta = normalized_step(theta, g, alpha)
        error[:, t + 1] = _multi_error(theta, r)
    return Curves(error, mis)


def _reward_table(env: MultiContextBanditEnv, n_contexts: int, n_actions: int) -> np.ndarray:
    """Reward of every action in every context, read through the scoring protocol."""
    table = np.empty((n_contexts, n_actions))
    every_action = np.arange(n_actions)
    for c in range(n_contexts):
        env.reset(options={"context": c})
        table[c] = env.score_candidates(every_action)
    return table


def _multi_error(theta: torch.Tensor, r: torch.Tensor) -> np.ndarray:
    """Mean over contexts of ``1 - pi(y* | x)``."""
    return (1.0 - (torch.softmax(theta, -1) * r).sum(-1)).mean(-1).numpy()


# ------------------------------------------------------------------ sampled (single)


def sampled_direction(
    method: str,
    logits: torch.Tensor,
    actions: torch.Tensor,
    rewards: torch.Tensor,
    eta: float = 1.0,
) -> torch.Tensor:
    """Update direction from B sampled actions per seed.

    ``logits`` [S, A]; ``actions``, ``rewards`` [S, B]. PG and DG use the advantage
    ``r - 0.5``; GRPO z-scores the B rewards of each seed as one group; TPO averages
    ``r - 0.5`` per action into a length-A score vector (unsampled actions score 0),
    standardizes it and fits ``q = softmax(log pi + u / eta)`` over all A actions.
    """
    adv = rewards - SAMPLED_BASELINE

    def loss(theta: torch.Tensor) -> torch.Tensor:
        logp_all = torch.log_softmax(theta, -1)
        logp = logp_all.gather(1, actions)
        if method == "pg":
            return obj.reinforce_loss(logp, adv)
        if method == "dg":
            return obj.dg_loss(logp, adv, eta=eta)
        if method == "grpo":
            return obj.grpo_loss(logp, logp.detach(), rewards)
        if method == "tpo":
            scores = _per_action_mean(actions, adv, theta.shape[1])
            u = obj.standardize_scores(scores)
            q = obj.tpo_target(logp_all.detach(), u, eta=eta)
            return obj.tpo_loss(logp_all, q)
        raise ValueError(f"unknown method {method!r}; expected one of {SINGLE_METHODS}")

    return descent_direction(loss, logits)


def _per_action_mean(actions: torch.Tensor, values: torch.Tensor, n_actions: int) -> torch.Tensor:
    """Mean of ``values`` per action id, 0 for actions never sampled. Shapes [S, B] -> [S, A]."""
    sums = torch.zeros(actions.shape[0], n_actions, dtype=values.dtype).scatter_add_(1, actions, values)
    counts = torch.zeros_like(sums).scatter_add_(1, actions, torch.ones_like(values))
    return sums / counts.clamp_min(1)


def run_single_context(
    method: str,
    seeds: list[int],
    n_actions: int = 100,
    batch_size: int = 100,
    steps: int = 150,
    alpha: float = 0.1,
    eta: float = 1.0,
) -> Curves:
    """Sampled single-context study: logits start at 0, B actions sampled per step."""
    envs = [SymmetricBanditEnv(n_actions=n_actions, task_seed=seed) for seed in seeds]
    for env, seed in zip(envs, seeds):
        env.reset(seed=seed)
    correct = torch.as_tensor([env.correct_action for env in envs])
    S = len(seeds)
    theta = torch.zeros(S, n_actions, dtype=torch.float64)
    gen = torch.Generator().manual_seed(int(seeds[0]) * 7919 + S)
    error = np.empty((S, steps + 1))
    mis = np.empty((S, steps))
    error[:, 0] = _single_error(theta, correct)
    e_y = torch.nn.functional.one_hot(correct, n_actions).to(theta.dtype)
    for t in range(steps):
        pi = torch.softmax(theta, -1)
        actions = torch.multinomial(pi, batch_size, replacement=True, generator=gen)
        rewards = torch.as_tensor(
            np.stack([env.score_candidates(a) for env, a in zip(envs, actions.numpy())])
        )
        g = sampled_direction(method, theta, actions, rewards, eta)
        p_star = pi.gather(1, correct[:, None])
        mis[:, t] = cosine_misalignment(g, p_star * (e_y - pi)).numpy()
        theta = normalized_step(theta, g, alpha)
        error[:, t + 1] = _single_error(theta, correct)
    return Curves(error, mis)


def _single_error(theta: torch.Tensor, correct: torch.Tensor) -> np.ndarray:
    return (1.0 - torch.softmax(theta, -1).gather(1, correct[:, None]).squeeze(1)).numpy()
