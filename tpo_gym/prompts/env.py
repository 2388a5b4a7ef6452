"""One-step text environments over a task source (LLM RLVR prompts).

:class:`PromptEnv` turns any :class:`~tpo_gym.prompts.tasks.TaskSource` into a Gymnasium
environment: ``reset`` draws a prompt, ``step(completion)`` scores a completion with the
source's verifier and ends the episode. The thin subclasses :class:`ReasoningGymEnv`,
:class:`GSM8KEnv`, :class:`PromptListEnv` and :class:`TinyArithmeticEnv` build the source from
keyword arguments, for the registered ids. Never imports torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from tpo_gym.candidates import GROUP_MODE_KEY
from tpo_gym.prompts.extraction import AnswerFormat, check_answer_format, extract_answer
from tpo_gym.prompts.gsm8k import GSM8KTask
from tpo_gym.prompts.reasoning import ReasoningGymTask
from tpo_gym.prompts.tasks import (
    ArithmeticTask,
    PromptListTask,
    StringReversalTask,
    TaskSource,
    TinyArithmeticTask,
)
from tpo_gym.validation import (
    check_int,
    check_render_mode,
    check_reset_options,
    check_scalar_action,
)

__all__ = [
    "ArithmeticEnv",
    "BASE_CHARSET",
    "GSM8KEnv",
    "PromptEnv",
    "PromptEnvResetNeeded",
    "PromptListEnv",
    "ReasoningGymEnv",
    "StringReversalEnv",
    "TinyArithmeticEnv",
]

BASE_CHARSET = "".join(chr(c) for c in range(32, 127)) + "\n\t"
"""Printable ASCII plus newline and tab: part of every prompt env's declared charset."""


class PromptEnvResetNeeded(gym.error.ResetNeeded, ValueError):
    """``step``/``score_candidates`` before ``reset()`` or after the episode ended.

    Subclasses both :class:`gymnasium.error.ResetNeeded` and :class:`ValueError`.
    """


