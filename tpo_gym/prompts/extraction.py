"""Answer extraction from free-text completions, and numeric answer comparison.

:func:`extract_answer` pulls the final answer out of a model's completion. ``mode`` names
how (see :data:`ANSWER_FORMATS`):

* ``"tags"``: the text between the *last* ``<answer>`` and ``</answer>`` pair, stripped;
* ``"hashes"``: the number right after the last ``####`` (GSM8K's format: ``"#### 1,500"``
  gives ``"1,500"``, ``"#### $7."`` gives ``"$7"``; no number there gives ``None``);
* ``"boxed"``: the contents of the last ``\\boxed{...}`` (nested braces allowed), stripped;
* ``"last_number"``: the last number in the text (``-3``, ``1,234`` -> ``1234``, ``2.5``);
* ``"first_char"``: the first non-whitespace character;
* ``"identity"``: the whole completion, stripped;
* ``"auto"``: the first of ``tags``, ``hashes``, ``boxed``, ``last_number`` that finds one.

A mode may also be a sequence of modes, tried in order. The result is ``None`` when the
mode finds no answer (no tags, no number, an all-blank completion for ``first_char``).

:func:`parse_number` and :func:`numbers_equal` are the usual GSM8K numeric check: strip
whitespace, ``$``, thousands commas and a trailing period, then compare as numbers.

This module imports the standard library only (never torch).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

__all__ = [
    "ANSWER_FORMATS",
    "AnswerFormat",
    "check_answer_format",
    "extract_answer",
    "numbers_equal",
    "parse_number",
]

ANSWER_FORMATS = ("tags", "hashes", "boxed", "last_number", "first_char", "identity", "auto")
"""The extraction modes of :func:`extract_answer`."""

AUTO = ("tags", "hashes", "boxed", "last_number")
"""What ``"auto"`` tries, in order."""

AnswerFormat = str | Sequence[str]
"""A mode of :data:`ANSWER_FORMATS` or a sequence of them (tried in order)."""

_TAGS = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
# An integer with thousands separators or plain digits, an optional fraction; a leading
# minus only when it is not a binary minus ("3-4" gives 4, "is -4" gives -4).
_NUMBER = re.compile(r"(?:(?<![\w)\]])-)?(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?")
_HASHES_NUMBER = re.compile(r"[ \t]*(-?\$?\d[\d,]*(?:\.\d+)?)")
_PLAIN_NUMBER = re.compile(r"-?(?:\d+(?:\.\d*)?|\.\d+)")


def _tags(text: str) -> str | None:
    matches = _TAGS.findall(text)
    return matches[-1].strip() if matches else None


def _hashes(text: str) -> str | None:
    pos = text.rfind("####")
    match = _HASHES_NUMBER.match(text, pos + 4) if pos >= 0 else None
    return match.group(1) if match else None


def _boxed(text: str) -> str | None:
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 1, start + len("\\boxed{")
    begin = i
    while i < len(text):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[begin:i].strip()
        i += 1
    return None  # unbalanced braces: malformed


def _last_number(text: str) -> str | None:
    matches = _NUMBER.findall(text)
    return matches[-1].replace(",", "") if matches else None


def _first_char(text: str) -> str | None:
    stripped = text.lstrip()
    return stripped[0] if stripped else None


_EXTRACTORS = {
    "tags": _tags,
    "hashes": _hashes,
    "boxed": _boxed,
    "last_number": _last_number,
    "first_char": _first_char,
    "identity": str.strip,
}


def check_answer_format(mode: AnswerFormat) -> tuple[str, ...]:
    """A valid ``mode`` -> the tuple of basic modes it tries, in order (``"auto"`` expanded).

    Raises:
        ValueError: a mode that is not in :data:`ANSWER_FORMATS`, or an empty sequence.
    """
    modes = (mode,) if isinstance(mode, str) else mode
    if not isinstance(modes, Sequence) or not modes:
        raise ValueError(
            f"answer_format must be one of {list(ANSWER_FORMATS)} or a non-empty sequence of "
            f"them, got {mode!r}"
        )
    out: list[str] = []
    for m in modes:
        if not isinstance(m, str) or m not in ANSWER_FORMATS:
            raise ValueError(
                f"unknown answer_format {m!r}; valid formats are {list(ANSWER_FORMATS)}"
            )
        out.extend(AUTO if m == "auto" else (m,))
    return tuple(out)


def extract_answer(text: str, mode: AnswerFormat = "tags") -> str | None:
    """The answer in the completion ``text`` according to ``mode`` (see the module docstring).

    Args:
        text: the completion.
        mode: one of :data:`ANSWER_FORMATS` or a sequence of them (the first that finds an
            answer wins).

    Returns:
        The answer text, or ``None`` when ``mode`` finds none.

    Raises:
        ValueError: ``text`` is not a str, or ``mode`` is unknown.
    """
    if not isinstance(text, str):
        raise ValueError(f"text must be a str, got {type(text).__name__} {text!r}")
    for m in check_answer_format(mode):
        answer = _EXTRACTORS[m](text)
        if answer is not None:
            return answer
    return None


def parse_number(text: str | None) -> float | None:
    """A numeric answer as a float, ``None`` if ``text`` is not one.

    Strips whitespace, a leading ``$`` (also after a minus sign), thousands commas and
    trailing periods: ``"$1,234."`` -> ``1234.0``, ``"-$5"`` -> ``-5.0``, ``"0.50"`` -> ``0.5``.
    Anything else (words, units, ``"1e5"``, ``"nan"``) gives ``None``.
    """
    if text is None:
        return None
    s = text.strip().replace(",", "").rstrip(".").strip()
    s = s.replace("$", "", 1) if s.startswith(("$", "-$")) else s
    if not _PLAIN_NUMBER.fullmatch(s):
        return None
    return float(s)


def numbers_equal(a: float, b: float, rel_tol: float = 1e-6) -> bool:
    """``a`` and ``b`` are the same number (relative tolerance ``rel_tol``, absolute 1e-9)."""
    return math.isclose(a, b, rel_tol=rel_tol, abs_tol=1e-9)
