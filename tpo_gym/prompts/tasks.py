"""Task sources: indexed prompts with a verifier, the input of :class:`~tpo_gym.prompts.env.PromptEnv`.

A task source is a fixed, indexed list of prompts. :class:`TaskSource` is the interface:

* ``len(source)``: the number of prompts;
* ``prompt(i)``: the prompt text of problem ``i`` (the user message, before any instruction
  the environment appends);
* ``answer(i)``: the reference answer as text (``""`` when a task has no single reference);
* ``metadata(i)``: a dict of task metadata (JSON-like);
* ``verify(i, answer)``: the score in ``[0, 1]`` of an already extracted answer;
* ``score(i, completion, answer_format=None)``: extract the answer of a free-text completion
  (:func:`~tpo_gym.prompts.extraction.extract_answer`, default: the source's
  ``default_answer_format``) and verify it; a completion with no extractable answer scores 0
  without calling the verifier.

This module holds the interface and three small sources: :class:`PromptListTask` (user-supplied
``(prompt, verifier)`` pairs), :class:`TinyArithmeticTask` (one-digit sums for tiny-LM
learning tests), :class:`ArithmeticTask` (multi-digit arithmetic with an exact-match reward
and a held-out split) and :class:`StringReversalTask` (reverse a letter string; its length is
a difficulty dial). Reasoning Gym and GSM8K live in :mod:`tpo_gym.prompts.reasoning` and
:mod:`tpo_gym.prompts.gsm8k`. Imports numpy and the standard library only (never torch).
"""

from __future__ import annotations

import abc
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tpo_gym.prompts.extraction import (
    AnswerFormat,
    extract_answer,
    numbers_equal,
    parse_number,
)
from tpo_gym.validation import check_int, check_scalar_action, show

__all__ = [
    "ArithmeticTask",
    "PromptListTask",
    "StringReversalTask",
    "TaskSource",
    "TinyArithmeticTask",
    "check_score",
    "matches_expected",
]


def check_score(value: Any, where: str) -> float:
    """A verifier's result (a bool or a finite number in ``[0, 1]``) -> ``float``.

    ``where`` names the verifier in the error message.
    """
    if isinstance(value, (bool, np.bool_)):
        return float(value)
    if isinstance(value, (int, float, np.integer, np.floating)):
        score = float(value)
        if math.isfinite(score) and 0.0 <= score <= 1.0:
            return score
    raise ValueError(f"{where} returned {show(value)}; expected a bool or a float in [0, 1]")


def matches_expected(answer: str, expected: str) -> bool:
    """``answer`` equals ``expected`` after stripping, or both are the same number."""
    if answer.strip() == expected.strip():
        return True
    a, b = parse_number(answer), parse_number(expected)
    return a is not None and b is not None and numbers_equal(a, b)


class TaskSource(abc.ABC):
    """An indexed list of prompts with a verifier (see the module docstring).

    Subclasses set ``name``, ``default_answer_format`` and ``default_instruction`` (the text
    :class:`~tpo_gym.prompts.env.PromptEnv` appends to each prompt by default, e.g. asking for
    ``<answer>`` tags) and implement the abstract methods.
    """

    name: str = "task"
    default_answer_format: AnswerFormat = "identity"
    default_instruction: str = ""

    @abc.abstractmethod
    def __len__(self) -> int:
        """The number of prompts."""

    @abc.abstractmethod
    def prompt(self, i: int) -> str:
        """The prompt text of problem ``i``."""

    @abc.abstractmethod
    def answer(self, i: int) -> str:
        """The reference answer of problem ``i`` as text (``""`` if there is no single one)."""

    @abc.abstractmethod
    def metadata(self, i: int) -> dict[str, Any]:
        """Task metadata of problem ``i`` (a new dict)."""

    @abc.abstractmethod
    def verify(self, i: int, answer: str) -> float:
        """The score in ``[0, 1]`` of the extracted ``answer`` to problem ``i``."""

    def check_index(self, i: Any) -> int:
        """A problem index in ``[0, len(self))`` -> ``int`` (``ValueError`` otherwise)."""
        return check_scalar_action(i, len(self), what="problem index")

    def score(self, i: int, completion: str, answer_format: AnswerFormat | None = None) -> float:
        """Score a free-text completion of problem ``i``: extract its answer, then verify it.

        ``answer_format``: how to extract the answer (default: ``default_answer_format``).
        A completion with no extractable answer scores 0.0 (the verifier is not called).
        """
        i = self.check_index(i)
        extracted = extract_answer(completion, answer_format or self.default_answer_format)
        return 0.0 if extracted is None else self.verify(i, extracted)


Verifier = Callable[[str], Any]