class PromptEnv(gym.Env[str, str]):
    """A one-step text environment: read a prompt, write a completion, get the verifier's score.

    ## Description
    Each episode is one problem of a task source (:class:`~tpo_gym.prompts.tasks.TaskSource`):
    Reasoning Gym, GSM8K, a user list of ``(prompt, verifier)`` pairs or tiny arithmetic.
    The observation is the prompt; the action is the model's whole completion; the reward is
    the verifier's score of the answer extracted from the completion (``answer_format``,
    see :func:`~tpo_gym.prompts.extraction.extract_answer`). This is the setting of the
    paper's LLM RLVR runs (sequence-level groups: K completions per prompt).

    **What the policy feeds the model.** The observation text is the full *user message*:
    the problem (trailing whitespace stripped) followed by ``instruction`` (by default the source's, e.g. asking Reasoning
    Gym and GSM8K answers inside ``<answer></answer>`` tags; ``instruction=""`` gives the raw
    problem). A policy with a chat template applies it to ``[{"role": "user", "content":
    obs}]``, preceded by a system message if it was given ``env.unwrapped.system_prompt``
    (``None`` unless set with ``system_prompt=``); ``env.unwrapped.chat_prompt`` is that list
    of messages for the current prompt. A policy without a chat template feeds ``obs`` as is.

    ## Action Space
    ``Text(max_length=max_completion_length, min_length=0, charset=charset)``: the completion.
    ``charset`` (``env.unwrapped.charset``) is printable ASCII, newline and tab
    (:data:`BASE_CHARSET`) plus every character found in the source's prompts (e.g. ``£``
    in ``gsm_symbolic``). ``step`` accepts any ``str`` of at most ``max_length`` characters,
    also with characters outside the charset (a model may write any Unicode; they are scored
    as written). ``max_length`` counts characters, not tokens.

    ## Observation Space
    ``Text(max_length=max_prompt_length, min_length=0, charset=charset)``: the prompt text
    (the same string after ``step``). ``max_prompt_length`` defaults to the longest prompt.

    ## Rewards
    The verifier's score in ``[0, 1]`` (``1.0`` = correct; Reasoning Gym may give partial
    credit). A completion with no extractable answer (no tags, no number, ...) scores 0.

    ## Starting State
    ``reset()`` draws a problem index uniformly from ``np_random`` (``reset(seed=s)`` is
    reproducible). ``reset(options={"context": i})`` replays problem ``i`` (int in
    ``[0, len(source))``; no draw is consumed). Reset info: ``"task"`` (the source's name),
    ``"index"`` (int), ``"answer"`` (the reference answer as text, ``""`` if the task has
    none) and ``"metadata"`` (the task's metadata dict, a copy).

    ## Episode End
    Every episode is one step: ``step`` returns ``terminated=True``, ``truncated=False``
    and info with ``"extracted_answer"`` (str or ``None``), ``"correct"`` (bool,
    ``reward == 1``), ``"index"`` and ``"answer"``. ``step``/``score_candidates`` before
    ``reset()`` or after the step raise :class:`PromptEnvResetNeeded` (a ``ValueError``).
    A completion that is not a str or is longer than ``max_completion_length`` raises
    ``ValueError``.

    ## Candidate scoring
    ``score_candidates(completions)`` -> float64 ``[K]``: the reward of each of the K
    completions for the current prompt, exactly as ``step`` would give it, with no state
    change. ``metadata["tpo_group_mode"] = "sequence"``: groups are K completions per prompt.

    ## Arguments
    ```python
    PromptEnv(source, answer_format=None, instruction=None, system_prompt=None,
              max_prompt_length=None, max_completion_length=4096, render_mode=None)
    gym.make("ReasoningGym-v0", task="graph_color", size=500, seed=0, config=None)
    gym.make("ReasoningGym-knights_knaves-v0")
    gym.make("GSM8K-v0", path="gsm8k_train.jsonl")
    gym.make("PromptList-v0", pairs=[("2+2=", "4"), ("Name a prime.", is_prime)])
    gym.make("TinyArithmetic-v0")
    gym.make("StringReversal-v0", length=7)
    ```
    * ``source``: a :class:`~tpo_gym.prompts.tasks.TaskSource`.
    * ``answer_format``: how answers are extracted (default: the source's
      ``default_answer_format``): ``"tags"``, ``"hashes"``, ``"boxed"``, ``"last_number"``,
      ``"first_char"``, ``"identity"``, ``"auto"`` or a sequence of them.
    * ``instruction``: text appended to every prompt (default: the source's
      ``default_instruction``).
    * ``system_prompt``: an optional system message for chat models (default ``None``).
    * ``max_prompt_length``: the observation space's ``max_length`` (default: the longest
      prompt; a smaller value raises ``ValueError``).
    * ``max_completion_length``: the action space's ``max_length`` in characters (int >= 1).
    * ``render_mode``: ``None`` only.

    ## Version History
    * v0: Initial version.
    """

    metadata = {"render_modes": [], GROUP_MODE_KEY: "sequence"}

    def __init__(
        self,
        source: TaskSource,
        answer_format: AnswerFormat | None = None,
        instruction: str | None = None,
        system_prompt: str | None = None,
        max_prompt_length: int | None = None,
        max_completion_length: int = 4096,
        render_mode: str | None = None,
    ) -> None:
        if not isinstance(source, TaskSource):
            raise ValueError(
                f"source must be a tpo_gym.prompts.TaskSource, got {type(source).__name__}"
            )
        if len(source) < 1:
            raise ValueError(f"source {source.name!r} holds no prompts")
        self.source = source
        self.answer_format = answer_format or source.default_answer_format
        check_answer_format(self.answer_format)
        if instruction is None:
            instruction = source.default_instruction
        if not isinstance(instruction, str):
            raise ValueError(f"instruction must be a str or None, got {instruction!r}")
        if system_prompt is not None and not isinstance(system_prompt, str):
            raise ValueError(f"system_prompt must be a str or None, got {system_prompt!r}")
        self.instruction = instruction
        self.system_prompt = system_prompt or None
        self.render_mode = check_render_mode(render_mode, self.metadata["render_modes"])
        self._prompts = []
        for i in range(len(source)):
            p = source.prompt(i)
            if not isinstance(p, str):
                raise ValueError(f"source {source.name!r}: prompt {i} is not a str: {p!r}")
            self._prompts.append(p.rstrip() + instruction if instruction else p)
        longest = max(range(len(self._prompts)), key=lambda i: len(self._prompts[i]))
        if max_prompt_length is None:
            max_prompt_length = len(self._prompts[longest])
        max_prompt_length = check_int("max_prompt_length", max_prompt_length, 0)
        if len(self._prompts[longest]) > max_prompt_length:
            raise ValueError(
                f"max_prompt_length={max_prompt_length} is shorter than prompt {longest} "
                f"({len(self._prompts[longest])} characters); use max_prompt_length=None "
                "(the longest prompt) or a larger value"
            )
        self.max_completion_length = check_int("max_completion_length", max_completion_length, 1)
        self.charset = "".join(sorted(set(BASE_CHARSET).union(*map(set, self._prompts))))
        self.observation_space = spaces.Text(
            max_length=max_prompt_length, min_length=0, charset=self.charset
        )
        self.action_space = spaces.Text(
            max_length=self.max_completion_length, min_length=0, charset=self.charset
        )
        self._index: int | None = None  # None until the first reset
        self._done = False

    # -- the current problem (read-only) --
    @property
    def index(self) -> int:
        """The current problem's index in the source."""
        self._require_reset("index")
        return self._index

    @property
    def prompt(self) -> str:
        """The current prompt text (the observation: the full user message)."""
        return self._prompts[self.index]

    @property
    def answer(self) -> str:
        """The current problem's reference answer as text (``""`` if the task has none)."""
        return self.source.answer(self.index)

    @property
    def chat_prompt(self) -> list[dict[str, str]]:
        """The current prompt as chat messages: the system prompt (if any), then the user's."""
        messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return [*messages, {"role": "user", "content": self.prompt}]

    @property
    def prompts(self) -> list[str]:
        """Every prompt of the source, instruction included (a new list), by index."""
        return list(self._prompts)

    def _require_reset(self, what: str) -> None:
        if self._index is None:
            raise PromptEnvResetNeeded(f"call reset() before {what}")

    def _require_live(self, what: str) -> None:
        self._require_reset(what)
        if self._done:
            raise PromptEnvResetNeeded(
                f"the episode ended after its one step; call reset() before {what}"
            )

    def _check_completion(self, completion: Any, what: str = "completion") -> str:
        if not isinstance(completion, str):
            raise ValueError(
                f"{what} must be a str, got {type(completion).__name__} {completion!r:.100}"
            )
        if len(completion) > self.max_completion_length:
            raise ValueError(
                f"{what} has {len(completion)} characters, more than the action space's "
                f"max_length {self.max_completion_length}; truncate it or raise "
                "max_completion_length"
            )
        return completion

    def _score(self, completion: str) -> tuple[float, str | None]:
        extracted = extract_answer(completion, self.answer_format)
        reward = 0.0 if extracted is None else self.source.verify(self._index, extracted)
        return reward, extracted

    # -- Gymnasium API --
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        options = check_reset_options(options, ["context"])  # validate before any state changes
        context = options.get("context")
        if context is not None:
            context = check_scalar_action(context, len(self._prompts), what="context")
        super().reset(seed=seed)
        index = int(self.np_random.integers(len(self._prompts))) if context is None else context
        self._index = index
        self._done = False
        info = {
            "task": self.source.name,
            "index": index,
            "answer": self.source.answer(index),
            "metadata": self.source.metadata(index),
        }
        return self._prompts[index], info

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self._require_live("step()")
        completion = self._check_completion(action)
        reward, extracted = self._score(completion)
        self._done = True
        info = {
            "extracted_answer": extracted,
            "correct": reward == 1.0,
            "index": self._index,
            "answer": self.source.answer(self._index),
        }
        return self._prompts[self._index], reward, True, False, info

    def score_candidates(self, completions: Sequence[str]) -> np.ndarray:
        """Rewards ``float64 [K]`` of K completions for the current prompt (as ``step`` gives).

        Changes no state (no draw, the episode stays live).

        Raises:
            PromptEnvResetNeeded: before ``reset()`` or after the episode's step.
            ValueError: ``completions`` is a single str or empty, or a completion is not a
                str or longer than ``max_completion_length`` (the message names its index).
        """
        self._require_live("score_candidates()")
        if isinstance(completions, str) or not isinstance(completions, (Sequence, np.ndarray)):
            raise ValueError(
                f"completions must be a sequence of K str, got {type(completions).__name__} "
                f"{completions!r:.100}"
            )
        if len(completions) < 1:
            raise ValueError("completions must hold at least one completion (K >= 1), got none")
        checked = [
            self._check_completion(c, f"completions[{k}]") for k, c in enumerate(completions)
        ]
        return np.array([self._score(c)[0] for c in checked], dtype=np.float64)


