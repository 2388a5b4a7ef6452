"""A learned critic that scores every action of a visited state: TPO on any discrete env.

Envs that cannot score candidates themselves (no ``score_candidates``) and give no group
hint, such as CartPole, get ``critic`` groups: at each visited state the agent follows one
sampled action, and the group is every action, scored by ``Q(s, a)``. The critic is a small
MLP trained off-policy on a replay of recent transitions toward expected-SARSA targets
``r + gamma * (1 - terminated) * sum_a' pi(a' | s') Q_target(s', a')`` (Polyak-averaged
target network); four of them, from different initialisations, so that the scores can
say where the critic is unsure (:func:`critic_advantages`). TPO's target and cross-entropy
are unchanged: only the scores come from the critic. Each update fits the target on the
visited states and on as many states replayed from the critic's buffer (``replay_states``).
"""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.preprocessing import (
    get_flattened_obs_dim,
    is_image_space,
    preprocess_obs,
)
from stable_baselines3.common.torch_layers import (
    BaseFeaturesExtractor,
    CombinedExtractor,
    NatureCNN,
)
from stable_baselines3.common.utils import obs_as_tensor
from torch import nn

from tpo_agents import objectives as obj
from tpo_agents.checks import int_at_least, real_number
from tpo_agents.rollout.observations import obs_buffer, obs_len, put_obs, take_obs

__all__ = [
    "BOOTSTRAPS",
    "DEFAULT_BOOTSTRAP",
    "DEFAULT_NOVELTY",
    "DEFAULT_NOVELTY_HALF_LIFE",
    "DEFAULT_N_STEP",
    "DEFAULT_NOVELTY_STOP",
    "NOVELTY_STOPS",
    "QCritic",
    "QEnsemble",
    "bootstrap_values",
    "critic_advantages",
    "critic_encodes",
    "critic_features_extractor",
    "resolved_novelty",
    "target_residual",
]

BOOTSTRAPS = ("own", "min")
"""How the critics of an ensemble bootstrap (:func:`bootstrap_values`)."""
DEFAULT_BOOTSTRAP = "own"
"""Both critics' default ``bootstrap``."""
DEFAULT_N_CRITICS = 2
"""The ``Discrete`` critic's default ``n_critics``: two held every ``Discrete`` env of the
gym-defaults table on its tuning seeds (four before 2026-12-07) at about a fifth less time per
critic step; the critic of sampled actions keeps four (:data:`SAMPLED_N_CRITICS`)."""
SAMPLED_N_CRITICS = 4
"""The sampled-action critic's default ``n_critics``: two lost two of four Pendulum-v1 tuning
seeds (docs/algorithms.md 4.5)."""
DEFAULT_BATCH_SIZE = 256
"""The ``Discrete`` critic's default ``batch_size`` (replayed transitions per critic step)."""
DEFAULT_UPDATES_PER_STEP = 0.25
"""The ``Discrete`` critic's default ``updates_per_step`` (critic steps per transition)."""
SAMPLED_BATCH_SIZE = 128
"""The sampled-action critic's default ``batch_size`` (the ``Discrete`` critic's: 256). Its
steps cost about twice the ``Discrete`` critic's at the same batch (four critics, each scoring
``n_target_actions`` next actions per row); with :data:`SAMPLED_UPDATES_PER_STEP` and two next
actions it held Pendulum-v1's tuning seeds (docs/algorithms.md 4.5 *Cheaper sampled-action
critic steps*)."""
SAMPLED_UPDATES_PER_STEP = 0.2
"""The sampled-action critic's default ``updates_per_step`` (the ``Discrete`` critic's: 0.25;
0.15 lost Pendulum-v1's tuning seeds)."""
SAMPLED_N_TARGET_ACTIONS = 2
"""The sampled-action critic's default ``n_target_actions`` (4 until 2026-12-08; 1 lost
Pendulum-v1's tuning seeds)."""
NOVELTY_STOPS = ("never", "signal", "fade")
"""When a critic's novelty bonus stops (``novelty_stop``)."""
DEFAULT_NOVELTY = 1.0
"""Both critics' default ``novelty`` on flat observations (0 where a features extractor encodes them)."""
DEFAULT_NOVELTY_STOP = "signal"
"""Both critics' default ``novelty_stop``."""
DEFAULT_NOVELTY_HALF_LIFE = 10_000
"""Transitions over which a fading bonus's weight halves after the signal (``novelty_stop="fade"``)."""
DEFAULT_N_STEP = 3
"""Both critics' default ``n_step`` (rewards summed before a TD target bootstraps): three
carried MountainCar-v0's goal back fast enough for TPO to pass PPO-zoo (docs/algorithms.md 4.5)."""
POLICY_CHUNK = 8192
"""Rows per policy forward when a critic update scores the next observations of all its steps."""
NOVELTY_ROWS_PER_STEP = 1024
"""Replayed rows per step of the novelty predictor: a critic update trains it once, on the next
observations its critic steps drew, in steps of this many rows (a quarter as many steps as the
critic's at the default ``batch_size``, on four times the rows each)."""
NOVELTY_FLOOR = 2.0**-10
"""A fading bonus whose weight has fallen below this fraction of ``novelty`` (ten half-lives)
is off: no more bonus in the TD targets, no more predictor steps."""


def critic_features_extractor(
    observation_space: spaces.Space,
    features_extractor_class: type[BaseFeaturesExtractor] | None = None,
    features_extractor_kwargs: dict[str, Any] | None = None,
) -> BaseFeaturesExtractor | None:
    """The critic's trainable observation encoder, as SB3's policies pick one: SB3's
    ``CombinedExtractor`` for ``Dict`` observations (a ``NatureCNN`` per image key, the
    other keys flattened), ``NatureCNN`` for images, ``features_extractor_class`` when given;
    None for the other spaces, which the critic reads flattened (``Discrete`` one-hot)."""
    if not critic_encodes(observation_space, features_extractor_class):
        return None
    if features_extractor_class is None:
        features_extractor_class = CombinedExtractor if isinstance(observation_space, spaces.Dict) else NatureCNN
    return features_extractor_class(observation_space, **(features_extractor_kwargs or {}))


