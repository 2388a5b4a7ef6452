"""GSM8K from a local file (JSONL or parquet), verified numerically.

The standard GSM8K format: one record per problem with a ``question`` and an ``answer``
whose worked solution ends with ``#### <number>``. Nothing is downloaded; to get the file::

    from datasets import load_dataset          # once, with internet access
    load_dataset("openai/gsm8k", "main", split="train").to_json("gsm8k_train.jsonl")

Reading parquet needs ``pyarrow`` (imported only then). Never imports torch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tpo_gym.extras import needs_extra
from tpo_gym.prompts.extraction import extract_answer, numbers_equal, parse_number
from tpo_gym.prompts.reasoning import ANSWER_INSTRUCTION
from tpo_gym.prompts.tasks import TaskSource
from tpo_gym.validation import check_int

__all__ = ["GSM8KTask", "load_gsm8k_records"]

_SUFFIXES = {".jsonl": "jsonl", ".json": "jsonl", ".parquet": "parquet"}


def _read_jsonl(path: Path) -> list[Any]:
    records = []
    with path.open("rb") as f:
        for lineno, raw in enumerate(f, 1):
            try:  # a UTF-8 byte-order mark at the start is accepted
                line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as err:
                raise ValueError(
                    f"{path}: line {lineno} is not UTF-8 text ({err.reason}: byte "
                    f"0x{raw[err.start]:02x} at column {err.start + 1}); expected GSM8K as "
                    'UTF-8 JSON lines (one {"question", "answer"} object per line); '
                    "re-encode the file as UTF-8"
                ) from None
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}: line {lineno} is not valid JSON ({err.msg})") from None
    return records


def _read_parquet(path: Path) -> list[Any]:
    with needs_extra("llm", f"reading {path} (or convert it to JSONL)"):
        import pyarrow.parquet as pq
    try:
        table = pq.read_table(path)
    except (OSError, ValueError) as err:  # pyarrow's ArrowInvalid is a ValueError
        raise ValueError(
            f"{path}: not a readable parquet file ({err}); expected GSM8K as a parquet table "
            "with str columns question and answer"
        ) from err
    return table.to_pylist()


def load_gsm8k_records(path: str | Path) -> list[dict[str, str]]:
    """The ``{"question", "answer"}`` records of a local GSM8K file (JSONL or parquet).

    Raises:
        FileNotFoundError: ``path`` does not exist (nothing is downloaded).
        ValueError: an unsupported suffix, an empty file, a JSONL file that is not UTF-8
            or not JSON, an unreadable parquet file, or a record without a str
            ``question``/``answer`` or without the ``#### <number>`` final answer; the
            message names the file.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"GSM8K file not found: {str(path)!r}. tpo_gym never downloads data: save GSM8K "
            "locally first, e.g. datasets.load_dataset('openai/gsm8k', 'main', split='train')"
            ".to_json('gsm8k_train.jsonl'), then pass path='gsm8k_train.jsonl'"
        )
    kind = _SUFFIXES.get(path.suffix.lower())
    if kind is None:
        raise ValueError(
            f"unsupported GSM8K file type {path.suffix!r} ({path}); expected one of "
            f"{sorted(_SUFFIXES)} (JSON lines or parquet)"
        )
    records = _read_jsonl(path) if kind == "jsonl" else _read_parquet(path)
    if not records:
        raise ValueError(f"GSM8K file {path} holds no records")
    for row, record in enumerate(records):
        for key in ("question", "answer"):
            if not isinstance(record, dict) or not isinstance(record.get(key), str):
                raise ValueError(
                    f"{path}: record {row} needs a str {key!r} field (GSM8K's question/answer "
                    f"format), got {record!r:.200}"
                )
        if parse_number(extract_answer(record["answer"], "hashes")) is None:
            raise ValueError(
                f"{path}: record {row}'s answer must end with '#### <number>', got "
                f"{record['answer'][-80:]!r}"
            )
    return records


class GSM8KTask(TaskSource):
    """GSM8K word problems from a local JSONL or parquet file.

    ``prompt(i)`` is the record's ``question``; ``answer(i)`` the number after ``####``,
    normalized (``"1,200"`` -> ``"1200"``); ``metadata(i)`` holds the worked ``solution``
    and the ``row``. The verifier parses the extracted answer as a number (stripping
    whitespace, ``$``, thousands commas and a trailing period; see
    :func:`~tpo_gym.prompts.extraction.parse_number`) and scores 1.0 iff it equals the
    reference; anything that is not a plain number (words, units) scores 0.0.

    Default answer format ``"auto"``: ``<answer>`` tags, else ``#### n``, else ``\\boxed{}``,
    else the last number of the completion.

    Args:
        path: the local file (``.jsonl``/``.json`` lines or ``.parquet``).
        size: keep the first ``size`` records (``None``: all).

    Raises:
        FileNotFoundError: a missing file (no download is attempted).
        ValueError: see :func:`load_gsm8k_records`; a bad ``size``.
    """

    name = "gsm8k"
    default_answer_format = "auto"
    default_instruction = ANSWER_INSTRUCTION

    def __init__(self, path: str | Path, size: int | None = None):
        if not isinstance(path, (str, Path)):
            raise ValueError(
                f"path must be the path of a local GSM8K JSONL or parquet file, got {path!r}"
            )
        records = load_gsm8k_records(path)
        if size is not None:
            records = records[: check_int("size", size, 1)]
        self.path = Path(path)
        self._questions = [r["question"] for r in records]
        self._solutions = [r["answer"] for r in records]
        self._answers = [
            extract_answer(r["answer"], "hashes").replace(",", "").rstrip(".") for r in records
        ]
        self._values = [parse_number(a) for a in self._answers]

    def __len__(self) -> int:
        return len(self._questions)

    def prompt(self, i: int) -> str:
        return self._questions[self.check_index(i)]

    def answer(self, i: int) -> str:
        return self._answers[self.check_index(i)]

    def metadata(self, i: int) -> dict[str, Any]:
        i = self.check_index(i)
        return {"solution": self._solutions[i], "row": i, "source": str(self.path)}

    def verify(self, i: int, answer: str) -> float:
        value = parse_number(answer)
        return float(value is not None and numbers_equal(value, self._values[self.check_index(i)]))
