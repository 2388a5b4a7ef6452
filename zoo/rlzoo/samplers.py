"""Optuna samplers of our algorithms' hyperparameters, in rl-zoo3's sampler format.

rl-zoo3 calls ``SAMPLERS[algo](trial, n_actions, n_envs, additional_args)`` for each
trial of ``-optimize`` and passes the returned dict to the algorithm's constructor (over
the hyperparameter file's section). Trial parameters are named like the constructor
arguments, so :func:`convert_params` (rl-zoo3's "converter", used to rebuild a trial's
hyperparameters from a study with ``--trial-id``) is the identity.

Ranges: ``eta`` and DG's ``dg_eta`` log-uniform on [0.1, 10] (the paper sweeps eta over
0.25..4), K in {4, 8, 16, 32} (the paper's K sweep 4..64), epochs in {1, 2, 4, 8},
learning rate log-uniform on [1e-4, 0.3] (the files use 1e-3 for networks, 0.1 for
tabular bandit logits), batch size (contexts per iteration) in
{25, 50, 100, 200}, GRPO's clip in {0.1, 0.2, 0.3} and KL coefficient ``beta`` in
{0, 0.01, 0.04, 0.1} (0 is GRPO without KL).
"""

from __future__ import annotations

from typing import Any

import optuna

K_CHOICES = [4, 8, 16, 32]
EPOCH_CHOICES = [1, 2, 4, 8]
BATCH_CHOICES = [25, 50, 100, 200]


def _learning_rate(trial: optuna.Trial) -> float:
    return trial.suggest_float("learning_rate", 1e-4, 0.3, log=True)


def sample_tpo_params(trial: optuna.Trial, n_actions: int, n_envs: int, additional_args: dict) -> dict[str, Any]:
    """TPO: eta, K, epochs, learning rate, batch size."""
    return {
        "eta": trial.suggest_float("eta", 0.1, 10.0, log=True),
        "n_candidates": trial.suggest_categorical("n_candidates", K_CHOICES),
        "n_epochs": trial.suggest_categorical("n_epochs", EPOCH_CHOICES),
        "learning_rate": _learning_rate(trial),
        "batch_size": trial.suggest_categorical("batch_size", BATCH_CHOICES),
    }


def sample_grpo_params(trial: optuna.Trial, n_actions: int, n_envs: int, additional_args: dict) -> dict[str, Any]:
    """GRPO: clip, KL coefficient beta, K, epochs."""
    return {
        "clip_range": trial.suggest_categorical("clip_range", [0.1, 0.2, 0.3]),
        "beta": trial.suggest_categorical("beta", [0.0, 0.01, 0.04, 0.1]),
        "n_candidates": trial.suggest_categorical("n_candidates", K_CHOICES),
        "n_epochs": trial.suggest_categorical("n_epochs", EPOCH_CHOICES),
    }


def sample_dg_params(trial: optuna.Trial, n_actions: int, n_envs: int, additional_args: dict) -> dict[str, Any]:
    """DG: gate temperature dg_eta and learning rate."""
    return {"dg_eta": trial.suggest_float("dg_eta", 0.1, 10.0, log=True), "learning_rate": _learning_rate(trial)}


def sample_pg_params(trial: optuna.Trial, n_actions: int, n_envs: int, additional_args: dict) -> dict[str, Any]:
    """PG: learning rate and batch size."""
    return {"learning_rate": _learning_rate(trial), "batch_size": trial.suggest_categorical("batch_size", BATCH_CHOICES)}


def sample_cfppo_params(trial: optuna.Trial, n_actions: int, n_envs: int, additional_args: dict) -> dict[str, Any]:
    """Critic-free PPO: clip, epochs, learning rate."""
    return {
        "clip_range": trial.suggest_categorical("clip_range", [0.1, 0.2, 0.3]),
        "n_epochs": trial.suggest_categorical("n_epochs", EPOCH_CHOICES),
        "learning_rate": _learning_rate(trial),
    }


def convert_params(params: dict[str, Any]) -> dict[str, Any]:
    """A trial's parameters as constructor arguments (they already are)."""
    return dict(params)


SAMPLERS = {
    "tpo": sample_tpo_params,
    "grpo": sample_grpo_params,
    "dg": sample_dg_params,
    "pg": sample_pg_params,
    "cfppo": sample_cfppo_params,
}
"""Algorithm key (as in rl-zoo3's ``ALGOS``) -> sampler."""
