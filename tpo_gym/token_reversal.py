"""Token Reversal (after Osband 2026): write a target sequence derived from a random prompt.

A prompt ``x`` of ``H = length`` tokens is drawn uniformly from a vocabulary of ``V =
vocab_size`` tokens; the agent writes ``H`` tokens one per step and is scored against a
target sequence ``y`` derived from ``x``:

* ``copy``: ``y = x``;
* ``flip``: ``y = V - 1 - x``;
* ``reverse_copy``: ``y = x`` reversed;
* ``reverse_flip``: ``y = V - 1 - x`` reversed.

Per-token correctness ``c_t = 1{a_t = y_t}``. The per-step rewards are scaled so that the
episode *return* is the paper's metric (docs/algorithms.md, section 9.2):

* ``bag``: ``c_t / H`` each step; return = fraction of correct tokens;
* ``sequential``: ``(prod_{j<=t} c_j) / H`` each step; return = correct-prefix length / H;
* ``terminal``: ``0`` until the last step, then ``1.0`` iff every token is right.

The reward logic lives in one place, :func:`sequence_rewards` (via ``_rewards_from_correct``),
which ``step``, ``score_candidates`` and agent code scoring whole sampled sequences share.

Comes as a single :class:`gymnasium.Env` (:class:`TokenReversalEnv`) and a native
:class:`gymnasium.vector.VectorEnv` (:class:`TokenReversalVectorEnv`, ``gym.make_vec``) that
steps every sub-environment with one numpy expression and can make blocks of ``group_size``
sub-environments share one prompt (K rollouts per prompt for sequence-level groups).

This module imports numpy and gymnasium only (never torch).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from tpo_gym.candidates import GROUP_MODE_KEY, check_candidate_actions
from tpo_gym.rng import CounterStreams
from tpo_gym.snapshot import StateSnapshot
from tpo_gym.validation import (
    check_action_batch,
    check_int,
    check_render_mode,
    check_reset_options,
    check_scalar_action,
    check_vector_seed,
    show,
)

__all__ = [
    "REWARDS",
    "TARGETS",
    "NoPerStateScoreError",
    "TokenReversalEnv",
    "TokenReversalResetNeeded",
    "TokenReversalVectorEnv",
    "group_mode_for_reward",
    "sequence_rewards",
    "target_sequence",
]

TARGETS = ("copy", "flip", "reverse_copy", "reverse_flip")
"""The target kinds: ``y = x``, ``V-1-x``, ``x`` reversed, ``V-1-x`` reversed."""

REWARDS = ("bag", "sequential", "terminal")
"""The reward kinds: bag of tokens, sequential (correct prefix), terminal (exact match)."""


class TokenReversalResetNeeded(gym.error.ResetNeeded, ValueError):
    """``step``/``score_candidates`` called before ``reset()`` or after the episode ended.

    Subclasses both :class:`gymnasium.error.ResetNeeded` and :class:`ValueError`.
    """


class NoPerStateScoreError(NotImplementedError, ValueError):
    """``score_candidates`` asked of a terminal-reward env: there is no per-state score.

    With ``reward="terminal"`` a token's reward depends on the tokens still to come, so
    candidates cannot be scored state by state. Form sequence-level groups instead: K full
    rollouts per prompt (``group_mode="sequence"``, or the vector env's ``group_size=K``),
    each scored by its episode return (see :func:`sequence_rewards`).
    Subclasses both :class:`NotImplementedError` and :class:`ValueError`.
    """


# --------------------------------------------------------------------------- validation


def _check_choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}, got {show(value)}")
    return value


def _check_tokens(
    value: Any, vocab_size: int, what: str, shape: tuple[int, ...] | None = None
) -> np.ndarray:
    """An integer array with values in ``[0, vocab_size)`` (optionally of ``shape``) -> int64."""
    valid = f"valid tokens are integers in [0, {vocab_size - 1}]"
    arr = np.asarray(value)
    if arr.dtype == object:
        raise ValueError(f"{what} must be an integer array, got a ragged or non-numeric {value!r}")
    if shape is not None and arr.shape != shape:
        raise ValueError(f"{what} must have shape {shape}, got shape {arr.shape}")
    if arr.ndim < 1:
        raise ValueError(
            f"{what} must be an integer array with at least 1 dimension, got {value!r}"
        )
    if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{what} must have an integer dtype, got dtype {arr.dtype}; {valid}")
    bad = (arr < 0) | (arr >= vocab_size)
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(
            f"{what} has token {show(arr[idx])} at index {idx} (out of range); {valid}"
        )
    return arr.astype(np.int64)


# --------------------------------------------------------------------------- pure helpers


def _targets(prompts: np.ndarray, target: str, vocab_size: int) -> np.ndarray:
    """Unchecked :func:`target_sequence` (int64 ``prompts [..., H]`` -> int64 ``[..., H]``)."""
    y = vocab_size - 1 - prompts if target in ("flip", "reverse_flip") else prompts
    if target in ("reverse_copy", "reverse_flip"):
        y = y[..., ::-1]
    return np.ascontiguousarray(y, dtype=np.int64)


def _rewards_from_correct(correct: np.ndarray, reward: str, length: int) -> np.ndarray:
    """Per-step rewards of the tokens ``0..L-1`` given their correctness ``bool [..., L]``.

    ``L <= length``: a prefix of an episode of ``length`` tokens. Column ``t`` is the reward of
    step ``t`` (it depends on columns ``<= t`` only). This is the single place the reward
    logic lives; ``step``, ``score_candidates`` and :func:`sequence_rewards` all call it.
    """
    if reward == "bag":
        credit = correct
    elif reward == "sequential":
        credit = np.logical_and.accumulate(correct, axis=-1)
    else:  # terminal: 1 at the last step iff every token is right
        out = np.zeros(correct.shape, dtype=np.float64)
        if correct.shape[-1] == length:
            out[..., -1] = correct.all(axis=-1)
        return out
    return credit.astype(np.float64) / length


def target_sequence(prompts: Any, target: str = "reverse_copy", vocab_size: int = 2) -> np.ndarray:
    """The target sequences of ``prompts`` (batched over leading axes).

    Args:
        prompts: integer array ``[..., H]`` of tokens in ``[0, vocab_size)`` (last axis: the
            sequence; e.g. ``[H]`` or ``[n, H]``).
        target: ``"copy"`` (``y = x``), ``"flip"`` (``y = V-1-x``), ``"reverse_copy"``
            (``x`` reversed) or ``"reverse_flip"`` (``V-1-x`` reversed).
        vocab_size: ``V >= 2``.

    Returns:
        int64 array of the same shape as ``prompts`` (a new array).

    Raises:
        ValueError: unknown ``target``, ``vocab_size < 2``, non-integer or out-of-range tokens.
    """
    target = _check_choice("target", target, TARGETS)
    vocab_size = check_int("vocab_size", vocab_size, 2)
    x = _check_tokens(prompts, vocab_size, "prompts")
    return _targets(x, target, vocab_size)


def sequence_rewards(
    prompts: Any,
    tokens: Any,
    target: str = "reverse_copy",
    vocab_size: int = 2,
    reward: str = "bag",
) -> np.ndarray:
    """Per-step rewards of whole written sequences, exactly as the env's ``step`` returns them.

    Scores many completed sequences at once without stepping an env (e.g. K sampled
    sequences per prompt: ``sequence_rewards(prompts[:, None, :], tokens_bkh, ...)``).
    The episode return of each sequence is ``result.sum(-1)``: the fraction of correct
    tokens (``bag``), the correct-prefix length / H (``sequential``) or the exact match
    (``terminal``).

    Args:
        prompts: integer array ``[..., H]`` of prompt tokens in ``[0, vocab_size)``.
        tokens: integer array ``[..., H]`` of written tokens in ``[0, vocab_size)``; its
            leading axes broadcast against those of ``prompts``.
        target: one of :data:`TARGETS`.
        vocab_size: ``V >= 2``.
        reward: one of :data:`REWARDS`.

    Returns:
        float64 ``[*broadcast(leading), H]``: the reward of each step.

    Raises:
        ValueError: unknown ``target``/``reward``, ``vocab_size < 2``, mismatched sequence
            lengths, shapes that do not broadcast, non-integer or out-of-range tokens.
    """
    target = _check_choice("target", target, TARGETS)
    reward = _check_choice("reward", reward, REWARDS)
    vocab_size = check_int("vocab_size", vocab_size, 2)
    x = _check_tokens(prompts, vocab_size, "prompts")
    a = _check_tokens(tokens, vocab_size, "tokens")
    if x.shape[-1] < 1:
        raise ValueError(f"sequences must have at least one token, got prompts shape {x.shape}")
    if x.shape[-1] != a.shape[-1]:
        raise ValueError(
            f"prompts and tokens must have the same sequence length (last axis), got shapes "
            f"{x.shape} and {a.shape}"
        )
    try:
        shape = np.broadcast_shapes(x.shape, a.shape)
    except ValueError:
        raise ValueError(
            f"prompts shape {x.shape} and tokens shape {a.shape} do not broadcast"
        ) from None
    correct = np.broadcast_to(a, shape) == _targets(x, target, vocab_size)
    return _rewards_from_correct(correct, reward, x.shape[-1])


def group_mode_for_reward(reward: str) -> str:
    """The ``metadata["tpo_group_mode"]`` of a reward kind: ``per_state`` or ``sequence``."""
    reward = _check_choice("reward", reward, REWARDS)
    return "sequence" if reward == "terminal" else "per_state"


def _render_line(prompt: np.ndarray, tokens: np.ndarray, t: int, length: int) -> str:
    written = " ".join(str(v) for v in tokens[:t]) + " _" * (length - t)
    return f"prompt {' '.join(str(v) for v in prompt)} | output {written.strip()} (t={t}/{length})"


# --------------------------------------------------------------------------- single env


class TokenReversalEnv(gym.Env[np.ndarray, np.int64]):
    """Token Reversal: read a prompt of ``length`` tokens, then write its target sequence.

    ## Description
    The Token Reversal task of the TPO paper (after Osband 2026). Each episode draws a prompt
    ``x`` of ``H = length`` tokens uniformly from ``V = vocab_size`` tokens; the agent then
    writes ``H`` tokens, one per step, and is scored against the target sequence ``y``:
    ``copy`` (``y = x``), ``flip`` (``y = V-1-x``), ``reverse_copy`` (``x`` reversed) or
    ``reverse_flip`` (``V-1-x`` reversed); see :func:`target_sequence`.

    ## Action Space
    ``Discrete(V)``: the next token to write.

    ## Observation Space
    ``MultiDiscrete([V + 1] * 2H)`` (int64)::

        obs = [x_1, ..., x_H, a_1, ..., a_t, PAD, ..., PAD]

    the prompt, then the ``t`` tokens written so far (``t = step_index``), then ``H - t``
    padding tokens ``PAD = pad_id = V``. The target is never observed.

    ## Rewards
    With ``c_t = 1{a_t = y_t}``, per step (so that the return is the paper's metric):

    * ``reward="bag"``: ``c_t / H``; return = fraction of correct tokens;
    * ``reward="sequential"``: ``(prod_{j<=t} c_j) / H``; return = length of the correct
      prefix / H (credit only up to the first mistake);
    * ``reward="terminal"``: ``0`` until step ``H``, then ``1.0`` iff every token is right.

    ``info["correct"]`` (bool) says whether this step's token was right; the last step's info
    adds ``"target"`` (int64 ``[H]``), ``"n_correct"`` (int) and ``"exact_match"`` (bool).
    The reward logic is :func:`sequence_rewards`, shared with agent code.

    ## Starting State
    ``reset()`` draws the prompt uniformly, using a 64-bit key taken from ``np_random`` when
    the environment is seeded and a per-environment episode counter (so
    :class:`TokenReversalVectorEnv` reproduces single environments seeded ``s + i``).
    ``reset(options={"context": prompt})`` replays a given prompt (int array ``[H]`` in
    ``[0, V)``; no draw is consumed). The reset info is empty.

    ## Episode End
    After ``H`` steps: the ``H``-th step returns ``terminated=True``; ``truncated`` is always
    ``False`` (no time limit is needed). ``step``/``score_candidates`` before ``reset()`` or
    after the episode ended raise :class:`TokenReversalResetNeeded` (a ``ValueError``); an
    invalid action raises ``ValueError``.

    ## Candidate scoring
    ``score_candidates(actions [K]) -> float64 [K]``: the reward each candidate token would get
    now (``bag``: ``c / H``; ``sequential``: ``alive * c / H``, ``alive`` = every earlier
    token right), with no state change. With ``reward="terminal"`` it raises
    :class:`NoPerStateScoreError`: use sequence-level groups (K rollouts per prompt).
    ``metadata["tpo_group_mode"]`` is ``"per_state"`` (bag, sequential) or ``"sequence"``
    (terminal).

    ## Arguments
    ```python
    gym.make("TokenReversal-v0", length=10, vocab_size=2, target="reverse_copy",
             render_mode=None)          # bag reward; also TokenReversal-bag-v0
    gym.make("TokenReversal-sequential-v0", length=10, vocab_size=2, target="copy")
    gym.make("TokenReversal-terminal-v0", length=8)
    gym.make_vec("TokenReversal-v0", num_envs=100, group_size=1)  # TokenReversalVectorEnv
    ```
    * ``length`` (int >= 1): ``H``, the prompt and answer length.
    * ``vocab_size`` (int >= 2): ``V``.
    * ``target``: ``"copy"``, ``"flip"``, ``"reverse_copy"`` or ``"reverse_flip"``.
    * ``reward``: ``"bag"``, ``"sequential"`` or ``"terminal"`` (fixed by the id).
    * ``render_mode``: ``None`` or ``"ansi"`` (a text line).

    ## Version History
    * v0: Initial version.
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 4, GROUP_MODE_KEY: "per_state"}

    def __init__(
        self,
        length: int = 10,
        vocab_size: int = 2,
        target: str = "reverse_copy",
        reward: str = "bag",
        render_mode: str | None = None,
    ) -> None:
        self.prompt_length = check_int("length", length, 1)
        self.vocab_size = check_int("vocab_size", vocab_size, 2)
        self.target = _check_choice("target", target, TARGETS)
        self.reward = _check_choice("reward", reward, REWARDS)
        self.render_mode = check_render_mode(render_mode, self.metadata["render_modes"])
        self.metadata = {**type(self).metadata, GROUP_MODE_KEY: group_mode_for_reward(reward)}
        self.pad_id = self.vocab_size
        h = self.prompt_length
        self.observation_space = spaces.MultiDiscrete([self.vocab_size + 1] * (2 * h))
        self.action_space = spaces.Discrete(self.vocab_size)
        self._streams = CounterStreams(1)  # prompt draws (tpo_gym.rng)
        self._prompt: np.ndarray | None = None  # None until the first reset
        self._target = np.zeros(h, dtype=np.int64)
        self._tokens = np.zeros(h, dtype=np.int64)
        self._obs = np.full(2 * h, self.pad_id, dtype=np.int64)
        self._t = 0

    # -- read-only views for experiment code (never part of obs or info until the end) --
    @property
    def prompt(self) -> np.ndarray:
        """Copy of the current prompt ``int64 [H]``."""
        self._require_reset("prompt")
        return self._prompt.copy()

    @property
    def target_tokens(self) -> np.ndarray:
        """Copy of the current target sequence ``int64 [H]`` (never in obs or reset info)."""
        self._require_reset("target_tokens")
        return self._target.copy()

    @property
    def step_index(self) -> int:
        """``t``: the number of tokens written in this episode (``0..H``)."""
        return self._t

    def _require_reset(self, what: str) -> None:
        if self._prompt is None:
            raise TokenReversalResetNeeded(f"call reset() before {what}")

    def _require_live(self, what: str) -> None:
        self._require_reset(what)
        if self._t >= self.prompt_length:
            raise TokenReversalResetNeeded(
                f"the episode has terminated after {self.prompt_length} tokens; "
                f"call reset() before {what}"
            )

    # -- Gymnasium API --
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        options = check_reset_options(options, ["context"])  # validate before any state changes
        h, v = self.prompt_length, self.vocab_size
        context = options.get("context")
        if context is not None:
            context = _check_tokens(context, v, "options['context']", (h,))
        super().reset(seed=seed)
        self._streams.seed_single(self.np_random, seeded=seed is not None)
        prompt = self._streams.draw(v, h)[0] if context is None else context
        self._prompt = prompt
        self._target = _targets(prompt, self.target, v)
        self._tokens[:] = 0
        self._obs[:h] = prompt
        self._obs[h:] = self.pad_id
        self._t = 0
        return self._obs.copy(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self._require_live("step()")
        a = check_scalar_action(action, self.vocab_size)
        h, t = self.prompt_length, self._t
        self._tokens[t] = a
        self._obs[h + t] = a
        self._t = t + 1
        correct = self._tokens[: t + 1] == self._target[: t + 1]
        reward = float(_rewards_from_correct(correct, self.reward, h)[-1])
        info: dict[str, Any] = {"correct": bool(correct[-1])}
        terminated = self._t == h
        if terminated:
            info["target"] = self._target.copy()
            info["n_correct"] = int(correct.sum())
            info["exact_match"] = bool(correct.all())
        return self._obs.copy(), reward, terminated, False, info

    def score_candidates(self, actions: Any) -> np.ndarray:
        """Rewards ``float64 [K]`` the candidate tokens ``actions [K]`` would get now.

        ``bag``: ``c / H``; ``sequential``: ``alive * c / H`` (``alive``: every earlier token
        right). Changes no state.

        Raises:
            NoPerStateScoreError: with ``reward="terminal"`` (use sequence-level groups).
            TokenReversalResetNeeded: before ``reset()`` or after the episode ended.
            ValueError: invalid candidates (see ``tpo_gym.candidates.check_candidate_actions``).
        """
        if self.reward == "terminal":
            raise NoPerStateScoreError(_NO_SCORE_MSG)
        self._require_live("score_candidates()")
        cand = check_candidate_actions(actions, self.vocab_size, ())
        t = self._t
        k = cand.shape[0]
        prev = np.broadcast_to(self._tokens[:t] == self._target[:t], (k, t))
        correct = np.concatenate([prev, (cand == self._target[t])[:, None]], axis=1)
        return _rewards_from_correct(correct, self.reward, self.prompt_length)[:, -1]

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        name = f"TokenReversal({self.target}, {self.reward})"
        if self._prompt is None:
            return f"{name}: not reset"
        return f"{name}: " + _render_line(self._prompt, self._tokens, self._t, self.prompt_length)


_NO_SCORE_MSG = (
    "reward='terminal' has no per-state score: a token's reward depends on the tokens still "
    "to come, so score_candidates cannot score candidates state by state. Use sequence-level "
    "groups instead: K full rollouts per prompt (group_mode='sequence', or "
    "TokenReversalVectorEnv(group_size=K)), each scored by its return "
    "(tpo_gym.token_reversal.sequence_rewards)."
)


# --------------------------------------------------------------------------- vector env


class TokenReversalVectorEnv(StateSnapshot, gym.vector.VectorEnv):
    """Native vector version of :class:`TokenReversalEnv` (``gym.make_vec``).

    ## Description
    ``num_envs`` Token Reversal episodes stepped together with one numpy expression per step
    (validation, rewards, observations, prompt draws). Every episode lasts ``H`` steps, so all
    sub-envs end on the same step and start again together. With ``group_size=K`` each block of
    ``K`` consecutive sub-envs (``i // K``) shares one prompt, on every reset and autoreset:
    ``K`` rollouts per prompt for sequence-level groups.

    Seeding: ``reset(seed=s)`` seeds sub-env ``i`` with ``s + i`` (or ``seed=[s_0, ...]``).
    Prompts are counter-based draws from a per-sub-env key (see :mod:`tpo_gym.rng`), so with
    ``group_size=1`` sub-env ``i`` reproduces a single :class:`TokenReversalEnv` reset with
    ``seed=s+i`` and reset again after every episode, prompt for prompt (and the whole vector
    env equals ``SyncVectorEnv`` with ``AutoresetMode.SAME_STEP``). With ``group_size=K``,
    block ``b`` follows the prompt stream of its first sub-env ``b*K``.

    ## Action Space
    ``MultiDiscrete([V] * num_envs)``; ``single_action_space = Discrete(V)``.

    ## Observation Space
    ``MultiDiscrete`` of shape ``(num_envs, 2H)``, each row
    ``[x_1..x_H, a_1..a_t, PAD...]`` with ``PAD = pad_id = V``;
    ``single_observation_space = MultiDiscrete([V + 1] * 2H)``.

    ## Rewards
    float64 ``[num_envs]``, per sub-env as in :class:`TokenReversalEnv` (``bag``: ``c_t/H``,
    ``sequential``: ``prod_{j<=t} c_j / H``, ``terminal``: exact match at step ``H``).

    ## Starting State
    Prompts drawn uniformly (see Description); ``reset(options={"context": prompts})``
    replays prompts: int array ``[num_envs, H]``, ``[num_envs // group_size, H]`` (one per
    block) or ``[H]`` (every sub-env). No draw is consumed by a replay. Reset info is empty.

    ## Episode End
    Steps ``1..H-1``: ``terminated``/``truncated`` all False, ``info = {"correct": bool [n],
    "_correct": mask}``. Step ``H``: ``terminated`` all True and same-step autoreset
    (``metadata["autoreset_mode"] = AutoresetMode.SAME_STEP``): the returned ``obs`` holds the
    next prompts (no tokens written); ``info["final_obs"]`` (object array of int64 ``[2H]``
    rows, mask ``"_final_obs"``) the final observations and ``info["final_info"]`` (mask
    ``"_final_info"``) the last step's info ``{"correct": bool [n], "target": int64 [n, H],
    "n_correct": int64 [n], "exact_match": bool [n]}`` with a ``"_key"`` mask for each key,
    exactly as :class:`gymnasium.vector.SyncVectorEnv`.

    ## Candidate scoring
    ``score_candidates(actions [num_envs, K]) -> float64 [num_envs, K]``, no state change;
    raises :class:`NoPerStateScoreError` with ``reward="terminal"``.

    ## Arguments
    ```python
    gym.make_vec("TokenReversal-v0", num_envs=100, length=10, vocab_size=2,
                 target="reverse_copy", group_size=1, render_mode=None)
    TokenReversalVectorEnv(num_envs, length=10, vocab_size=2, target="reverse_copy",
                           reward="bag", group_size=1, render_mode=None)
    ```
    ``num_envs`` (int >= 1), ``group_size`` (int >= 1 dividing ``num_envs``) plus the
    arguments of :class:`TokenReversalEnv`.

    ## Version History
    * v0: Initial version.
    """

    metadata = {
        "render_modes": ["ansi"],
        "render_fps": 4,
        "autoreset_mode": AutoresetMode.SAME_STEP,
        GROUP_MODE_KEY: "per_state",
    }

    def __init__(
        self,
        num_envs: int = 1,
        length: int = 10,
        vocab_size: int = 2,
        target: str = "reverse_copy",
        reward: str = "bag",
        group_size: int = 1,
        render_mode: str | None = None,
    ) -> None:
        self.num_envs = check_int("num_envs", num_envs, 1)
        self.prompt_length = check_int("length", length, 1)
        self.vocab_size = check_int("vocab_size", vocab_size, 2)
        self.target = _check_choice("target", target, TARGETS)
        self.reward = _check_choice("reward", reward, REWARDS)
        self.group_size = check_int("group_size", group_size, 1)
        if self.num_envs % self.group_size:
            raise ValueError(
                f"num_envs must be a multiple of group_size (each block of group_size sub-envs "
                f"shares one prompt), got num_envs={self.num_envs}, group_size={self.group_size}"
            )
        self.num_groups = self.num_envs // self.group_size
        self.render_mode = check_render_mode(render_mode, self.metadata["render_modes"])
        self.metadata = {**type(self).metadata, GROUP_MODE_KEY: group_mode_for_reward(reward)}
        self.pad_id = self.vocab_size
        n, h = self.num_envs, self.prompt_length
        self.single_observation_space = spaces.MultiDiscrete([self.vocab_size + 1] * (2 * h))
        self.single_action_space = spaces.Discrete(self.vocab_size)
        self.observation_space = batch_space(self.single_observation_space, n)
        self.action_space = batch_space(self.single_action_space, n)
        self._streams = CounterStreams(n)  # prompt draws (tpo_gym.rng)
        self._prompts: np.ndarray | None = None  # int64 [n, H]; None until the first reset
        self._targets = np.zeros((n, h), dtype=np.int64)
        self._tokens = np.zeros((n, h), dtype=np.int64)
        self._obs = np.full((n, 2 * h), self.pad_id, dtype=np.int64)
        self._t = 0

    # -- read-only views for experiment code (never part of obs) --
    @property
    def prompts(self) -> np.ndarray:
        """Copy of the current prompts ``int64 [num_envs, H]``."""
        self._require_reset("prompts")
        return self._prompts.copy()

    @property
    def targets(self) -> np.ndarray:
        """Copy of the current target sequences ``int64 [num_envs, H]`` (never in obs)."""
        self._require_reset("targets")
        return self._targets.copy()

    @property
    def step_index(self) -> int:
        """``t``: tokens written so far in the current episodes (the same in every sub-env)."""
        return self._t

    def _require_reset(self, what: str) -> None:
        if self._prompts is None:
            raise TokenReversalResetNeeded(f"call reset() before {what}")

    # -- seeding and prompts --
    @property
    def _keys(self) -> np.ndarray | None:
        """The per-sub-env uint64 stream keys (``None`` before the first reset)."""
        return self._streams.keys

    def _seed(self, seed: int | list[int | None] | None) -> None:
        """Sub-env ``i`` gets the key a single env seeded with ``seeds[i]`` would take."""
        seeds, root = check_vector_seed(seed, self.num_envs)
        if root is not None:
            super().reset(seed=root)
        self._streams.seed_each(seeds, self.np_random)

    def _draw(self) -> np.ndarray:
        """Next prompts ``[n, H]``: one draw per block (from its first sub-env's stream)."""
        k = self.group_size
        prompts = self._streams.draw(self.vocab_size, self.prompt_length, every=k)
        return np.repeat(prompts, k, axis=0) if k > 1 else prompts

    def _check_context(self, context: Any) -> np.ndarray:
        n, h, k = self.num_envs, self.prompt_length, self.group_size
        arr = np.asarray(context)
        shapes = [(n, h), (self.num_groups, h), (h,)]
        if arr.shape not in shapes:
            raise ValueError(
                f"options['context'] must have shape ({n}, {h}) (one prompt per sub-env), "
                f"({self.num_groups}, {h}) (one per block of group_size={k}) or ({h},) "
                f"(every sub-env), got shape {arr.shape}"
            )
        prompts = _check_tokens(arr, self.vocab_size, "options['context']")
        if prompts.ndim == 1:
            return np.tile(prompts, (n, 1))
        if prompts.shape[0] == n:
            blocks = prompts.reshape(self.num_groups, k, h)
            same = (blocks == blocks[:, :1]).all(axis=(1, 2))
            if not same.all():
                b = int(np.flatnonzero(~same)[0])
                raise ValueError(
                    f"options['context'] rows {b * k}..{b * k + k - 1} (block {b}) must be one "
                    f"prompt: each block of group_size={k} sub-envs shares its prompt"
                )
            return prompts
        return np.repeat(prompts, k, axis=0)

    def _start(self, prompts: np.ndarray) -> None:
        h = self.prompt_length
        self._prompts = prompts
        self._targets = _targets(prompts, self.target, self.vocab_size)
        self._tokens[:] = 0
        self._obs[:, :h] = prompts
        self._obs[:, h:] = self.pad_id
        self._t = 0

    # -- Gymnasium API --
    def reset(
        self,
        *,
        seed: int | list[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Reset every sub-env (new prompts, no tokens written).

        ``seed``: int ``s`` seeds sub-env ``i`` with ``s + i``; a list gives one seed per
        sub-env; ``None`` keeps the streams (fresh entropy on the very first reset).
        ``options={"context": prompts}`` replays prompts (shape ``[num_envs, H]``,
        ``[num_envs // group_size, H]`` or ``[H]``); no draw is consumed then.
        """
        options = check_reset_options(options, ["context"])  # validate before any state changes
        context = options.get("context")
        if context is not None:
            context = self._check_context(context)
        self._seed(seed)
        prompts = self._draw() if context is None else context
        self._start(prompts)
        return self._obs.copy(), {}

    def step(
        self, actions: Any
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Write one token in every sub-env; at step ``H`` every episode ends and restarts."""
        self._require_reset("step()")
        acts = check_action_batch(actions, self.vocab_size, self.num_envs)
        n, h, t = self.num_envs, self.prompt_length, self._t
        self._tokens[:, t] = acts
        self._obs[:, h + t] = acts
        self._t = t + 1
        correct = self._tokens[:, : t + 1] == self._targets[:, : t + 1]
        rewards = _rewards_from_correct(correct, self.reward, h)[:, -1]
        everyone = np.ones(n, dtype=np.bool_)
        nobody = np.zeros(n, dtype=np.bool_)
        c_t = correct[:, -1].copy()
        if self._t < h:
            info = {"correct": c_t, "_correct": everyone}
            return self._obs.copy(), rewards, nobody, nobody.copy(), info
        final_obs = np.empty(n, dtype=object)
        final_obs[:] = list(self._obs.copy())  # int64 [2H] rows, like the single env's obs
        n_correct = correct.sum(axis=1).astype(np.int64)
        final_info = {
            "correct": c_t,
            "_correct": everyone.copy(),
            "target": self._targets.copy(),
            "_target": everyone.copy(),
            "n_correct": n_correct,
            "_n_correct": everyone.copy(),
            "exact_match": n_correct == h,
            "_exact_match": everyone.copy(),
        }
        info = {
            "final_obs": final_obs,
            "_final_obs": everyone.copy(),
            "final_info": final_info,
            "_final_info": everyone.copy(),
        }
        self._start(self._draw())  # same-step autoreset
        return self._obs.copy(), rewards, everyone, nobody, info

    def score_candidates(self, actions: Any) -> np.ndarray:
        """Rewards ``float64 [num_envs, K]`` of candidate tokens ``[num_envs, K]`` now.

        Row ``i`` scores the candidates as sub-env ``i``'s next token (``bag``: ``c / H``;
        ``sequential``: ``alive * c / H``). Vectorized; changes no state.

        Raises:
            NoPerStateScoreError: with ``reward="terminal"`` (use sequence-level groups).
            TokenReversalResetNeeded: before ``reset()``.
            ValueError: invalid candidates.
        """
        if self.reward == "terminal":
            raise NoPerStateScoreError(_NO_SCORE_MSG)
        self._require_reset("score_candidates()")
        cand = check_candidate_actions(actions, self.vocab_size, (self.num_envs,))
        n, t = self.num_envs, self._t
        k = cand.shape[1]
        prev = self._tokens[:, :t] == self._targets[:, :t]
        correct = np.concatenate(
            [
                np.broadcast_to(prev[:, None, :], (n, k, t)),
                (cand == self._targets[:, t][:, None])[:, :, None],
            ],
            axis=2,
        )
        return _rewards_from_correct(correct, self.reward, self.prompt_length)[:, :, -1]

    def render(self) -> tuple[str, ...] | None:
        if self.render_mode != "ansi":
            return None
        name = f"TokenReversal({self.target}, {self.reward})"
        if self._prompts is None:
            return tuple(f"{name}: not reset" for _ in range(self.num_envs))
        return tuple(
            f"{name}: " + _render_line(p, a, self._t, self.prompt_length)
            for p, a in zip(self._prompts, self._tokens)
        )