# --------------------------------------------------------------------------- registered ids


class ReasoningGymEnv(PromptEnv):
    """:class:`PromptEnv` over a Reasoning Gym task (ids ``ReasoningGym-v0``, ``ReasoningGym-<task>-v0``).

    ``ReasoningGymEnv(task, size=500, seed=0, config=None, split="all", test_size=100,
    **kwargs)``: the source is :class:`~tpo_gym.prompts.reasoning.ReasoningGymTask` (``seed``
    fixes the problems; the reset seed picks among them; ``split="train"``/``"test"`` divide
    them by question into disjoint sets); ``kwargs`` are :class:`PromptEnv`'s. Answers in
    ``<answer></answer>`` tags by default.
    """

    def __init__(
        self,
        task: str | None = None,
        size: int = 500,
        seed: int = 0,
        config: dict[str, Any] | None = None,
        split: str = "all",
        test_size: int = 100,
        **kwargs: Any,
    ) -> None:
        if task is None:
            raise ValueError(
                "ReasoningGym-v0 needs task=<a Reasoning Gym name>, e.g. "
                "gym.make('ReasoningGym-v0', task='graph_color')"
            )
        source = ReasoningGymTask(
            task, size=size, seed=seed, config=config, split=split, test_size=test_size
        )
        super().__init__(source, **kwargs)


