"""LLM prompt environments: task sources, verifiers and one-step text envs (never torch).

* :mod:`tpo_gym.prompts.extraction`: :func:`extract_answer` (``<answer>`` tags, ``#### n``,
  ``\\boxed{}``, last number, first character, identity) and numeric comparison;
* :mod:`tpo_gym.prompts.tasks`: the :class:`TaskSource` interface, :class:`PromptListTask`,
  :class:`TinyArithmeticTask`, :class:`ArithmeticTask` and :class:`StringReversalTask`;
* :mod:`tpo_gym.prompts.reasoning`: :class:`ReasoningGymTask` (``reasoning_gym`` is imported
  only when one is built);
* :mod:`tpo_gym.prompts.gsm8k`: :class:`GSM8KTask` (a local JSONL or parquet file);
* :mod:`tpo_gym.prompts.env`: :class:`PromptEnv` and its registered subclasses.
"""

from tpo_gym.prompts.env import (
    BASE_CHARSET,
    ArithmeticEnv,
    GSM8KEnv,
    PromptEnv,
    PromptEnvResetNeeded,
    PromptListEnv,
    ReasoningGymEnv,
    StringReversalEnv,
    TinyArithmeticEnv,
)
from tpo_gym.prompts.extraction import (
    ANSWER_FORMATS,
    check_answer_format,
    extract_answer,
    numbers_equal,
    parse_number,
)
from tpo_gym.prompts.gsm8k import GSM8KTask, load_gsm8k_records
from tpo_gym.prompts.reasoning import ReasoningGymTask, reasoning_gym_task_names
from tpo_gym.prompts.tasks import (
    ArithmeticTask,
    PromptListTask,
    StringReversalTask,
    TaskSource,
    TinyArithmeticTask,
)

__all__ = [
    "ANSWER_FORMATS",
    "BASE_CHARSET",
    "ArithmeticEnv",
    "ArithmeticTask",
    "GSM8KEnv",
    "GSM8KTask",
    "PromptEnv",
    "PromptEnvResetNeeded",
    "PromptListEnv",
    "PromptListTask",
    "ReasoningGymEnv",
    "ReasoningGymTask",
    "StringReversalEnv",
    "StringReversalTask",
    "TaskSource",
    "TinyArithmeticEnv",
    "TinyArithmeticTask",
    "check_answer_format",
    "extract_answer",
    "load_gsm8k_records",
    "numbers_equal",
    "parse_number",
    "reasoning_gym_task_names",
]