class PromptListTask(TaskSource):
    """User-supplied ``(prompt, verifier)`` pairs.

    Each verifier is either

    * a callable ``verifier(answer: str) -> bool | float`` receiving the extracted answer and
      returning a bool or a score in ``[0, 1]`` (anything else raises ``ValueError``); or
    * the expected answer (a str or a number): score 1.0 iff the extracted answer equals it
      after stripping whitespace, or both parse as the same number (``"1,000"`` == ``1000``).

    ``answer(i)`` is the expected answer as text, ``""`` for a callable verifier.
    Default answer format ``"identity"`` (the whole stripped completion); pass
    ``answer_format=`` to the environment to extract from tags, numbers, ...

    Args:
        pairs: a non-empty sequence of ``(prompt, verifier)`` pairs (prompts are str).
        name: the task name reported in ``info["task"]``.
    """

    default_answer_format = "identity"

    def __init__(
        self, pairs: Sequence[tuple[str, Verifier | str | int | float]], name: str = "prompt_list"
    ):
        if isinstance(pairs, (str, bytes)) or not isinstance(pairs, Sequence) or not pairs:
            raise ValueError(
                f"pairs must be a non-empty sequence of (prompt, verifier) pairs, got {pairs!r}"
            )
        if not isinstance(name, str) or not name:
            raise ValueError(f"name must be a non-empty str, got {name!r}")
        self.name = name
        self._prompts: list[str] = []
        self._verifiers: list[Verifier | str] = []
        for k, pair in enumerate(pairs):
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise ValueError(f"pairs[{k}] must be a (prompt, verifier) pair, got {pair!r}")
            prompt, verifier = pair
            if not isinstance(prompt, str):
                raise ValueError(f"pairs[{k}]: the prompt must be a str, got {prompt!r}")
            if isinstance(verifier, (int, float, np.integer, np.floating)) and not isinstance(
                verifier, (bool, np.bool_)
            ):
                verifier = str(verifier)
            if not (callable(verifier) or isinstance(verifier, str)):
                raise ValueError(
                    f"pairs[{k}]: the verifier must be a callable(answer) -> bool | float or the "
                    f"expected answer (a str or number), got {verifier!r}"
                )
            self._prompts.append(prompt)
            self._verifiers.append(verifier)

    def __len__(self) -> int:
        return len(self._prompts)

    def prompt(self, i: int) -> str:
        return self._prompts[self.check_index(i)]

    def answer(self, i: int) -> str:
        verifier = self._verifiers[self.check_index(i)]
        return verifier if isinstance(verifier, str) else ""

    def metadata(self, i: int) -> dict[str, Any]:
        verifier = self._verifiers[self.check_index(i)]
        return {"verifier": "expected_answer" if isinstance(verifier, str) else "callable"}

    def verify(self, i: int, answer: str) -> float:
        verifier = self._verifiers[self.check_index(i)]
        if isinstance(verifier, str):
            return float(matches_expected(answer, verifier))
        return check_score(verifier(answer), f"the verifier of prompt {i}")


OPERATORS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


class _OperandTask(TaskSource):
    """A source of ``"<a><op><b>="`` problems held as ``(a, op, b)`` in ``self._problems``."""

    _problems: list[tuple[int, str, int]]

    def __len__(self) -> int:
        return len(self._problems)

    def prompt(self, i: int) -> str:
        a, op, b = self._problems[self.check_index(i)]
        return f"{a}{op}{b}="

    def answer(self, i: int) -> str:
        a, op, b = self._problems[self.check_index(i)]
        return str(OPERATORS[op](a, b))

    def metadata(self, i: int) -> dict[str, Any]:
        a, op, b = self._problems[self.check_index(i)]
        return {"a": a, "op": op, "b": b}


class TinyArithmeticTask(_OperandTask):
    """One-digit arithmetic for learning tests of tiny language models.

    Prompts like ``"3+4="`` or ``"8-5="``: two operands in ``0..9`` and an operator from
    ``operations``, restricted to problems whose answer is a single digit ``0..9`` (so at most
    5 characters, no instruction appended). The unique problems (55 sums, 55 differences) are
    shuffled with ``seed``; the source holds the first ``size`` of them (all by default).

    Reward: 1.0 iff the extracted answer equals the answer digit. The default answer format
    ``"first_char"`` takes the completion's first non-whitespace character (``"7"``,
    ``" 7 and more"`` score 1 for ``"3+4="``; ``"07"``, ``""`` score 0); ``"last_number"``
    and ``"identity"`` also work.

    Args:
        size: the number of problems (``None``: every unique problem of ``operations``).
        seed: the seed of the shuffle (int >= 0).
        operations: a non-empty string of operators from ``"+-"``.
    """

    name = "tiny_arithmetic"
    default_answer_format = "first_char"

    def __init__(self, size: int | None = None, seed: int = 0, operations: str = "+-"):
        if not isinstance(operations, str) or not operations or set(operations) - set("+-"):
            raise ValueError(
                f"operations must be a non-empty string of '+' and '-', got {operations!r}"
            )
        seed = check_int("seed", seed, 0)
        problems = [
            (a, op, b)
            for op in dict.fromkeys(operations)
            for a in range(10)
            for b in range(10)
            if 0 <= OPERATORS[op](a, b) <= 9
        ]
        order = np.random.default_rng(seed).permutation(len(problems))
        if size is not None:
            size = check_int("size", size, 1)
            if size > len(problems):
                raise ValueError(
                    f"size must be at most {len(problems)} (the unique problems of "
                    f"operations={operations!r}), got {size}"
                )
            order = order[:size]
        self.operations = operations
        self.seed = seed
        self._problems = [problems[int(j)] for j in order]

    def verify(self, i: int, answer: str) -> float:
        return float(answer.strip() == self.answer(i))


