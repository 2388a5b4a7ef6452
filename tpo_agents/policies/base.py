"""The shared base of the policies the grouped agents train (SB3 ``BasePolicy``)."""

from __future__ import annotations

import numpy as np
import torch
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.type_aliases import PyTorchObs

__all__ = ["CategoricalPolicy", "draw_in_blocks"]


def draw_in_blocks(n_rows: int, block: int | None, draw) -> torch.Tensor:
    """``draw(rows)`` for the rows ``0..n_rows`` at once (``block`` None), or for each run of
    ``block`` rows in turn, joined: the random draws separate calls on those runs would make,
    from one evaluation of the network."""
    if block is None or block >= n_rows:
        return draw(slice(None))
    return torch.cat([draw(slice(start, start + block)) for start in range(0, n_rows, block)])


class CategoricalPolicy(BasePolicy):
    """Base of the policies the grouped agents train: ``action_logits(obs) -> [N, A]``.

    Subclasses build ``self.action_net`` (features -> logits). Sampling, greedy
    prediction and log-probabilities are shared. The optimizer lives in
    ``self.optimizer`` (SB3's convention, so it is saved with the model).
    """

    def action_logits(self, obs: PyTorchObs) -> torch.Tensor:
        """Unnormalised log-probabilities of every action, shape ``[N, n_actions]``."""
        features = self.extract_features(obs, self.features_extractor)
        return self.action_net(features)

    def action_log_probs(self, obs: PyTorchObs) -> torch.Tensor:
        """``log pi(a | obs)`` for every action, shape ``[N, n_actions]``."""
        return torch.log_softmax(self.action_logits(obs), dim=-1)

    def sample(self, log_probs: torch.Tensor, n: int = 1, generator: torch.Generator | None = None) -> torch.Tensor:
        """``n`` actions per row drawn from ``exp(log_probs)``, shape ``[N, n]``."""
        return torch.multinomial(log_probs.exp(), n, replacement=True, generator=generator)

    def sample_actions(self, obs: PyTorchObs, n: int = 1, block: int | None = None) -> torch.Tensor:
        """``n`` actions per observation, shape ``[N, n]`` (the interface the Gaussian
        policy shares, :class:`~tpo_agents.policies.gaussian.GaussianMlpPolicy`); ``block``:
        drawn for each run of that many observations in turn (:func:`draw_in_blocks`)."""
        log_probs = self.action_log_probs(obs).float().cpu()
        return draw_in_blocks(len(log_probs), block, lambda rows: self.sample(log_probs[rows], n))

    def step_log_probs(self, obs: PyTorchObs, rows: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """``log pi(actions[i] | obs[rows[i]])``, shape ``[M]``."""
        return self.action_log_probs(obs)[rows, actions]

    def env_actions(self, actions: np.ndarray) -> np.ndarray:
        """Actions as the env takes them (discrete actions as they are)."""
        return np.asarray(actions)

    def forward(self, obs: PyTorchObs, deterministic: bool = False) -> torch.Tensor:
        return self._predict(obs, deterministic)

    def _predict(self, observation: PyTorchObs, deterministic: bool = False) -> torch.Tensor:
        log_probs = self.action_log_probs(observation)
        if deterministic:
            return log_probs.argmax(dim=-1)
        return self.sample(log_probs).squeeze(-1)