class GSM8KEnv(PromptEnv):
    """:class:`PromptEnv` over GSM8K from a local file (id ``GSM8K-v0``).

    ``GSM8KEnv(path, size=None, **kwargs)``: the source is
    :class:`~tpo_gym.prompts.gsm8k.GSM8KTask` (JSONL or parquet; ``FileNotFoundError`` if the
    file is missing, nothing is downloaded). Answer format ``"auto"`` by default.
    """

    def __init__(self, path: str | Path | None = None, size: int | None = None, **kwargs: Any):
        if path is None:
            raise ValueError(
                "GSM8K-v0 needs path=<a local GSM8K .jsonl or .parquet file>, e.g. "
                "gym.make('GSM8K-v0', path='gsm8k_train.jsonl')"
            )
        super().__init__(GSM8KTask(path, size=size), **kwargs)


class PromptListEnv(PromptEnv):
    """:class:`PromptEnv` over user ``(prompt, verifier)`` pairs (id ``PromptList-v0``).

    ``PromptListEnv(pairs, name="prompt_list", **kwargs)``: the source is
    :class:`~tpo_gym.prompts.tasks.PromptListTask` (a verifier is a callable on the extracted
    answer or the expected answer). Answer format ``"identity"`` by default.
    """

    def __init__(
        self,
        pairs: Sequence[tuple[str, Any]] | None = None,
        name: str = "prompt_list",
        **kwargs: Any,
    ):
        if pairs is None:
            raise ValueError(
                "PromptList-v0 needs pairs=[(prompt, verifier), ...], e.g. "
                "gym.make('PromptList-v0', pairs=[('2+2=', '4')])"
            )
        super().__init__(PromptListTask(pairs, name=name), **kwargs)


