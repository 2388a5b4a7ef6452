"""Reasoning Gym tasks by name, verified by the dataset's own ``score_answer``.

``reasoning_gym`` is imported only when a :class:`ReasoningGymTask` is built (it is an
optional dependency: ``pip install reasoning-gym`` or ``tpo[llm]``). Reasoning Gym datasets
are procedural: entry ``i`` is a pure function of ``(name, seed, config, i)`` and nothing is
downloaded. Never imports torch.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import json
from typing import Any

from tpo_gym.extras import needs_extra
from tpo_gym.prompts.tasks import TaskSource, check_score
from tpo_gym.validation import check_int

__all__ = ["ANSWER_INSTRUCTION", "ReasoningGymTask", "reasoning_gym_task_names"]

ANSWER_INSTRUCTION = (
    "\n\nThink it through, then give only your final answer inside <answer></answer> tags."
)
"""Appended to Reasoning Gym and GSM8K prompts by default (the answer format is ``tags``)."""


def _import_reasoning_gym() -> Any:
    with needs_extra("llm", "Reasoning Gym tasks (ReasoningGym-v0)"):
        import reasoning_gym
        import reasoning_gym.factory  # noqa: F401  (the registry)
    return reasoning_gym


def reasoning_gym_task_names() -> list[str]:
    """Every task name registered in Reasoning Gym, sorted (imports ``reasoning_gym``)."""
    return sorted(_import_reasoning_gym().factory.DATASETS)


SPLITS = ("all", "train", "test")


def _split_entries(entries: list[dict], split: str, test_size: Any) -> list[dict]:
    """The entries of ``split``: test = those asking one of the first ``test_size`` distinct
    questions (in dataset order), train = the rest."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    if split == "all":
        return entries
    test_size = check_int("test_size", test_size, 1)
    distinct = list(dict.fromkeys(e["question"] for e in entries))
    if test_size >= len(distinct):
        raise ValueError(
            f"test_size must be less than the {len(distinct)} distinct questions of the "
            f"dataset; got {test_size} (raise size=)"
        )
    held_out = set(distinct[:test_size])
    return [e for e in entries if (e["question"] in held_out) == (split == "test")]


class ReasoningGymTask(TaskSource):
    """A Reasoning Gym dataset: ``reasoning_gym.create_dataset(task, size=size, seed=seed, **config)``.

    Any registered name works (``graph_color``, ``knights_knaves``, ``basic_arithmetic``,
    ``chain_sum``, ``gsm_symbolic``, ...; see :func:`reasoning_gym_task_names`). The verifier is
    the dataset's ``score_answer(answer=<extracted answer>, entry=entry)``, a score in
    ``[0, 1]`` (some tasks give partial credit, e.g. 0.01 for a well-formed wrong colouring).
    The entries are generated once, at construction.

    ``answer(i)`` is the entry's ``"answer"``; tasks without a single reference answer
    (``entry["answer"] is None``) use ``metadata["possible_answer"]`` as JSON when present
    (``graph_color``), else ``""`` (``boxnet``, ``propositional_logic``, ``rubiks_cube``,
    ``rush_hour``: only the verifier knows). Default answer format ``"tags"``.

    Args:
        task: a registered Reasoning Gym name.
        size: the number of entries (int >= 1).
        seed: the dataset seed (int >= 0); it fixes the problems, not the order they are drawn.
        config: extra keyword arguments of the task's config class (e.g.
            ``{"min_num_vertices": 5}`` for ``graph_color``).
        split: ``"all"`` (every entry), ``"test"`` or ``"train"``: the entries whose question
            is one of the first ``test_size`` distinct questions are the held-out test split,
            the others the train split. Splitting by question, not by index, keeps a question
            that the dataset draws twice out of the train split when it is a test question.
        test_size: distinct questions held out (int >= 1; only with ``split != "all"``).

    Raises:
        ValueError: an unknown task name (the message lists registered names), a bad
            ``size``/``seed``, or a config the task rejects (the message lists its fields).
    """

    default_answer_format = "tags"
    default_instruction = ANSWER_INSTRUCTION

    def __init__(
        self,
        task: str,
        size: int = 500,
        seed: int = 0,
        config: dict[str, Any] | None = None,
        split: str = "all",
        test_size: int = 100,
    ):
        rg = _import_reasoning_gym()
        registry = rg.factory.DATASETS
        if not isinstance(task, str) or task not in registry:
            names = sorted(registry)
            close = difflib.get_close_matches(str(task), names, n=3)
            hint = f"did you mean {close}? " if close else ""
            raise ValueError(
                f"unknown Reasoning Gym task {task!r}; {hint}registered tasks include "
                f"{names[:25]} ... ({len(names)} in total, see "
                "tpo_gym.prompts.reasoning_gym_task_names())"
            )
        size = check_int("size", size, 1)
        seed = check_int("seed", seed, 0)
        if config is None:
            config = {}
        if not isinstance(config, dict):
            raise ValueError(f"config must be a dict of {task} config fields, got {config!r}")
        for key in ("size", "seed"):
            if key in config:
                raise ValueError(f"pass {key} as the {key}= argument, not in config={config!r}")
        try:
            dataset = rg.create_dataset(task, size=size, seed=seed, **config)
        except (TypeError, ValueError, AssertionError) as err:
            config_cls = registry[task][1]
            fields = [
                f.name for f in dataclasses.fields(config_cls) if f.name not in ("size", "seed")
            ]
            raise ValueError(
                f"Reasoning Gym task {task!r} rejected config={config!r}: {err!r}; "
                f"its config fields are {fields}"
            ) from err
        self.name = task
        self.task = task
        self.size = size
        self.seed = seed
        self.config = dict(config)
        self.dataset = dataset
        self.split = split
        self._entries = _split_entries([dataset[i] for i in range(size)], split, test_size)

    def __len__(self) -> int:
        return len(self._entries)

    def entry(self, i: int) -> dict[str, Any]:
        """A deep copy of Reasoning Gym's entry ``i`` (question, answer, metadata)."""
        return copy.deepcopy(self._entries[self.check_index(i)])

    def prompt(self, i: int) -> str:
        return self._entries[self.check_index(i)]["question"]

    def answer(self, i: int) -> str:
        entry = self._entries[self.check_index(i)]
        if entry["answer"] is not None:
            return str(entry["answer"])
        possible = entry["metadata"].get("possible_answer")
        if possible is None:
            return ""
        return possible if isinstance(possible, str) else json.dumps(possible)

    def metadata(self, i: int) -> dict[str, Any]:
        return copy.deepcopy(self._entries[self.check_index(i)]["metadata"])

    def verify(self, i: int, answer: str) -> float:
        entry = self._entries[self.check_index(i)]
        value = self.dataset.score_answer(answer=answer, entry=entry)
        return check_score(value, f"Reasoning Gym {self.task!r} score_answer (entry {i})")
