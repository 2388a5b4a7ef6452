"""One-step bandit environments of the TPO paper: SymmetricBandit and MultiContextBandit.

Both are contextual bandits with one correct action per context and reward
``1{action == correct action of the context}``; every episode lasts exactly one step.
Each comes as a single :class:`gymnasium.Env` and as a native :class:`gymnasium.vector.VectorEnv`
(``gym.make_vec(id, num_envs=n)``) that steps all sub-environments with one numpy call.
All four implement the candidate-scoring protocol (:mod:`tpo_gym.candidates`).

This module imports numpy and gymnasium only (never torch).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from tpo_gym.candidates import check_candidate_actions
from tpo_gym.snapshot import StateSnapshot
from tpo_gym.validation import (
    check_action_batch,
    check_index_option,
    check_int,
    check_render_mode,
    check_reset_options,
    check_scalar_action,
    check_vector_seed,
    show,
)

__all__ = [
    "BanditResetNeeded",
    "MultiContextBanditEnv",
    "MultiContextBanditVectorEnv",
    "SymmetricBanditEnv",
    "SymmetricBanditVectorEnv",
]


class BanditResetNeeded(gym.error.ResetNeeded, ValueError):
    """``step``/``score_candidates`` called before ``reset()`` or after the episode ended.

    Subclasses both :class:`gymnasium.error.ResetNeeded` and :class:`ValueError`.
    """


# --------------------------------------------------------------------------- tasks


def _draw_correct_actions(
    correct_actions: Any, n_contexts: int, n_actions: int, task_seed: Any
) -> np.ndarray:
    """The fixed task: one correct action per context (read-only int64 array)."""
    if correct_actions is None:
        seed = check_int("task_seed", task_seed, 0)
        table = np.random.default_rng(seed).integers(0, n_actions, size=n_contexts)
    else:
        table = np.asarray(correct_actions)
        if table.shape != (n_contexts,):
            raise ValueError(
                f"correct_actions must have shape ({n_contexts},) (one per context), "
                f"got shape {table.shape}"
            )
        if table.dtype == object or not np.issubdtype(table.dtype, np.integer):
            raise ValueError(f"correct_actions must be integers, got dtype {table.dtype}")
        bad = (table < 0) | (table >= n_actions)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(
                f"correct_actions[{i}] = {show(table[i])} is out of range; "
                f"valid actions are integers in [0, {n_actions - 1}]"
            )
    table = np.array(table, dtype=np.int64)
    table.setflags(write=False)
    return table


def _symmetric_task(
    n_actions: Any, correct_action: Any, task_seed: Any
) -> tuple[int, int, np.ndarray]:
    """``(n_contexts=1, n_actions, correct table [1])`` of a SymmetricBandit (single or vector)."""
    n_actions = check_int("n_actions", n_actions, 2)
    table = _draw_correct_actions(
        None if correct_action is None else [correct_action], 1, n_actions, task_seed
    )
    return 1, n_actions, table


def _multi_context_task(
    n_contexts: Any, n_actions: Any, correct_actions: Any, task_seed: Any
) -> tuple[int, int, np.ndarray]:
    """``(n_contexts, n_actions, correct table [n_contexts])`` of a MultiContextBandit."""
    n_contexts = check_int("n_contexts", n_contexts, 1)
    n_actions = check_int("n_actions", n_actions, 2)
    table = _draw_correct_actions(correct_actions, n_contexts, n_actions, task_seed)
    return n_contexts, n_actions, table


# --------------------------------------------------------------------------- single envs


class _BanditEnv(gym.Env[np.int64, np.int64]):
    """Shared implementation: a table of correct actions indexed by the current context."""

    metadata = {"render_modes": ["ansi", "rgb_array"], "render_fps": 1, "tpo_group_mode": "all_actions"}
    _name = "Bandit"

    def __init__(
        self, n_contexts: int, n_actions: int, correct_table: np.ndarray, render_mode: str | None
    ) -> None:
        self.n_contexts = n_contexts
        self.n_actions = n_actions
        self._correct_actions = correct_table
        self.render_mode = check_render_mode(render_mode, self.metadata["render_modes"])
        self.observation_space = spaces.Discrete(n_contexts)
        self.action_space = spaces.Discrete(n_actions)
        self._context: int | None = None  # None until the first reset
        self._done = False
        self._last: tuple[int, float] | None = None  # (action, reward) of the last step

    # -- read-only views for experiment code (never part of obs or info) --
    @property
    def correct_actions(self) -> np.ndarray:
        """Read-only int64 array ``[n_contexts]``: the correct action of every context."""
        return self._correct_actions

    @property
    def context(self) -> int:
        """The current context (the last observation)."""
        self._require_reset("context")
        return int(self._context)

    def _draw_context(self) -> int:
        raise NotImplementedError

    def _require_reset(self, what: str) -> None:
        if self._context is None:
            raise BanditResetNeeded(f"call reset() before {what}")

    def _require_live(self, what: str) -> None:
        self._require_reset(what)
        if self._done:
            raise BanditResetNeeded(
                f"the episode has terminated (every episode is one step); call reset() before {what}"
            )

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.int64, dict[str, Any]]:
        super().reset(seed=seed)
        options = check_reset_options(options, ["context"])
        if options.get("context") is not None:
            self._context = check_scalar_action(options["context"], self.n_contexts, "context")
        else:
            self._context = self._draw_context()
        self._done = False
        self._last = None
        return np.int64(self._context), {}

    def step(self, action: Any) -> tuple[np.int64, float, bool, bool, dict[str, Any]]:
        self._require_live("step()")
        a = check_scalar_action(action, self.n_actions)
        correct = a == int(self._correct_actions[self._context])
        reward = 1.0 if correct else 0.0
        self._done = True
        self._last = (a, reward)
        return np.int64(self._context), reward, True, False, {"correct": bool(correct)}

    def score_candidates(self, actions: Any) -> np.ndarray:
        """Rewards ``[K]`` (float64) of candidate actions ``[K]`` in the current context.

        Changes no state. Raises :class:`BanditResetNeeded` before ``reset()`` or after the
        episode's step, ``ValueError`` for invalid candidates.
        """
        self._require_live("score_candidates()")
        acts = check_candidate_actions(actions, self.n_actions, ())
        return (acts == self._correct_actions[self._context]).astype(np.float64)

    def render(self) -> str | np.ndarray | None:
        if self.render_mode == "rgb_array":
            return self._render_rgb()
        if self.render_mode != "ansi":
            return None
        if self._context is None:
            return f"{self._name}: not reset"
        last = (
            "no action yet"
            if self._last is None
            else f"action {self._last[0]} -> reward {self._last[1]}"
        )
        return f"{self._name}: context {self._context}, {last}"


    def _render_rgb(self) -> np.ndarray:
        """A strip of one cell per action; the last action is green if right, red if wrong."""
        cell = 8
        img = np.full((cell, cell * self.n_actions, 3), 230, dtype=np.uint8)
        img[:, ::cell] = 120  # cell borders
        if self._last is not None:
            action, reward = self._last
            img[1:, action * cell + 1 : (action + 1) * cell] = (40, 170, 60) if reward > 0 else (200, 50, 50)
        return img


class SymmetricBanditEnv(_BanditEnv):
    """SymmetricBandit: one context, ``n_actions`` actions, exactly one of them correct.

    ## Description
    The single-context bandit of the TPO paper. A fixed correct action ``y*`` is hidden among
    ``n_actions`` symmetric actions; every episode is one step. Nothing about ``y*`` is ever
    observable except through rewards.

    ## Action Space
    ``Discrete(n_actions)``: the action to take (integers ``0..n_actions-1``).

    ## Observation Space
    ``Discrete(1)``: the single context, always ``0`` (a ``np.int64``).

    ## Rewards
    ``1.0`` if the action equals ``y*`` else ``0.0``. ``info["correct"]`` (bool) repeats it.

    ## Starting State
    The context ``0``. ``y*`` is fixed per instance: ``correct_action`` if given, else drawn
    from ``np.random.default_rng(task_seed)``; ``reset(seed=...)`` only seeds ``np_random``
    (which this environment never draws from), it never changes the task.

    ## Episode End
    Every step terminates the episode (``terminated=True``, ``truncated=False``). Stepping
    again without ``reset()`` raises :class:`BanditResetNeeded` (a ``ValueError``).

    ## Candidate scoring
    ``score_candidates(actions)`` maps int actions ``[K]`` to float64 rewards ``[K]`` without
    changing any state.

    ## Arguments
    ```python
    gym.make("SymmetricBandit-v0", n_actions=100, correct_action=None, task_seed=0,
             render_mode=None)
    gym.make_vec("SymmetricBandit-v0", num_envs=8)  # SymmetricBanditVectorEnv
    ```
    * ``n_actions`` (int >= 2): number of actions.
    * ``correct_action`` (int or None): the correct action; ``None`` draws it from ``task_seed``.
    * ``task_seed`` (int >= 0): seed of the task draw (ignored when ``correct_action`` is given).
    * ``render_mode``: ``None``, ``"ansi"`` (a text line) or ``"rgb_array"`` (one cell per
      action; the last action green if right, red if wrong).

    ## Version History
    * v0: Initial version.
    """

    _name = "SymmetricBandit"

    def __init__(
        self,
        n_actions: int = 100,
        correct_action: int | None = None,
        task_seed: int = 0,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(*_symmetric_task(n_actions, correct_action, task_seed), render_mode)

    @property
    def correct_action(self) -> int:
        """The hidden correct action ``y*`` (for experiment code; never in obs or info)."""
        return int(self._correct_actions[0])

    def _draw_context(self) -> int:
        return 0


class MultiContextBanditEnv(_BanditEnv):
    """MultiContextBandit: ``n_contexts`` contexts, each with one correct action of ``n_actions``.

    ## Description
    The multi-context bandit of the TPO paper. Each episode shows one context (drawn uniformly)
    and lasts one step; the agent must pick that context's hidden correct action.

    ## Action Space
    ``Discrete(n_actions)``: the action to take (integers ``0..n_actions-1``).

    ## Observation Space
    ``Discrete(n_contexts)``: the index of the current context (a ``np.int64``).

    ## Rewards
    ``1.0`` if the action equals ``correct_actions[context]`` else ``0.0``;
    ``info["correct"]`` (bool) repeats it.

    ## Starting State
    ``reset()`` draws the context uniformly with ``np_random``;
    ``reset(options={"context": c})`` replays context ``c`` instead (no random draw).
    The task (``correct_actions``) is fixed per instance: the given array, else drawn from
    ``np.random.default_rng(task_seed)``; ``reset(seed=...)`` never changes it.

    ## Episode End
    Every step terminates the episode (``terminated=True``, ``truncated=False``); the
    returned observation is the context just played. Stepping again without ``reset()``
    raises :class:`BanditResetNeeded` (a ``ValueError``).

    ## Candidate scoring
    ``score_candidates(actions)`` maps int actions ``[K]`` to float64 rewards ``[K]`` in the
    current context without changing any state.

    ## Arguments
    ```python
    gym.make("MultiContextBandit-v0", n_contexts=100, n_actions=10, correct_actions=None,
             task_seed=0, render_mode=None)
    gym.make_vec("MultiContextBandit-v0", num_envs=8)  # MultiContextBanditVectorEnv
    ```
    * ``n_contexts`` (int >= 1): number of contexts.
    * ``n_actions`` (int >= 2): number of actions.
    * ``correct_actions`` (int array ``[n_contexts]`` or None): the task; ``None`` draws it.
    * ``task_seed`` (int >= 0): seed of the task draw (ignored when ``correct_actions`` given).
    * ``render_mode``: ``None``, ``"ansi"`` (a text line) or ``"rgb_array"`` (one cell per
      action; the last action green if right, red if wrong).

    ## Version History
    * v0: Initial version.
    """

    _name = "MultiContextBandit"

    def __init__(
        self,
        n_contexts: int = 100,
        n_actions: int = 10,
        correct_actions: Any = None,
        task_seed: int = 0,
        render_mode: str | None = None,
    ) -> None:
        task = _multi_context_task(n_contexts, n_actions, correct_actions, task_seed)
        super().__init__(*task, render_mode)

    @property
    def correct_action(self) -> int:
        """The correct action of the current context (for experiment code; never in obs/info)."""
        self._require_reset("correct_action")
        return int(self._correct_actions[self._context])

    def _draw_context(self) -> int:
        # The vector env replays exactly this call on each sub-env's generator.
        return int(self.np_random.integers(self.n_contexts))


# --------------------------------------------------------------------------- vector envs


class _BanditVectorEnv(StateSnapshot, gym.vector.VectorEnv):
    """Shared native vector implementation (autoreset mode SAME_STEP).

    State: one context per sub-env (int64 array) and one ``np.random.Generator`` per sub-env,
    seeded like the single envs, so sub-env ``i`` after ``reset(seed=s)`` reproduces a single
    env reset with ``seed=s+i`` step for step.
    """

    metadata = {
        "render_modes": ["ansi"],
        "render_fps": 1,
        "autoreset_mode": AutoresetMode.SAME_STEP,
        "tpo_group_mode": "all_actions",
    }
    _name = "Bandit"

    def __init__(
        self,
        num_envs: int,
        n_contexts: int,
        n_actions: int,
        correct_table: np.ndarray,
        render_mode: str | None,
    ) -> None:
        self.num_envs = check_int("num_envs", num_envs, 1)
        self.n_contexts = n_contexts
        self.n_actions = n_actions
        self._correct_actions = correct_table
        self.render_mode = check_render_mode(render_mode, self.metadata["render_modes"])
        self.single_observation_space = spaces.Discrete(n_contexts)
        self.single_action_space = spaces.Discrete(n_actions)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self._contexts: np.ndarray | None = None  # None until the first reset
        self._rngs: list[np.random.Generator] | None = None
        self._last: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def correct_actions(self) -> np.ndarray:
        """Read-only int64 array ``[n_contexts]``: the correct action of every context."""
        return self._correct_actions

    @property
    def contexts(self) -> np.ndarray:
        """Copy of the current contexts ``[num_envs]`` (equal to the last observation)."""
        self._require_reset("contexts")
        return self._contexts.copy()

    @property
    def np_randoms(self) -> tuple[np.random.Generator, ...]:
        """The per-sub-env generators (sub-env ``i`` seeded with ``seed + i``)."""
        self._require_reset("np_randoms")
        return tuple(self._rngs)

    def _require_reset(self, what: str) -> None:
        if self._contexts is None:
            raise BanditResetNeeded(f"call reset() before {what}")

    def _draw_contexts(self) -> np.ndarray:
        raise NotImplementedError

    def _seed(self, seed: int | list[int | None] | None) -> None:
        seeds, root = check_vector_seed(seed, self.num_envs)
        if root is not None:
            super().reset(seed=root)
        old = self._rngs
        self._rngs = [
            seeding.np_random(s)[0] if s is not None or old is None else old[i]
            for i, s in enumerate(seeds)
        ]

    def reset(
        self,
        *,
        seed: int | list[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Reset every sub-env.

        ``seed``: int ``s`` seeds sub-env ``i`` with ``s + i``; a list gives one seed per
        sub-env; ``None`` keeps the generators (fresh entropy on the very first reset).
        ``options={"context": c}`` replays contexts: ``c`` is an int (all sub-envs) or an int
        array ``[num_envs]``; no random draw happens then.
        """
        self._seed(seed)
        options = check_reset_options(options, ["context"])
        if options.get("context") is not None:
            self._contexts = check_index_option(
                options["context"], self.n_contexts, self.num_envs, "context", "context"
            )
        else:
            self._contexts = self._draw_contexts()
        self._last = None
        return self._contexts.copy(), {}

    def step(
        self, actions: Any
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every sub-env once; all episodes end and the next contexts are drawn at once.

        Same-step autoreset: the returned ``obs`` holds the *next* contexts; the contexts just
        played are in ``info["final_obs"]`` (object array of ``np.int64``, mask
        ``info["_final_obs"]``) and the per-step info in ``info["final_info"]``
        (``{"correct": bool [num_envs], "_correct": mask}``, mask ``info["_final_info"]``),
        exactly as :class:`gymnasium.vector.SyncVectorEnv` with ``AutoresetMode.SAME_STEP``.
        """
        self._require_reset("step()")
        acts = check_action_batch(actions, self.n_actions, self.num_envs)
        played = self._contexts
        correct = acts == self._correct_actions[played]
        rewards = correct.astype(np.float64)
        final_obs = np.empty(self.num_envs, dtype=object)
        final_obs[:] = list(played)  # np.int64 elements, like the single env's obs
        everyone = np.ones(self.num_envs, dtype=np.bool_)
        infos = {
            "final_obs": final_obs,
            "_final_obs": everyone.copy(),
            "final_info": {"correct": correct, "_correct": everyone.copy()},
            "_final_info": everyone.copy(),
        }
        self._contexts = self._draw_contexts()
        self._last = (acts, rewards.copy())
        return (
            self._contexts.copy(),
            rewards,
            everyone.copy(),
            np.zeros(self.num_envs, dtype=np.bool_),
            infos,
        )

    def score_candidates(self, actions: Any) -> np.ndarray:
        """Rewards ``[num_envs, K]`` (float64) of candidates ``[num_envs, K]`` in the current contexts.

        Vectorized; changes no state. Raises :class:`BanditResetNeeded` before ``reset()``.
        """
        self._require_reset("score_candidates()")
        acts = check_candidate_actions(actions, self.n_actions, (self.num_envs,))
        return (acts == self._correct_actions[self._contexts][:, None]).astype(np.float64)

    def render(self) -> tuple[str, ...] | None:
        if self.render_mode != "ansi":
            return None
        if self._contexts is None:
            return tuple(f"{self._name}: not reset" for _ in range(self.num_envs))
        if self._last is None:
            return tuple(f"{self._name}: context {c}, no action yet" for c in self._contexts)
        acts, rews = self._last
        return tuple(
            f"{self._name}: next context {c}, last action {a} -> reward {r}"
            for c, a, r in zip(self._contexts, acts, rews)
        )


class SymmetricBanditVectorEnv(_BanditVectorEnv):
    """Native vector version of :class:`SymmetricBanditEnv` (``gym.make_vec``).

    ## Description
    ``num_envs`` copies of the same SymmetricBandit task (one shared correct action), stepped
    with one numpy call. Sub-env ``i`` after ``reset(seed=s)`` equals a single
    ``SymmetricBanditEnv`` reset with ``seed=s+i``.

    ## Action Space
    ``MultiDiscrete([n_actions] * num_envs)``; ``single_action_space = Discrete(n_actions)``.

    ## Observation Space
    ``MultiDiscrete([1] * num_envs)`` (all zeros); ``single_observation_space = Discrete(1)``.

    ## Rewards
    float64 ``[num_envs]``: ``1.0`` where the action is the correct action, else ``0.0``.

    ## Starting State
    All contexts ``0``. The task is fixed per instance (``correct_action`` or ``task_seed``).

    ## Episode End
    Every step ends every episode (``terminated`` all True, ``truncated`` all False) with
    same-step autoreset (``metadata["autoreset_mode"] = AutoresetMode.SAME_STEP``):
    ``info["final_obs"]``/``"_final_obs"`` and ``info["final_info"]``/``"_final_info"``
    (``final_info["correct"]``) follow :class:`gymnasium.vector.SyncVectorEnv`.

    ## Candidate scoring
    ``score_candidates(actions [num_envs, K]) -> float64 [num_envs, K]``, no state change.

    ## Arguments
    ```python
    gym.make_vec("SymmetricBandit-v0", num_envs=8, n_actions=100, correct_action=None,
                 task_seed=0, render_mode=None)
    ```
    ``num_envs`` (int >= 1) plus the arguments of :class:`SymmetricBanditEnv`.

    ## Version History
    * v0: Initial version.
    """

    _name = "SymmetricBandit"

    def __init__(
        self,
        num_envs: int = 1,
        n_actions: int = 100,
        correct_action: int | None = None,
        task_seed: int = 0,
        render_mode: str | None = None,
    ) -> None:
        task = _symmetric_task(n_actions, correct_action, task_seed)
        super().__init__(num_envs, *task, render_mode)

    @property
    def correct_action(self) -> int:
        """The hidden correct action ``y*`` shared by every sub-env."""
        return int(self._correct_actions[0])

    def _draw_contexts(self) -> np.ndarray:
        return np.zeros(self.num_envs, dtype=np.int64)


class MultiContextBanditVectorEnv(_BanditVectorEnv):
    """Native vector version of :class:`MultiContextBanditEnv` (``gym.make_vec``).

    ## Description
    ``num_envs`` copies of the same MultiContextBandit task, stepped with one numpy call
    (validation, rewards, candidate scoring). Sub-env ``i`` after ``reset(seed=s)`` equals a
    single ``MultiContextBanditEnv`` reset with ``seed=s+i``, step for step.

    Design choice (RNG): to keep that equality, each sub-env owns its own
    ``np.random.Generator`` and the next contexts are drawn with one
    ``generator.integers(n_contexts)`` call per sub-env, the very call the single env makes.
    This is the only per-sub-env Python loop (about a microsecond per sub-env); numpy has no
    batched draw across independent generators, and a block draw (``integers(n, size=m)``)
    consumes the bit stream differently from ``m`` scalar draws.

    ## Action Space
    ``MultiDiscrete([n_actions] * num_envs)``; ``single_action_space = Discrete(n_actions)``.

    ## Observation Space
    ``MultiDiscrete([n_contexts] * num_envs)``: the current context of every sub-env;
    ``single_observation_space = Discrete(n_contexts)``.

    ## Rewards
    float64 ``[num_envs]``: ``1.0`` where ``action == correct_actions[context]``, else ``0.0``.

    ## Starting State
    Contexts drawn uniformly, one generator per sub-env; ``reset(options={"context": c})``
    replays contexts (``c`` an int or an int array ``[num_envs]``).

    ## Episode End
    Every step ends every episode (``terminated`` all True, ``truncated`` all False) with
    same-step autoreset (``metadata["autoreset_mode"] = AutoresetMode.SAME_STEP``): the
    returned observation holds the next contexts, ``info["final_obs"]`` the ones just played
    (mask ``"_final_obs"``), ``info["final_info"]["correct"]`` the per-step info (mask
    ``"_final_info"``), as in :class:`gymnasium.vector.SyncVectorEnv`.

    ## Candidate scoring
    ``score_candidates(actions [num_envs, K]) -> float64 [num_envs, K]``, no state change.

    ## Arguments
    ```python
    gym.make_vec("MultiContextBandit-v0", num_envs=8, n_contexts=100, n_actions=10,
                 correct_actions=None, task_seed=0, render_mode=None)
    ```
    ``num_envs`` (int >= 1) plus the arguments of :class:`MultiContextBanditEnv`.

    ## Version History
    * v0: Initial version.
    """

    _name = "MultiContextBandit"

    def __init__(
        self,
        num_envs: int = 1,
        n_contexts: int = 100,
        n_actions: int = 10,
        correct_actions: Any = None,
        task_seed: int = 0,
        render_mode: str | None = None,
    ) -> None:
        task = _multi_context_task(n_contexts, n_actions, correct_actions, task_seed)
        super().__init__(num_envs, *task, render_mode)

    def _draw_contexts(self) -> np.ndarray:
        n = self.n_contexts
        return np.fromiter((g.integers(n) for g in self._rngs), dtype=np.int64, count=self.num_envs)