def critic_encodes(
    observation_space: spaces.Space, features_extractor_class: type[BaseFeaturesExtractor] | None = None
) -> bool:
    """Whether the critic reads ``observation_space`` through a features extractor (given,
    or SB3's choice for Dict and image observations) rather than flattened."""
    if features_extractor_class is not None:
        return True
    return isinstance(observation_space, spaces.Dict) or is_image_space(observation_space)


def resolved_novelty(
    novelty: float | None,
    observation_space: spaces.Space,
    features_extractor_class: type[BaseFeaturesExtractor] | None = None,
) -> float:
    """A critic's ``novelty`` weight: the given one, or for None :data:`DEFAULT_NOVELTY` on
    observations read flattened and 0 on encoded ones (the bonus needs flat observations)."""
    if novelty is not None:
        return novelty
    return 0.0 if critic_encodes(observation_space, features_extractor_class) else DEFAULT_NOVELTY


def critic_advantages(
    qs: torch.Tensor, pi: torch.Tensor, relative_floor: float, noise_scale: float, value_floor: float = 0.0
) -> torch.Tensor:
    """The scores of critic groups: ``(Q(s, a) - V(s)) / scale(s)``, ``[N, n_actions]``.

    ``qs``: ``[n_critics, N, n_actions]``, each critic's ``Q``; ``pi``: ``[N, n_actions]``.
    ``Q`` is the critics' mean and ``V(s) = sum_a pi(a | s) Q(s, a)``. The scale is one for
    the whole batch, the advantages' standard deviation, floored at ``value_floor`` times
    the standard deviation of ``V`` over the batch's states and at ``relative_floor`` times
    the mean ``|V|``: once the critic can hardly tell actions apart, as under a good
    policy, its noise must not be blown up to unit-size scores. With several critics a
    state's scale is also at least ``noise_scale`` times the root-mean-square over its
    actions of the critics' disagreement (standard deviation) about the advantage: where
    they disagree, the policy moves less.
    """
    advs = qs - (pi * qs).sum(-1, keepdim=True)  # each critic's advantages
    adv = advs.mean(0)
    v = (pi * qs.mean(0)).sum(-1, keepdim=True)
    spread = v.std() if len(v) > 1 else v.new_zeros(())  # of V over the states
    floor = torch.maximum(relative_floor * v.abs().mean(), value_floor * spread)
    scale = torch.maximum(adv.std(), floor).clamp_min(1e-8).expand_as(v)
    if qs.shape[0] > 1 and noise_scale > 0:
        disagreement = advs.std(0).pow(2).mean(-1, keepdim=True).sqrt()
        scale = torch.maximum(scale, noise_scale * disagreement)
    return adv / scale


def bootstrap_values(next_values: torch.Tensor, bootstrap: str) -> torch.Tensor:
    """The next state's value each critic's TD target bootstraps from, ``[n_critics, B]``
    from each target net's own ``next_values`` ``[n_critics, B]``.

    ``"own"``: each critic its own (independent critics). ``"min"``: every critic the lowest
    of the ensemble's, as TD3's clipped double Q and REDQ do against overestimation: a policy
    that moves toward the actions the critics score highest seeks out their overestimates,
    and an optimistic bootstrap compounds them.
    """
    if check_bootstrap(bootstrap) == "min":
        return next_values.min(0, keepdim=True).values.expand_as(next_values)
    return next_values


def check_bootstrap(bootstrap: str) -> str:
    """``bootstrap`` if it is one of :data:`BOOTSTRAPS`, else a ValueError naming it."""
    if bootstrap not in BOOTSTRAPS:
        raise ValueError(f"bootstrap must be one of {BOOTSTRAPS}; got {bootstrap!r}")
    return bootstrap


def target_residual(logp: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """How far each state's policy is from its TPO target (eta 1): ``KL(q || p)`` with
    ``q = softmax(log p + u)``, ``[N]`` from ``logp`` and ``u`` ``[N, n_actions]`` (0 where
    ``u`` is constant over the actions). The weights of prioritized replayed states."""
    return obj.kl_divergence(obj.tpo_target(logp, u), logp).clamp_min(0.0)


class _StackedLinear(nn.Module):
    """One layer of every critic: ``weight`` ``[n_critics, out, in]`` (each critic's slice is
    ``nn.Linear``'s ``[out, in]``) and ``bias`` ``[n_critics, 1, out]``."""

    def __init__(self, n_critics: int, in_dim: int, out_dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_critics, out_dim, in_dim))
        self.bias = nn.Parameter(torch.empty(n_critics, 1, out_dim))