SPLITS = ("train", "test", "all")


class ArithmeticTask(_OperandTask):
    """Multi-digit arithmetic with an exact-match reward: a sparse task for small LMs.

    Prompts like ``"37+48="``: two operands with ``digits`` digits each (``10..99`` for two;
    ``0..9`` for one) and an operator from ``operations`` (``+``, ``-``, ``*``). Every unique
    problem is enumerated and shuffled once with ``seed``; the first ``test_size`` of the
    shuffle are the held-out ``"test"`` split, the rest the ``"train"`` split (``"all"``: both),
    so a model trained on one split is evaluated on problems it never saw. ``size`` keeps the
    first ``size`` problems of the split.

    Reward: 1.0 iff the answer equals the exact result (default answer format
    ``"identity"``: the whole stripped completion, so ``"85"`` scores 1 for ``"37+48="`` and
    ``"85 "`` too, but ``"85, I think"`` and ``"085"`` score 0). One wrong digit scores 0: the
    reward is sparse, unlike :class:`TinyArithmeticTask`'s one-character answers.

    Args:
        digits: digits per operand (int in ``1..3``).
        operations: a non-empty string of operators from ``"+-*"``.
        split: ``"train"``, ``"test"`` or ``"all"``.
        test_size: problems held out as the test split (int >= 1, less than the total).
        size: keep the first ``size`` problems of the split (``None``: all of them).
        seed: the seed of the shuffle (int >= 0); the same seed gives the same split.
    """

    name = "arithmetic"
    default_answer_format = "identity"

    def __init__(
        self,
        digits: int = 2,
        operations: str = "+",
        split: str = "train",
        test_size: int = 500,
        size: int | None = None,
        seed: int = 0,
    ):
        digits = check_int("digits", digits, 1)
        if digits > 3:
            raise ValueError(f"digits must be an int in 1..3, got {digits}")
        if not isinstance(operations, str) or not operations or set(operations) - set("+-*"):
            raise ValueError(
                f"operations must be a non-empty string of '+', '-' and '*', got {operations!r}"
            )
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        seed = check_int("seed", seed, 0)
        low, high = (0, 10) if digits == 1 else (10 ** (digits - 1), 10**digits)
        n_ops = len(dict.fromkeys(operations))
        n_pairs = (high - low) ** 2
        total = n_ops * n_pairs
        test_size = check_int("test_size", test_size, 1)
        if test_size >= total:
            raise ValueError(
                f"test_size must be less than the {total} unique problems of digits={digits}, "
                f"operations={operations!r}; got {test_size}"
            )
        # A problem is an index into (operator, a, b); only the chosen slice is decoded.
        order = np.random.default_rng(seed).permutation(total)
        chosen = {"test": order[:test_size], "train": order[test_size:], "all": order}[split]
        if size is not None:
            size = check_int("size", size, 1)
            if size > len(chosen):
                raise ValueError(
                    f"size must be at most {len(chosen)} (the {split} split), got {size}"
                )
            chosen = chosen[:size]
        ops = list(dict.fromkeys(operations))
        self.digits, self.operations, self.split = digits, operations, split
        self.test_size, self.seed = test_size, seed
        self._problems = [
            (low + int(j % n_pairs) // (high - low), ops[int(j) // n_pairs],
             low + int(j % n_pairs) % (high - low))
            for j in chosen
        ]

    def metadata(self, i: int) -> dict[str, Any]:
        return {**super().metadata(i), "split": self.split}

    def verify(self, i: int, answer: str) -> float:
        return float(answer.strip() == self.answer(i))