class TinyArithmeticEnv(PromptEnv):
    """:class:`PromptEnv` over one-digit arithmetic for tiny LMs (id ``TinyArithmetic-v0``).

    ``TinyArithmeticEnv(size=None, seed=0, operations="+-", max_completion_length=16,
    **kwargs)``: prompts like ``"3+4="`` (at most 5 characters, no instruction), answers one
    digit ``0..9``; reward 1.0 iff the completion's first non-whitespace character is the
    answer (answer format ``"first_char"``; ``"last_number"`` or ``"identity"`` also work).
    See :class:`~tpo_gym.prompts.tasks.TinyArithmeticTask`.
    """

    def __init__(
        self,
        size: int | None = None,
        seed: int = 0,
        operations: str = "+-",
        max_completion_length: int = 16,
        **kwargs: Any,
    ) -> None:
        source = TinyArithmeticTask(size=size, seed=seed, operations=operations)
        super().__init__(source, max_completion_length=max_completion_length, **kwargs)


class ArithmeticEnv(PromptEnv):
    """:class:`PromptEnv` over multi-digit arithmetic, exact match (id ``Arithmetic-v0``).

    ``ArithmeticEnv(digits=2, operations="+", split="train", test_size=500, size=None, seed=0,
    max_completion_length=16, **kwargs)``: prompts like ``"37+48="`` (no instruction), reward
    1.0 iff the whole stripped completion is the exact result (answer format ``"identity"``).
    ``split="test"`` gives the ``test_size`` held-out problems that ``"train"`` never shows.
    See :class:`~tpo_gym.prompts.tasks.ArithmeticTask`.
    """

    def __init__(
        self,
        digits: int = 2,
        operations: str = "+",
        split: str = "train",
        test_size: int = 500,
        size: int | None = None,
        seed: int = 0,
        max_completion_length: int = 16,
        **kwargs: Any,
    ) -> None:
        source = ArithmeticTask(
            digits=digits, operations=operations, split=split, test_size=test_size,
            size=size, seed=seed,
        )
        super().__init__(source, max_completion_length=max_completion_length, **kwargs)


class StringReversalEnv(PromptEnv):
    """:class:`PromptEnv` over string reversal, exact match (id ``StringReversal-v0``).

    ``StringReversalEnv(length=5, alphabet="abc...z", split="train", test_size=200, size=None,
    seed=0, max_completion_length=None, **kwargs)``: prompts like ``"rev abcde="`` (no
    instruction), reward 1.0 iff the whole stripped completion is the string reversed. The
    length (an int, or a ``(min, max)`` mixture) is the difficulty dial; ``split="test"`` gives
    the held-out strings ``"train"`` never shows. ``max_completion_length`` defaults to the
    longest answer plus 4 characters. See :class:`~tpo_gym.prompts.tasks.StringReversalTask`.
    """

    def __init__(
        self,
        length: int | tuple[int, int] = 5,
        alphabet: str = "abcdefghijklmnopqrstuvwxyz",
        split: str = "train",
        test_size: int = 200,
        size: int | None = None,
        seed: int = 0,
        max_completion_length: int | None = None,
        **kwargs: Any,
    ) -> None:
        source = StringReversalTask(
            length=length, alphabet=alphabet, split=split, test_size=test_size, size=size,
            seed=seed,
        )
        if max_completion_length is None:
            max_completion_length = source.length[1] + 4
        super().__init__(source, max_completion_length=max_completion_length, **kwargs)