class QEnsemble(nn.Module):
    """``n_critics`` independent MLPs ``s -> Q(s, .)``; the output is ``[n_critics, N, n_actions]``.

    The critics are batched: each layer is one weight ``[n_critics, out, in]`` and one bias
    ``[n_critics, 1, out]`` (:class:`_StackedLinear`), so a forward is one matmul per layer
    for all critics rather than a Python loop over ``n_critics`` ``nn.Sequential`` (and Adam
    and the Polyak update see 4x fewer tensors). The numbers are those of the separate MLPs
    it replaces: each critic's slice is initialised as ``nn.Linear`` initialises itself, in
    the same order of random draws (critic by critic, layer by layer, weight then bias), so a
    seed gives the same initial Q values, and the forward and its gradients are those of
    ``nn.Linear`` up to float rounding (bitwise on CPU at the default sizes, 64x64 hidden
    layers: the first layer is one ``linear`` over the stacked weights, the others
    ``baddbmm`` on the ``[out, in]`` weights transposed; an ``[in, out]`` layout rounded
    differently there).

    Critics pickled before this layout (a ``ModuleList`` ``nets`` of ``nn.Sequential``) are
    converted when unpickled (:meth:`__setstate__`), and their ``nets.{i}.{2j}.weight``
    state dicts load (:meth:`_load_from_state_dict`).
    """

    def __init__(self, in_dim: int, n_actions: int, net_arch: tuple[int, ...], n_critics: int):
        super().__init__()
        self.in_dim, self.n_actions, self.n_critics = int(in_dim), int(n_actions), int(n_critics)
        dims = [self.in_dim, *(int(w) for w in net_arch), self.n_actions]
        self.layers = nn.ModuleList(_StackedLinear(self.n_critics, a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Each critic's layers as ``nn.Linear.reset_parameters`` draws them, in the order the
        per-critic ``nn.Sequential`` drew them: a seed gives the Q values it gave."""
        for c in range(self.n_critics):
            for layer in self.layers:
                weight, bias = layer.weight[c], layer.bias[c]  # contiguous [out, in], [1, out]
                nn.init.kaiming_uniform_(weight, a=math.sqrt(5))
                bound = 1 / math.sqrt(weight.shape[1]) if weight.shape[1] > 0 else 0
                nn.init.uniform_(bias, -bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead, n = x.shape[:-1], self.n_critics
        x = x.reshape(-1, x.shape[-1])
        first, *rest = self.layers
        # Every critic reads the same x: one [N, n_critics * out] linear, seen as [n_critics, N, out].
        h = nn.functional.linear(x, first.weight.flatten(0, 1), first.bias.flatten())
        h = h.view(len(x), n, first.weight.shape[1]).transpose(0, 1)
        for layer in rest:
            h = torch.baddbmm(layer.bias, h.relu(), layer.weight.transpose(1, 2))
        return h.reshape(n, *lead, h.shape[-1])

    # ------------------------------------------------------------ the old layout
    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        if "nets" in self._modules:  # pickled before the batched layout
            nets = self._modules.pop("nets")
            old = dict(nets.named_parameters(prefix="nets"))
            new = _stack_legacy_state(old)
            grad = next(iter(old.values())).requires_grad  # False in a target network
            self.n_critics = len(nets)
            self.layers = nn.ModuleList()
            for j in range(len(new) // 2):
                weight, bias = new[f"layers.{j}.weight"], new[f"layers.{j}.bias"]
                layer = _StackedLinear(self.n_critics, weight.shape[2], weight.shape[1])  # no random draws
                layer.weight = nn.Parameter(weight, requires_grad=grad)
                layer.bias = nn.Parameter(bias, requires_grad=grad)
                self.layers.append(layer)
            self.in_dim = self.layers[0].weight.shape[2]
            self.n_actions = self.layers[-1].weight.shape[1]

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:
        legacy = {k[len(prefix):]: state_dict.pop(k) for k in list(state_dict) if k.startswith(prefix + "nets.")}
        if legacy:  # a state dict of the per-critic nn.Sequential: stack it
            state_dict.update({prefix + k: v for k, v in _stack_legacy_state(legacy).items()})
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)


def _stack_legacy_state(old: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``nets.{i}.{2j}.weight`` / ``.bias`` (critic ``i``'s ``j``-th ``nn.Linear`` in its
    ``nn.Sequential``, ReLUs between) to the stacked ``layers.{j}.weight`` / ``.bias``."""
    per: dict[tuple[int, int, str], torch.Tensor] = {}
    for key, value in old.items():
        _, i, k, kind = key.split(".")
        per[int(i), int(k) // 2, kind] = value.detach()
    n_critics = 1 + max(i for i, _, _ in per)
    n_layers = 1 + max(j for _, j, _ in per)
    out = {}
    for j in range(n_layers):
        out[f"layers.{j}.weight"] = torch.stack([per[i, j, "weight"] for i in range(n_critics)])
        out[f"layers.{j}.bias"] = torch.stack([per[i, j, "bias"] for i in range(n_critics)])[:, None]
    return out


class QCritic:
    """``Q(s, .)`` for a ``Discrete`` action space, with its replay, optimizer and target net.

    :param observation_space: the env's observation space (any SB3 preprocessable space;
        ``Dict`` and image observations go through a trainable features extractor,
        :func:`critic_features_extractor`, trained with the critic and Polyak-averaged with
        its target; the others are read flattened).
    :param n_actions: the number of actions.
    :param gamma: discount.
    :param net_arch: hidden layer sizes.
    :param learning_rate: Adam's learning rate for the critic.
    :param buffer_size: transitions kept (the most recent).
    :param batch_size: transitions per critic gradient step (default
        :data:`DEFAULT_BATCH_SIZE`, 256; the critic of sampled actions:
        :data:`SAMPLED_BATCH_SIZE`, 128).
    :param updates_per_step: critic gradient steps per collected transition (default 0.25; the
        critic of sampled actions: :data:`SAMPLED_UPDATES_PER_STEP`, 0.2).
    :param tau: Polyak coefficient of the target network.
    :param relative_floor: the advantages' scale is at least this fraction of the mean
        ``|V|`` (0 by default: ``|V|`` moves with a constant added to the reward; under
        Acrobot's -1 per step it is near 100 while the advantages that matter are
        below 0.01 at first, and a floor of 0.05 held the policy at -500).
    :param value_floor: the advantages' scale is at least this fraction of the standard
        deviation of ``V`` over the batch's states: actions move the policy in proportion
        to how much they matter next to where the agent is. Unlike ``|V|`` it ignores a
        reward offset (docs/algorithms.md 4.5).
    :param n_critics: independent critics (different initialisations, same data); the
        scores use their mean. Default :data:`DEFAULT_N_CRITICS` (2; the critic of sampled
        actions: :data:`SAMPLED_N_CRITICS`, 4).
    :param noise_scale: a state's scale is at least this times the critics' disagreement
        about its advantages (:func:`critic_advantages`; needs ``n_critics > 1``).
    :param replay_states: each update also fits the target on this many states per visited
        state, drawn uniformly from the replay (0: the visited states alone). The critic
        scores every action of any state, so the target needs no on-policy state; without
        them a state the policy rarely visits (next to FrozenLake's goal) is fitted too
        seldom, and the shared network's drift toward what pays at the frequent states
        overwrites it (non-slippery FrozenLake: 4 of 5 seeds solved instead of 2; CartPole
        a little less steady late on; docs/algorithms.md 4.5).
    :param replay_pool: replayed states are chosen from a uniform draw of ``replay_pool``
        times as many, each with probability proportional to how far the policy is from its
        target there (:func:`target_residual`); 1 (the default) draws them uniformly. A
        state that is rare in the replay but whose target the policy has not yet met (the
        state next to FrozenLake's goal, once the policy has settled elsewhere) is then
        fitted whenever it is drawn into the pool: 8 solved non-slippery FrozenLake on 5 of 5
        seeds for TPO and GRPO (4 of 5 uniformly) but held CartPole under 200 (2 seeds), where
        the largest residuals sit at rarely decisive states; so it is not the default.
    :param features_extractor_class: the critic's observation encoder (SB3 features
        extractor); default :func:`critic_features_extractor`'s choice.
    :param features_extractor_kwargs: its keyword arguments.
    :param normalize_images: divide image observations by 255 (SB3's ``preprocess_obs``).
    :param learning_starts: transitions the critic trains on before its advantages move the
        policy (until then they are 0, so the agent keeps its initial, exploratory policy):
        an unconverged critic's small, consistent errors can otherwise steer the policy into
        a corner it never leaves (non-slippery FrozenLake needs about 20,000).
    :param bootstrap: ``"own"`` (default): each critic's TD target bootstraps from its own
        target net; ``"min"``: from the lowest of the ensemble's (:func:`bootstrap_values`).
        Not the default: on Pendulum-v1 no better over 13 seeds, and on Acrobot-v1's tuning
        seeds the pessimistic values of a -1-per-step reward stopped it learning at all
        (docs/algorithms.md 4.5).
    :param novelty: weight of a novelty bonus added to the env's reward in the TD target
        (:mod:`tpo_agents.rollout.novelty`, random network distillation; the bonus is on the
        scale of 1): an exploration drive where every action scores alike until a first
        success. 0 adds nothing; None (default): :data:`DEFAULT_NOVELTY` (1.0) on flat
        observations, 0 where a features extractor encodes them (Dict, images), which the
        bonus does not support.
    :param novelty_stop: ``"signal"`` (default): the bonus is added only until the env first
        gives a signal, a reward unlike the first one seen or, where that first reward is not
        0, a termination (:attr:`signal_seen`; FrozenLake's holes, which end at the 0 that
        wandering earns, are no signal, its goal is); from then on the critic learns the env's
        reward alone, and a run whose env signals before the first critic step (CartPole,
        LunarLander, Pendulum) is the run without the bonus. ``"fade"``: as ``"signal"`` where
        the signal comes before the first critic step; after a signal that comes later the
        bonus's weight halves every ``novelty_half_life`` transitions (off below
        :data:`NOVELTY_FLOOR` of ``novelty``), so the values the bonus built up are unlearned
        gradually instead of all at once. ``"never"``: the bonus is added for the whole
        run, which drives the policy to rare states even after it has found the reward (it
        broke CartPole-v1; docs/algorithms.md 4.5). With ``"signal"`` and ``"fade"`` a bonus that
        had entered a target before the signal is back at full weight once the replay holds no
        signalling transition any more (:attr:`signal_in_replay`), until the next signal: a
        policy that found the reward once but did not learn to repeat it, or lost it, is not
        left with a critic that scores every action alike and nothing to explore by.
    :param novelty_half_life: transitions per halving of a fading bonus (``novelty_stop="fade"``).
    :param n_step: rewards summed before the TD target bootstraps: ``r_t + gamma r_{t+1} + ...
        + gamma^{n-1} r_{t+n-1} + gamma^n V(s_{t+n})``, along the replay's own episode (cut
        short at its end: a termination adds no bootstrap, a truncation bootstraps from the
        last observation; :meth:`n_step_window`). 1: one-step TD. More steps (default
        :data:`DEFAULT_N_STEP`) carry a late reward back faster, at the price of a bias toward
        the replayed actions' returns.
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        n_actions: int,
        device: torch.device | str = "cpu",
        gamma: float = 0.99,
        net_arch: tuple[int, ...] = (64, 64),
        learning_rate: float = 1e-3,
        buffer_size: int = 50_000,
        batch_size: int = DEFAULT_BATCH_SIZE,
        updates_per_step: float = DEFAULT_UPDATES_PER_STEP,
        tau: float = 0.005,
        relative_floor: float = 0.0,
        value_floor: float = 0.5,
        learning_starts: int = 0,
        n_critics: int = DEFAULT_N_CRITICS,
        noise_scale: float = 1.0,
        replay_states: float = 1.0,
        replay_pool: int = 1,
        features_extractor_class: type[BaseFeaturesExtractor] | None = None,
        features_extractor_kwargs: dict[str, Any] | None = None,
        normalize_images: bool = True,
        seed: int | None = None,
        bootstrap: str = DEFAULT_BOOTSTRAP,
        novelty: float | None = None,
        novelty_stop: str = DEFAULT_NOVELTY_STOP,
        novelty_half_life: float = DEFAULT_NOVELTY_HALF_LIFE,
        n_step: int = DEFAULT_N_STEP,
    ):
        self.observation_space, self.n_actions, self.device = observation_space, n_actions, torch.device(device)
        self.gamma, self.tau = gamma, tau
        self.batch_size = int_at_least("batch_size", batch_size, 1)
        self.updates_per_step = real_number("updates_per_step", updates_per_step, at_least=0.0)
        self.relative_floor = real_number("relative_floor", relative_floor, at_least=0.0)
        self.value_floor = real_number("value_floor", value_floor, at_least=0.0)
        self.learning_starts = int_at_least("learning_starts", learning_starts, 0)
        self.n_seen = 0
        """Transitions added so far."""
        self.n_critics = int_at_least("n_critics", n_critics, 1)
        self.noise_scale = real_number("noise_scale", noise_scale, at_least=0.0)
        self.replay_states_ratio = real_number("replay_states", replay_states, at_least=0.0)
        self.replay_pool = int_at_least("replay_pool", replay_pool, 1)
        self.normalize_images = bool(normalize_images)
        self.bootstrap = check_bootstrap(bootstrap)  # a bad value fails here, not mid-run
        extractor = critic_features_extractor(observation_space, features_extractor_class, features_extractor_kwargs)
        novelty = resolved_novelty(novelty, observation_space, features_extractor_class)
        self.novelty = real_number("novelty", novelty, at_least=0.0)
        if novelty_stop not in NOVELTY_STOPS:
            raise ValueError(f"novelty_stop must be one of {NOVELTY_STOPS}; got {novelty_stop!r}")
        self.novelty_stop = novelty_stop
        self.novelty_half_life = real_number("novelty_half_life", novelty_half_life, above=0.0)
        self.n_step = int_at_least("n_step", n_step, 1)
        self._last_rows: np.ndarray | None = None
        """The replay rows of the last vector step and whether each one ended its episode:
        the next step's rows follow them (``n_step > 1``)."""
        self._last_ended: np.ndarray | None = None
        self._fade_from: int | None = None
        """Transitions seen when the env signalled to a scored bonus (the first signal, or the
        first after the replay had forgotten every signal): None where the env signalled before
        the bonus entered a target, which then never does. ``novelty_stop="fade"``: the weight
        halves every ``novelty_half_life`` from there."""
        self._last_signal_at: int | None = None
        """Transitions seen when the latest signal was stored (the replay holds it while fewer
        than ``buffer_size`` have come since: :attr:`signal_in_replay`)."""
        self.signal_seen = False
        """Whether a stored transition had a reward unlike the first one, or terminated
        where the first reward is not 0."""
        self._first_reward: float | None = None
        self.features_extractor = None if extractor is None else extractor.to(self.device)
        """The trainable observation encoder (Dict and image observations), else None."""
        self.features_extractor_target = (
            None if extractor is None else copy.deepcopy(self.features_extractor).requires_grad_(False)
        )
        in_dim = get_flattened_obs_dim(observation_space) if extractor is None else extractor.features_dim
        self.q = QEnsemble(in_dim, n_actions, net_arch, self.n_critics).to(self.device)
        self.q_target = copy.deepcopy(self.q).requires_grad_(False)
        self.optimizer = self._make_optimizer(learning_rate)
        self.novelty_model = None
        """The :class:`~tpo_agents.rollout.novelty.RandomNetworkNovelty` of ``novelty > 0``."""
        if self.novelty > 0:
            if extractor is not None:
                raise ValueError(
                    f"novelty={novelty!r} needs flat observations (Box, Discrete, MultiDiscrete, "
                    f"MultiBinary); got {observation_space}: set novelty to 0 or leave it at None"
                )
            from tpo_agents.rollout.novelty import RandomNetworkNovelty

            self.novelty_model = RandomNetworkNovelty(in_dim, self.device, seed)
        self.rng = np.random.default_rng(seed)
        self.buffer_size = buffer_size
        self._data: dict[str, np.ndarray] | None = None
        self._n = 0
        self._pos = 0
        self._pending = 0
        self._novelty_table: torch.Tensor | None = None
        """During an update, the bonus of the replay rows its TD targets need (else None)."""

    def __setstate__(self, state: dict[str, Any]) -> None:
        # A critic pickled (with its agent) before value_floor existed keeps the rule it was
        # trained with: no floor.
        state.setdefault("value_floor", 0.0)
        state.setdefault("features_extractor", None)  # flat observations (before Dict / images)
        state.setdefault("features_extractor_target", None)
        state.setdefault("normalize_images", True)
        state.setdefault("bootstrap", "own")  # pickled before the option: the only rule then
        state.setdefault("novelty", 0.0)
        state.setdefault("novelty_model", None)
        state.setdefault("novelty_stop", "never")
        state.setdefault("novelty_half_life", DEFAULT_NOVELTY_HALF_LIFE)
        state.setdefault("_novelty_table", None)
        state.setdefault("_fade_from", None)
        state.setdefault("n_step", 1)
        state.setdefault("_last_rows", None)
        state.setdefault("_last_ended", None)
        state.setdefault("signal_seen", True)  # unknown: a bonus stopped at a signal stays off
        state.setdefault("_first_reward", None)
        # Pickled before the replay's signals were tracked: the last one is taken to be as recent
        # as the checkpoint, so a stopped bonus comes back only after a replay's worth without one.
        state.setdefault("_last_signal_at", state.get("n_seen", 0) if state["signal_seen"] else None)
        rows = state.pop("_data_rows", None)
        if rows is not None:  # the replay was pickled without its unwritten rows: put them back
            filled = state["_data"]
            state["_data"] = {k: obs_buffer(v, rows) for k, v in filled.items()}
            for k, v in filled.items():
                put_obs(state["_data"][k], slice(0, obs_len(v)), v)
        self.__dict__.update(state)
        self._adopt_legacy_optimizer()

    def __getstate__(self) -> dict[str, Any]:
        # Only the written rows of the replay travel with the agent: an image replay is
        # mostly rows not yet written (50,000 36x36 RGB frames, twice, are 389 MB).
        state = self.__dict__.copy()
        if self._data is not None and self._n < self.buffer_size:
            state["_data"] = {k: take_obs(v, slice(0, self._n)) for k, v in self._data.items()}
            state["_data_rows"] = self.buffer_size
        return state

    def _extractor_parameters(self, target: bool = False) -> list[nn.Parameter]:
        extractor = self.features_extractor_target if target else self.features_extractor
        return [] if extractor is None else list(extractor.parameters())

    def _make_optimizer(self, learning_rate: float) -> torch.optim.Optimizer:
        """Adam over the critics and the features extractor, ``foreach``: a few calls for all
        tensors instead of about ten per tensor, with the numbers of the default per-tensor
        loop bitwise (and CUDA's default already is ``foreach``). ``fused=True`` (one call)
        rounds differently, within 3e-8 a step, which is enough to change a seeded run: the
        Acrobot test's run at seed 0 ended at -249 instead of passing -200."""
        return torch.optim.Adam([*self.q.parameters(), *self._extractor_parameters()], lr=learning_rate, foreach=True)

    def _adopt_legacy_optimizer(self) -> None:
        """After unpickling a critic saved before :class:`QEnsemble` was batched: its
        optimizer still holds the per-critic parameters (``nets.{i}.{2j}.weight`` ``[out, in]``,
        critic by critic, then the extractor's), which ``QEnsemble.__setstate__`` replaced with
        stacked ones. Adam's state is elementwise, so each stacked parameter's moments are its
        critics' moments stacked: a new optimizer over the new parameters gets them, and the
        next step is the one the old critic would have taken."""
        params = [*self.q.parameters(), *self._extractor_parameters()]
        held = [p for group in self.optimizer.param_groups for p in group["params"]]
        if len(held) == len(params) and all(a is b for a, b in zip(held, params)):
            return  # the optimizer holds the critic's parameters: nothing to convert
        n, n_layers = self.q.n_critics, len(self.q.layers)
        n_extractor = len(params) - 2 * n_layers
        if len(self.optimizer.param_groups) != 1 or len(held) != 2 * n_layers * n + n_extractor:
            raise ValueError(f"cannot map the critic's pickled optimizer ({len(held)} parameters) onto {len(params)}")
        saved = self.optimizer.state_dict()  # its state keyed by the position of the old parameter
        state: dict[int, dict[str, Any]] = {}
        for j in range(n_layers):
            for kind in (0, 1):  # weight, bias
                olds = [saved["state"].get(2 * n_layers * i + 2 * j + kind) for i in range(n)]
                if any(s is None for s in olds):
                    continue  # not stepped yet
                state[2 * j + kind] = {
                    # moments: [out, in] / [out] per critic -> [n, out, in] / [n, 1, out]; the step is shared
                    key: (torch.stack([s[key] for s in olds]).view_as(params[2 * j + kind]) if value.dim() > 0 else value)
                    for key, value in olds[0].items()
                }
        for k in range(n_extractor):
            if 2 * n_layers * n + k in saved["state"]:
                state[2 * n_layers + k] = saved["state"][2 * n_layers * n + k]
        group = saved["param_groups"][0]
        self.optimizer = self._make_optimizer(group["lr"])
        implementation = {k: self.optimizer.param_groups[0][k] for k in ("foreach", "fused")}  # not the old loop's
        group = {**group, **implementation, "params": list(range(len(params)))}
        self.optimizer.load_state_dict({"state": state, "param_groups": [group]})

    # ---------------------------------------------------------------- replay
    def _features(self, obs: Any, target: bool = False) -> torch.Tensor:
        """The critic's input for a batch of observations (an array, or a dict of arrays):
        ``[N, features]``, through the (target, with ``target``) features extractor."""
        extractor = self.features_extractor_target if target else self.features_extractor
        if extractor is None:
            t = torch.as_tensor(np.asarray(obs), device=self.device)
            return preprocess_obs(t, self.observation_space).float().flatten(1)
        t = obs_as_tensor(obs if isinstance(obs, dict) else np.asarray(obs), self.device)
        return extractor(preprocess_obs(t, self.observation_space, normalize_images=self.normalize_images)).float()

    def add(self, obs, actions, rewards, next_obs, terminated, ended=None) -> None:
        """Store one vector step of transitions (``next_obs``: the true next observations,
        terminal ones included; ``ended``: the episode is over, terminated or truncated,
        default ``terminated``). With ``n_step > 1`` each row is linked to the row of the
        same sub-env in the next vector step, unless its episode ended."""
        if not isinstance(obs, dict):  # a Dict space's batches stay dicts of arrays
            obs, next_obs = np.asarray(obs), np.asarray(next_obs)
        n = len(actions)
        if self._data is None:
            self._data = {
                "obs": obs_buffer(obs, self.buffer_size),
                "next_obs": obs_buffer(obs, self.buffer_size),
                "actions": np.zeros(self.buffer_size, dtype=np.int64),
                "rewards": np.zeros(self.buffer_size, dtype=np.float32),
                "terminated": np.zeros(self.buffer_size, dtype=np.float32),
                "successor": np.full(self.buffer_size, -1, dtype=np.int64),
            }
        idx = (self._pos + np.arange(n)) % self.buffer_size
        d = self._data
        put_obs(d["obs"], idx, obs)
        put_obs(d["next_obs"], idx, next_obs)
        d["actions"][idx], d["rewards"][idx], d["terminated"][idx] = actions, rewards, terminated
        if self.n_step > 1:
            # Rows are overwritten oldest first, so a row's successor (written after it) is
            # still there while the row is.
            d["successor"][idx] = -1
            if self._last_rows is not None and len(self._last_rows) == n:
                going_on = ~self._last_ended
                d["successor"][self._last_rows[going_on]] = idx[going_on]
            self._last_rows = idx
            self._last_ended = np.asarray(terminated if ended is None else ended, dtype=bool).reshape(-1).copy()
        self._pos = int((self._pos + n) % self.buffer_size)
        self._n = min(self._n + n, self.buffer_size)
        self._pending += n
        self.n_seen += n
        if not self.signal_seen or self.novelty_model is not None:
            self._note_signals(np.asarray(rewards, dtype=np.float32).reshape(-1), terminated)
        if self.novelty_active:
            self.novelty_model.observe(self._features(next_obs))

    def _note_signals(self, rewards: np.ndarray, terminated) -> None:
        """Record whether this vector step stored a signal (:attr:`signal_seen`), and where."""
        if self._first_reward is None and len(rewards):
            self._first_reward = float(rewards[0])
        # An end is news only where going on was worth something (the first reward, kept up,
        # is worth r / (1 - gamma) != 0): FrozenLake's holes end at the 0 that wandering
        # earns, CartPole's and MountainCar's ends stop a stream of +1 or -1.
        signal = rewards != self._first_reward
        if self._first_reward != 0.0:
            signal = signal | np.asarray(terminated, dtype=bool).reshape(-1)
        if not signal.any():
            return
        if not self.signal_in_replay and self.novelty_scored:  # a bonus that was on stops or fades from here
            self._fade_from = self.n_seen
        self.signal_seen = True
        self._last_signal_at = self.n_seen - len(signal) + 1 + int(np.flatnonzero(signal)[-1])

    @property
    def signal_in_replay(self) -> bool:
        """Whether the replay still holds a transition that signalled (rows are overwritten
        oldest first, so the latest signal is the last to go)."""
        return self._last_signal_at is not None and self.n_seen - self._last_signal_at < self.buffer_size

    @property
    def novelty_weight(self) -> float:
        """The bonus's weight in the TD target now: ``novelty`` until the env's first signal;
        after it ``novelty`` (``"never"``), 0 (``"signal"``), or for ``"fade"`` ``novelty``
        halved every ``novelty_half_life`` transitions since the signal (0 once below
        :data:`NOVELTY_FLOOR` of ``novelty``). Where the signal came before any bonus was
        scored, 0 for good. Otherwise a bonus that stopped or faded is back at ``novelty`` once
        the replay holds no signal any more (:attr:`signal_in_replay`): a policy that lost the
        reward, whose critic has forgotten it, has nothing else to drive it back (``"signal"``
        and ``"fade"``; the next signal stops or fades it again)."""
        if self.novelty_model is None:
            return 0.0
        if not self.signal_seen or self.novelty_stop == "never":
            return self.novelty
        if self._fade_from is None:
            return 0.0
        if not self.signal_in_replay:
            return self.novelty
        if self.novelty_stop == "signal":
            return 0.0
        share = 0.5 ** ((self.n_seen - self._fade_from) / self.novelty_half_life)
        return self.novelty * share if share >= NOVELTY_FLOOR else 0.0

    @property
    def novelty_active(self) -> bool:
        """Whether the novelty bonus is added now (:attr:`novelty_weight` above 0)."""
        return self.novelty_weight > 0.0

    @property
    def novelty_scored(self) -> bool:
        """Whether a novelty bonus has entered a TD target (a critic step ran with it on)."""
        return self.novelty_model is not None and self.novelty_model.bonus_ms is not None

    def replay_states(self, n_visited: int, policy=None) -> np.ndarray | None:
        """``replay_states`` x ``n_visited`` states from the replay, chosen as ``replay_pool``
        says (``policy``: the current one, for the priorities; without it, uniformly);
        None: none."""
        n = int(round(self.replay_states_ratio * n_visited))
        if n == 0 or self._n == 0:
            return None
        if self.replay_pool <= 1 or policy is None:
            return take_obs(self._data["obs"], self.rng.integers(0, self._n, size=n))
        pool = take_obs(self._data["obs"], self.rng.integers(0, self._n, size=n * self.replay_pool))
        with torch.no_grad():
            obs_t, _ = policy.obs_to_tensor(pool)
            logp = policy.action_log_probs(obs_t).float().cpu()
            weight = target_residual(logp, self.advantages(pool, policy)).numpy().astype(np.float64)
        if not weight.sum() > 0:  # the policy already is its target everywhere in the pool
            return take_obs(pool, slice(0, n))
        return take_obs(pool, self.rng.choice(obs_len(pool), size=n, replace=True, p=weight / weight.sum()))

    # ---------------------------------------------------------------- learning
    def _q_and_target(self, i: np.ndarray, policy, prepared=None) -> tuple[torch.Tensor, torch.Tensor]:
        """For the replay rows ``i``: Q of the taken actions (with grad) and the expected-SARSA
        target ``r + gamma (1 - done) sum_a pi(a|s') Q_target(s', a)``, each ``[n_critics, batch]``.
        ``prepared``: ``(window, pi2)`` from :meth:`_prepare` (default: computed here)."""
        d = self._data
        window, pi2 = self._prepare(i, policy) if prepared is None else prepared
        next_obs = take_obs(d["next_obs"], i if window is None else window[2])
        s, s2 = self._features(take_obs(d["obs"], i)), self._features(next_obs, target=True)
        with torch.no_grad():
            v2 = (pi2 * self.q_target(s2)).sum(-1)  # [n_critics, batch]
            y = self._td_target(i, v2, window)
        a = torch.as_tensor(d["actions"][i], device=self.device)
        q = self.q(s).gather(2, a[None, :, None].expand(self.n_critics, -1, 1)).squeeze(2)
        return q, y

    @property
    def _policy_chunk(self) -> int:
        """Rows per policy forward in :meth:`_prepare`: about :data:`POLICY_CHUNK`, whole steps."""
        return max(1, POLICY_CHUNK // self.batch_size) * self.batch_size

    @torch.no_grad()
    def _prepare(self, i: np.ndarray, policy):
        """What the TD targets of replay rows ``i`` need that the critic's steps do not change:
        the ``n_step`` window (:meth:`n_step_window`) and the policy's probabilities at the
        observation each row bootstraps from, ``[len(i), n_actions]``, in chunks of
        :attr:`_policy_chunk` rows."""
        window = self.n_step_window(i)
        next_obs = take_obs(self._data["next_obs"], i if window is None else window[2])
        parts = []
        for start in range(0, len(i), self._policy_chunk):
            obs2, _ = policy.obs_to_tensor(take_obs(next_obs, slice(start, start + self._policy_chunk)))
            parts.append(self._policy_at_next(policy, obs2))
        return window, torch.cat(parts) if len(parts) > 1 else parts[0]

    def _policy_at_next(self, policy, obs2) -> torch.Tensor:
        """What the TD target needs of the policy at next observations ``obs2``: its
        probabilities, ``[N, n_actions]``."""
        return policy.action_log_probs(obs2).exp().to(self.device)

    def n_step_window(self, i: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
        """The ``n_step`` transitions whose rewards the TD targets of rows ``i`` sum (None for
        one step): ``rows`` ``[n, B]`` (row ``i`` then its successors; where the window ended
        early the last row repeats), their discounts ``[n, B]`` (``gamma^k``, 0 past the
        window's end), the row whose next observation is bootstrapped from ``[B]`` and the
        bootstrap's discount ``[B]`` (``gamma^m`` after ``m`` rewards, 0 after a termination)."""
        if self.n_step == 1:
            return None
        d = self._data
        rows = np.empty((self.n_step, len(i)), dtype=np.int64)
        discounts = np.zeros((self.n_step, len(i)), dtype=np.float32)
        gamma = np.float32(self.gamma)
        row, discount = np.asarray(i, dtype=np.int64).copy(), np.ones(len(i), dtype=np.float32)
        going = np.ones(len(i), dtype=bool)
        boot_discount = np.zeros(len(i), dtype=np.float32)
        for k in range(self.n_step):
            rows[k] = row
            discounts[k] = np.where(going, discount, 0.0)
            terminated = d["terminated"][row] > 0
            successor = d["successor"][row]
            stops = going & (terminated | (successor < 0) | (k == self.n_step - 1))
            discount_next = discount * gamma
            boot_discount[stops] = np.where(terminated, 0.0, discount_next)[stops]
            going &= ~stops
            row = np.where(going, successor, row)
            discount = discount_next
        return rows, discounts, rows[-1], boot_discount

    def _td_target(self, i: np.ndarray, next_value: torch.Tensor, window=None) -> torch.Tensor:
        """``r + gamma (1 - terminated) V(s')`` for rows ``i`` (the env's reward plus the next
        state's novelty while the bonus is on), or the ``n_step`` return of ``window``
        (:meth:`n_step_window`) plus its discounted bootstrap."""
        d = self._data
        if window is None:
            r = torch.as_tensor(d["rewards"][i], device=self.device)
            if self.novelty_active:  # the env's reward plus the next state's novelty
                r = r + self.novelty_weight * self._novelty_of(i)
            done = torch.as_tensor(d["terminated"][i], device=self.device)
            return r + self.gamma * (1 - done) * bootstrap_values(next_value, self.bootstrap)
        rows, discounts, _, boot_discount = window
        r = torch.as_tensor(d["rewards"][rows], device=self.device)  # [n, B]
        if self.novelty_active:  # each step's next state's novelty
            r = r + self.novelty_weight * self._novelty_of(rows.reshape(-1)).view(rows.shape)
        ret = (torch.as_tensor(discounts, device=self.device) * r).sum(0)
        return ret + torch.as_tensor(boot_discount, device=self.device) * bootstrap_values(next_value, self.bootstrap)

    def update(self, policy) -> float:
        """Critic gradient steps for the transitions added since the last update; the mean
        TD loss."""
        steps = int(self._pending * self.updates_per_step)
        self._pending = 0
        if self._n < self.batch_size or steps == 0:
            return 0.0
        online = [*self.q.parameters(), *self._extractor_parameters()]
        target = [*self.q_target.parameters(), *self._extractor_parameters(target=True)]
        # The policy stays as it is through these steps, so its probabilities at every step's
        # next observations (and the n-step windows) come from one batch: one policy forward
        # per update instead of one per step, row for row the numbers of the per-step calls.
        draws = self.rng.integers(0, self._n, size=(steps, self.batch_size))
        window, pi2 = self._prepare(draws.reshape(-1), policy)
        if self.novelty_active:
            self._score_and_train_novelty(draws.reshape(-1), window)
        try:
            losses = self._critic_steps(draws, window, pi2, policy, online, target)
        finally:
            self._novelty_table = None
        # float32 losses to float64, averaged as np.mean averaged the .item() floats
        return float(np.mean(torch.stack(losses).cpu().numpy().astype(np.float64)))

    def _critic_steps(self, draws: np.ndarray, window, pi2: torch.Tensor, policy, online: list, target: list) -> list:
        """One critic gradient step per row of ``draws`` (``[steps, batch_size]`` replay rows),
        each followed by the target nets' Polyak step; the steps' losses (tensors)."""
        losses = []
        for k, i in enumerate(draws):
            rows = slice(k * self.batch_size, (k + 1) * self.batch_size)
            part = None if window is None else (window[0][:, rows], window[1][:, rows], window[2][rows], window[3][rows])
            q, y = self._q_and_target(i, policy, (part, pi2[rows]))
            loss = nn.functional.smooth_l1_loss(q, y) * self.n_critics
            for p in online:  # optimizer.zero_grad(), without its per-call torch.compile guard
                p.grad = None
            loss.backward()
            self.optimizer.step()
            with torch.no_grad():  # Polyak: pt <- (1 - tau) pt + tau p, one call for every tensor
                torch._foreach_mul_(target, 1 - self.tau)
                torch._foreach_add_(target, online, alpha=self.tau)
            losses.append(loss.detach())  # no .item() per step: it would wait for the device on CUDA
        return losses

    def _score_and_train_novelty(self, rows: np.ndarray, window) -> None:
        """Score, with the predictor as it is, the novelty of every next observation the
        update's TD targets add (each distinct replay row once, into :attr:`_novelty_table`),
        then train the predictor on the next observations of ``rows`` (the update's draws),
        :data:`NOVELTY_ROWS_PER_STEP` at a time. One batched pass instead of a scoring and a
        predictor step per critic step: the predictor's work was most of a critic update's
        time while the bonus is on (MountainCar-v0), in small, overhead-bound calls."""
        d = self._data
        needed = np.unique(rows if window is None else window[0].reshape(-1))
        table = torch.zeros(self.buffer_size, device=self.device)
        table[torch.as_tensor(needed, device=self.device)] = self.novelty_model.bonus(
            self._features(take_obs(d["next_obs"], needed)), batches=len(rows) // self.batch_size
        )
        self._novelty_table = table
        for start in range(0, len(rows), NOVELTY_ROWS_PER_STEP):  # what was novel is less so now
            chunk = rows[start : start + NOVELTY_ROWS_PER_STEP]
            self.novelty_model.train(self._features(take_obs(d["next_obs"], chunk)))

    def _novelty_of(self, rows: np.ndarray) -> torch.Tensor:
        """The novelty bonus of replay rows' next observations, ``[len(rows)]``: from the
        update's table (:meth:`_score_and_train_novelty`), or scored now outside an update."""
        if self._novelty_table is not None:
            return self._novelty_table[torch.as_tensor(rows, device=self.device)]
        return self.novelty_model.bonus(self._features(take_obs(self._data["next_obs"], rows)))

    @torch.no_grad()
    def advantages(self, obs, policy) -> torch.Tensor:
        """:func:`critic_advantages` of every action of ``obs``: one scale for the batch, so a
        state whose actions the critic can hardly tell apart moves the policy little
        (standardizing each state's own few actions would turn any gap into +-1)."""
        qs = self.q(self._features(obs)).float().cpu()  # [n_critics, N, n_actions]
        if self.n_seen < self.learning_starts:
            return torch.zeros_like(qs[0])  # the critic is still learning: no policy update yet
        obs_t, _ = policy.obs_to_tensor(obs)
        pi = policy.action_log_probs(obs_t).exp().float().cpu()
        return critic_advantages(qs, pi, self.relative_floor, self.noise_scale, self.value_floor)

    @torch.no_grad()
    def scores(self, obs) -> torch.Tensor:
        """``Q(s, a)`` for every action (the critics' mean), ``[N, n_actions]`` (CPU float32)."""
        return self.q(self._features(obs)).mean(0).float().cpu()