class StringReversalTask(TaskSource):
    """Reverse a random letter string, exact match: the text analogue of Token Reversal.

    Prompts like ``"rev abcde="`` with answer ``"edcba"``. ``length`` is the difficulty dial,
    as H is in Table 3: the answer is the prompt's string reversed, one wrong character scores
    0 (terminal reward), so the chance that a sampled completion is all right falls about
    geometrically with the length. ``length`` is an int, or a ``(min, max)`` pair for a mixture
    (each problem's length drawn uniformly), which is how a model is pre-trained on every level
    at once.

    Strings are drawn with ``seed`` (letters from ``alphabet``, uniformly). The first
    ``test_size`` distinct strings of each length are the held-out ``"test"`` split; the
    ``"train"`` split draws ``size`` problems (default 20,000) that never equal a test string,
    so a model trained on ``"train"`` is evaluated on strings it never saw. The same seed gives
    the same split for any ``split``, ``size`` and ``length`` range covering a length.

    Args:
        length: string length, an int in ``1..64`` or a ``(min, max)`` pair of them.
        alphabet: the letters (a string of at least 2 distinct characters, no whitespace,
            no ``=``).
        split: ``"train"``, ``"test"`` or ``"all"`` (the test problems, then the train ones).
        test_size: held-out strings per length (int >= 1, at most half the strings of the
            shortest length).
        size: train problems (``None``: 20,000; the test split always holds ``test_size`` per
            length).
        seed: the seed of the draws (int >= 0).
    """

    name = "string_reversal"
    default_answer_format = "identity"
    PREFIX = "rev "

    def __init__(
        self,
        length: int | Sequence[int] = 5,
        alphabet: str = "abcdefghijklmnopqrstuvwxyz",
        split: str = "train",
        test_size: int = 200,
        size: int | None = None,
        seed: int = 0,
    ):
        lo, hi = _length_range(length)
        if (
            not isinstance(alphabet, str)
            or len(set(alphabet)) < 2
            or len(set(alphabet)) != len(alphabet)
            or any(ch.isspace() or ch == "=" for ch in alphabet)
        ):
            raise ValueError(
                "alphabet must be a string of at least 2 distinct characters without whitespace "
                f"or '=', got {alphabet!r}"
            )
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        test_size = check_int("test_size", test_size, 1)
        if 2 * test_size > len(alphabet) ** lo:
            raise ValueError(
                f"test_size must be at most half the {len(alphabet) ** lo} strings of length {lo} "
                f"over {len(alphabet)} letters, got {test_size}"
            )
        size = 20_000 if size is None else check_int("size", size, 1)
        seed = check_int("seed", seed, 0)
        # Each length's test strings come from their own stream, so they do not depend on the
        # range: a model pre-trained on the mixture 3..10 never saw the test strings of 7.
        test = {n: _distinct_strings(alphabet, n, test_size, seed) for n in range(lo, hi + 1)}
        held_out = {s for strings in test.values() for s in strings}
        strings: list[str] = []
        if split in ("test", "all"):
            strings += [s for n in range(lo, hi + 1) for s in test[n]]
        if split in ("train", "all"):
            rng = np.random.default_rng([seed, 1, lo, hi])
            letters = np.array(list(alphabet))
            end = len(strings) + size
            while len(strings) < end:
                n = int(rng.integers(lo, hi + 1))
                s = "".join(letters[rng.integers(0, len(alphabet), n)])
                if s not in held_out:
                    strings.append(s)
        self.length, self.alphabet, self.split = (lo, hi), alphabet, split
        self.test_size, self.seed = test_size, seed
        self._strings = strings

    def __len__(self) -> int:
        return len(self._strings)

    def prompt(self, i: int) -> str:
        return f"{self.PREFIX}{self._strings[self.check_index(i)]}="

    def answer(self, i: int) -> str:
        return self._strings[self.check_index(i)][::-1]

    def metadata(self, i: int) -> dict[str, Any]:
        return {"length": len(self._strings[self.check_index(i)]), "split": self.split}

    def verify(self, i: int, answer: str) -> float:
        return float(answer.strip() == self.answer(i))


def _length_range(length: Any) -> tuple[int, int]:
    """``length`` (an int or a ``(min, max)`` pair, each in 1..64) as ``(min, max)``."""
    pair = (length, length) if not isinstance(length, (list, tuple)) else tuple(length)
    if len(pair) != 2:
        raise ValueError(f"length must be an int or a (min, max) pair, got {length!r}")
    lo, hi = (check_int("length", v, 1) for v in pair)
    if hi > 64 or lo > hi:
        raise ValueError(f"length must be in 1..64 with min <= max, got {length!r}")
    return lo, hi


def _distinct_strings(alphabet: str, n: int, count: int, seed: int) -> list[str]:
    """``count`` distinct strings of length ``n``, drawn in order from the stream (seed, n)."""
    rng = np.random.default_rng([seed, 0, n])
    letters = np.array(list(alphabet))
    seen: dict[str, None] = {}
    while len(seen) < count:
        seen.setdefault("".join(letters[rng.integers(0, len(alphabet), n)]), None)
    return list(seen)
