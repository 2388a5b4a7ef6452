"""``python -m zoo.trl_train``: TPO or GRPO on a local causal LM through TRL, from the command line.

The counterpart of TRL's own ``trl grpo`` script (``trl/scripts/grpo.py``) with our trainer:
every field of :class:`tpo_agents.trl.TargetPOConfig` (``--algo tpo``, the default) or of TRL's
``GRPOConfig`` (``--algo grpo``) is a flag (TRL's ``TrlParser``: ``--learning_rate 1e-5`` or
``--learning-rate 1e-5``, and ``--config run.yaml`` for a YAML file of the same names), plus the
script's own flags (:class:`ScriptArguments`):

* ``--model PATH``: a local model folder (``save_pretrained`` output; nothing is downloaded);
* ``--dataset``: a ``tpo_gym`` prompt environment id (``TinyArithmetic-v0``, ``Arithmetic-v0``,
  ``GSM8K-v0`` with ``--data_file train.parquet``, ``ReasoningGym-v0`` with
  ``--env_kwargs '{"task": "graph_color"}'``, ...), whose prompts become the dataset and whose
  verifier the default reward; or a local ``.jsonl`` / ``.json`` / ``.parquet`` / ``.csv`` file
  with a prompt column (``--prompt_column``); text prompts become chat messages when the
  tokenizer has a chat template (``--prompt_format``);
* ``--reward_funcs``: ``verifier`` (the environment's), ``answer_match`` (a data file's answer
  column), TRL's built-in rewards, or ``module.function`` (see :data:`BUILTIN_REWARDS`);
* ``--lora_r`` / ``--lora_alpha`` / ``--lora_dropout`` / ``--lora_target_modules``: LoRA (``--lora_r
  0``, the default, trains every weight);
* ``--resume``: continue from the last complete ``checkpoint-N`` in ``--output_dir`` (the same
  command starts a run and continues it after a stop or a kill).

Defaults that differ from TRL's: checkpoints every 50 steps, the last 2 kept (``--save_steps``,
``--save_total_limit``); a log line every step (``--logging_steps 1``); bf16 and gradient
checkpointing only on CUDA. Logging: ``--report_to tensorboard`` (or ``wandb``, when installed).

A run writes, in ``--output_dir``: the checkpoints, the final model (or LoRA adapter), and
``trl_train.json`` (the arguments, the final step, per-step reward and throughput).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from tpo_gym.extras import needs_extra  # noqa: E402

with needs_extra("llm", "zoo.trl_train"):
    from transformers import TrainerCallback

ALGOS = ("tpo", "grpo")
DATA_SUFFIXES = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}
BUILTIN_REWARDS = {
    "verifier": "the prompt environment's verifier (the default with an environment --dataset)",
    "answer_match": "1 when the completion's final answer (tpo_gym's 'auto' extraction: "
    "<answer> tags, '#### N', \\boxed{}, else the last number) equals the data file's "
    "--answer_column (text or number; a GSM8K answer is read after its '####')",
    "accuracy_reward": "TRL's: math_verify equivalence with a 'solution' column (needs math_verify)",
    "reasoning_accuracy_reward": "TRL's: as accuracy_reward, on the text after </think>",
    "think_format_reward": "TRL's: 1 when the completion starts with a <think>...</think> block",
    "get_soft_overlong_punishment": "TRL's: a penalty growing over the last quarter of "
    "max_completion_length",
}
"""The names ``--reward_funcs`` accepts besides ``module.function``."""
NEEDS_COLUMN = {"accuracy_reward": "solution", "reasoning_accuracy_reward": "solution"}


class UsageError(ValueError):
    """A bad command-line value; the command line exits 2 with this message."""


@dataclass
class ScriptArguments:
    """The script's own flags; the trainer's are the config dataclass's fields."""

    model: str = field(
        metadata={
            "help": "Local model folder (config.json, weights, tokenizer; save_pretrained output).",
            "aliases": ["--model_name_or_path"],
        }
    )
    dataset: str = field(
        metadata={
            "help": "A tpo_gym prompt environment id (TinyArithmetic-v0, Arithmetic-v0, GSM8K-v0, "
            "ReasoningGym-v0, ...) or a local .jsonl/.json/.parquet/.csv file with a prompt column."
        }
    )
    algo: Literal["tpo", "grpo"] = field(
        default="tpo",
        metadata={"help": "tpo: tpo_agents.trl.TargetPOTrainer; grpo: TRL's GRPOTrainer."},
    )
    env_kwargs: str | None = field(
        default=None,
        metadata={
            "help": 'JSON keyword arguments of the environment, e.g. \'{"task": "graph_color"}\'.'
        },
    )
    data_file: str | None = field(
        default=None,
        metadata={
            "help": "The environment's local data file (path=...), e.g. GSM8K-v0's .jsonl/.parquet."
        },
    )
    prompt_column: str = field(
        default="prompt", metadata={"help": "A data file's prompt column (text or chat messages)."}
    )
    prompt_format: Literal["auto", "chat", "text"] = field(
        default="auto",
        metadata={
            "help": "chat: text prompts become a user message (the chat template applies); text: "
            "fed as they are; auto: chat when the tokenizer has a chat template. Message lists stay."
        },
    )
    answer_column: str = field(
        default="answer", metadata={"help": "A data file's reference-answer column (answer_match)."}
    )
    reward_funcs: list[str] | None = field(
        default=None,
        metadata={
            "help": f"Reward functions: {', '.join(BUILTIN_REWARDS)} or module.function "
            "(default: verifier with an environment; a data file needs this flag)."
        },
    )
    lora_r: int = field(default=0, metadata={"help": "LoRA rank (0: no LoRA, train every weight)."})
    lora_alpha: int | None = field(
        default=None, metadata={"help": "LoRA alpha (default 2 x lora_r)."}
    )
    lora_dropout: float = field(default=0.0, metadata={"help": "LoRA dropout."})
    lora_target_modules: list[str] = field(
        default_factory=lambda: ["all-linear"],
        metadata={
            "help": "Module names LoRA adapts (all-linear: every linear layer but the output head)."
        },
    )
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = field(
        default="auto",
        metadata={"help": "Weight dtype when loading the model (auto: the checkpoint's)."},
    )
    resume: bool = field(
        default=False,
        metadata={
            "help": "Continue from the last checkpoint-N in --output_dir (from step 0 if none)."
        },
    )


# --------------------------------------------------------------------------- the parser


def _algo_of(argv: Sequence[str]) -> str:
    """``--algo`` picks the config class, so it is read before the full parser is built."""
    pre = argparse.ArgumentParser(
        prog="python -m zoo.trl_train", add_help=False, allow_abbrev=False
    )
    pre.add_argument("--algo", choices=ALGOS)
    pre.add_argument("--config")
    known, _ = pre.parse_known_args(list(argv))
    if known.algo is None and known.config:
        import yaml

        with open(known.config) as f:
            known.algo = (yaml.safe_load(f) or {}).get("algo")
        if known.algo is not None and known.algo not in ALGOS:
            pre.error(f"algo: {known.algo!r} in {known.config}; expected one of {ALGOS}")
    return known.algo or "tpo"


def make_parser(algo: str = "tpo"):
    """TRL's ``TrlParser`` over :class:`ScriptArguments` and the algorithm's config dataclass."""
    import torch
    from trl import GRPOConfig, TrlParser

    from tpo_agents.trl import TargetPOConfig

    config_cls = TargetPOConfig if algo == "tpo" else GRPOConfig
    parser = TrlParser(
        (ScriptArguments, config_cls),
        prog="python -m zoo.trl_train",
        description=__doc__.split("\n")[0].split(": ", 1)[1],
    )
    for action in parser._actions:
        if action.dest == "output_dir":  # a default folder would mix runs and their checkpoints
            action.required = True
    cuda = torch.cuda.is_available()
    parser.set_defaults(
        save_steps=50,
        save_total_limit=2,
        logging_steps=1,
        bf16=cuda,  # TRL's bf16 default fails or crawls on a CPU
        gradient_checkpointing=cuda,  # on a CPU it only costs time (no memory to save)
    )
    return parser


def parse_args(argv: Sequence[str] | None = None):
    """``(parser, ScriptArguments, config)``; a bad flag exits 2 with argparse's message."""
    argv = list(sys.argv[1:] if argv is None else argv)
    algo = _algo_of(argv)
    while True:
        parser = make_parser(algo)
        try:
            script, config = parser.parse_args_and_config(argv)
        except ValueError as err:  # unknown flags, and the configs' own checks (__post_init__)
            if algo == "grpo" and any(a.lstrip("-").startswith("tpo") for a in argv):
                parser.error("--tpo_eta / --tpo_anchor are TPO settings: they need --algo tpo")
            parser.error(str(err))
        if script.algo == algo:
            return parser, script, config
        algo = script.algo  # given in a form the first look missed (an abbreviation: --alg)


# --------------------------------------------------------------------------- model, data, rewards


def check_model_folder(path: str) -> None:
    """A local folder with ``config.json``, or a :class:`UsageError` saying how to get one."""
    from tpo_agents.llm.loading import GET_A_MODEL_FOLDER

    folder = Path(path)
    if not folder.is_dir():
        raise UsageError(
            f"--model {path!r}: no such folder; expected a local model folder (nothing is "
            f"downloaded); {GET_A_MODEL_FOLDER}"
        )
    if not (folder / "config.json").is_file():
        raise UsageError(
            f"--model {path!r} holds no config.json; expected a model folder written by "
            "save_pretrained (config.json, weights, tokenizer files)"
        )


def prompt_env_ids() -> list[str]:
    """The registered ids of ``tpo_gym``'s prompt environments."""
    import gymnasium as gym

    import tpo_gym  # noqa: F401  (registers the ids)

    return sorted(
        env_id
        for env_id, spec in gym.registry.items()
        if isinstance(spec.entry_point, str) and spec.entry_point.startswith("tpo_gym.prompts")
    )


def _env_kwargs(script: ScriptArguments) -> dict:
    kwargs: dict = {}
    if script.env_kwargs:
        try:
            kwargs = json.loads(script.env_kwargs)
        except json.JSONDecodeError as err:
            raise UsageError(f"--env_kwargs {script.env_kwargs!r}: not JSON ({err.msg})") from None
        if not isinstance(kwargs, dict):
            raise UsageError(
                f"--env_kwargs {script.env_kwargs!r}: expected a JSON object, e.g. '{{\"size\": 100}}'"
            )
    if script.data_file is not None:
        if "path" in kwargs and kwargs["path"] != script.data_file:
            raise UsageError("--data_file and --env_kwargs' path name different files; give one")
        kwargs["path"] = script.data_file
    return kwargs


def load_prompts(script: ScriptArguments, chat: bool):
    """``(dataset, env)``: the training prompts, and the prompt environment they come from
    (``None`` for a data file). ``chat``: text prompts as a user message (TRL then applies the
    chat template; it feeds text prompts as they are)."""
    import gymnasium as gym

    from tpo_agents.trl.prompts import prompt_env_dataset
    from tpo_gym.prompts import PromptEnv

    name = script.dataset
    env_ids = prompt_env_ids()
    if name in gym.registry:
        try:
            env = gym.make(name, **_env_kwargs(script))
        except (ValueError, TypeError, FileNotFoundError, ImportError) as err:
            raise UsageError(f"--dataset {name}: {err}") from None
        if not isinstance(env.unwrapped, PromptEnv):
            raise UsageError(
                f"--dataset {name!r} is a Gymnasium environment but not a prompt environment; "
                f"expected one of {', '.join(env_ids)} or a local data file"
            )
        return prompt_env_dataset(env, chat=chat), env
    suffix = Path(name).suffix.lower()
    if suffix not in DATA_SUFFIXES:
        raise UsageError(
            f"--dataset {name!r} is neither a registered prompt environment id (one of "
            f"{', '.join(env_ids)}) nor a local data file ({', '.join(DATA_SUFFIXES)})"
        )
    if not Path(name).is_file():
        raise UsageError(f"--dataset {name!r}: no such file (a local {suffix} file was expected)")
    if script.env_kwargs or script.data_file:
        raise UsageError(
            "--env_kwargs / --data_file configure an environment --dataset, not a data file"
        )
    from datasets import Dataset

    reader = {"json": Dataset.from_json, "parquet": Dataset.from_parquet, "csv": Dataset.from_csv}
    try:
        dataset = reader[DATA_SUFFIXES[suffix]](name)
    except Exception as err:  # datasets/pyarrow raise many types for an unreadable file
        raise UsageError(f"--dataset {name!r}: not a readable {suffix} table ({err})") from None
    column = script.prompt_column
    if column not in dataset.column_names:
        raise UsageError(
            f"--dataset {name!r} has no column {column!r} (--prompt_column); its columns: "
            f"{', '.join(dataset.column_names)}"
        )
    if column != "prompt":
        if "prompt" in dataset.column_names:
            dataset = dataset.remove_columns("prompt")  # TRL reads "prompt": the chosen one wins
        dataset = dataset.rename_column(column, "prompt")
    if len(dataset) == 0:
        raise UsageError(f"--dataset {name!r} holds no rows")
    if chat:
        dataset = dataset.map(_as_chat)
    return dataset, None


def _as_chat(row: dict) -> dict:
    prompt = row["prompt"]
    return {"prompt": [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt}


class AnswerMatch:
    """Reward ``answer_match``: 1.0 when a completion's final answer equals the row's answer.

    The completion's answer is extracted with ``tpo_gym``'s ``"auto"`` rule (``<answer>``
    tags, then ``#### N``, ``\\boxed{}``, the last number); the reference is the answer column
    as text, or the number after ``####`` in a GSM8K-style answer. Equal as stripped text or as
    numbers (``1,000`` = ``1000.0``).
    """

    __name__ = "answer_match"

    def __init__(self, column: str = "answer"):
        self.column = column

    def __call__(self, completions: list, **kwargs: Any) -> list[float]:
        from tpo_gym.prompts.extraction import extract_answer
        from tpo_gym.prompts.tasks import matches_expected

        scores = []
        for completion, reference in zip(completions, kwargs[self.column]):
            text = completion[-1]["content"] if isinstance(completion, list) else completion
            reference = str(reference)
            if "####" in reference:
                reference = extract_answer(reference, "hashes") or reference
            answer = extract_answer(text, "auto")
            scores.append(float(answer is not None and matches_expected(answer, reference)))
        return scores


def _import_reward(name: str) -> Callable:
    module_name, _, attr = name.rpartition(".")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # a rewards.py beside the command, as TRL's script allows
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise UsageError(
            f"--reward_funcs {name!r}: cannot import module {module_name!r} ({err})"
        ) from None
    func = getattr(module, attr, None)
    if not callable(func):
        raise UsageError(
            f"--reward_funcs {name!r}: module {module_name!r} has no function {attr!r}"
        )
    return func


def resolve_rewards(script: ScriptArguments, config, env, columns: Sequence[str]) -> list:
    """The reward functions that ``--reward_funcs`` names, checked against the dataset."""
    names = script.reward_funcs or (["verifier"] if env is not None else None)
    if not names:
        raise UsageError(
            f"--dataset {script.dataset!r} is a data file, which has no verifier: pass --reward_funcs "
            f"(one or more of {', '.join(n for n in BUILTIN_REWARDS if n != 'verifier')}, or "
            "module.function)"
        )
    funcs = []
    for name in names:
        column = script.answer_column if name == "answer_match" else NEEDS_COLUMN.get(name)
        if column is not None and column not in columns:
            given = ", ".join(c for c in columns if c != "prompt") or "none"
            raise UsageError(
                f"--reward_funcs {name} needs the column {column!r}; the columns --dataset "
                f"{script.dataset!r} gives the reward functions besides the prompt: {given}"
            )
        if name == "verifier":
            if env is None:
                raise UsageError(
                    f"--reward_funcs verifier: --dataset {script.dataset!r} is a data file, not a "
                    "prompt environment; use answer_match (an answer column) or module.function"
                )
            from tpo_agents.trl.prompts import PromptEnvReward

            funcs.append(PromptEnvReward(env))
        elif name == "answer_match":
            funcs.append(AnswerMatch(script.answer_column))
        elif name in BUILTIN_REWARDS:
            if name in NEEDS_COLUMN and importlib.util.find_spec("math_verify") is None:
                raise UsageError(
                    f"--reward_funcs {name}: TRL's {name} needs math_verify (pip install math-verify)"
                )
            from trl import rewards

            if name == "get_soft_overlong_punishment":
                length = config.max_completion_length
                funcs.append(rewards.get_soft_overlong_punishment(length, max(1, length // 4)))
            else:
                funcs.append(getattr(rewards, name))
        elif "." in name:
            funcs.append(_import_reward(name))
        else:
            raise UsageError(
                f"--reward_funcs {name!r}: unknown reward; expected one of "
                f"{', '.join(BUILTIN_REWARDS)} or an importable module.function"
            )
    if config.reward_weights is not None and len(config.reward_weights) != len(funcs):
        raise UsageError(
            f"--reward_weights has {len(config.reward_weights)} values for {len(funcs)} reward functions"
        )
    return funcs


def lora_config(
    r: int, alpha: int | None = None, dropout: float = 0.0, target_modules=("all-linear",)
):
    """peft's ``LoraConfig`` for a causal LM (``None`` when ``r == 0``: full fine-tuning)."""
    if r < 0:
        raise UsageError(f"--lora_r must be >= 0 (0: no LoRA); got {r}")
    if r == 0:
        return None
    from peft import LoraConfig

    targets = list(target_modules)
    return LoraConfig(
        r=r,
        lora_alpha=alpha if alpha is not None else 2 * r,
        lora_dropout=dropout,
        # peft takes "all-linear" as a string only; in a list it would be a module name
        target_modules="all-linear" if targets == ["all-linear"] else targets,
        task_type="CAUSAL_LM",
    )


def check_report_to(report_to: Sequence[str]) -> None:
    """Every ``--report_to`` integration is installed (else transformers fails mid-set-up)."""
    from transformers.integrations import get_available_reporting_integrations

    available = get_available_reporting_integrations()
    for name in report_to:
        if name not in available:
            raise UsageError(
                f"--report_to {name}: not installed (pip install {name}); installed: "
                f"{', '.join(available) or 'none'} (or 'none')"
            )


def last_complete_checkpoint(output_dir: str | Path) -> tuple[str | None, list[str]]:
    """``(path, skipped)``: the newest ``checkpoint-N`` of ``output_dir`` that holds its
    ``trainer_state.json`` (the Trainer writes it last, so a run killed while saving leaves a
    folder without it), and the newer incomplete folders passed over."""
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

    out = Path(output_dir)
    found = []
    for folder in out.glob(f"{PREFIX_CHECKPOINT_DIR}-*") if out.is_dir() else ():
        step = folder.name[len(PREFIX_CHECKPOINT_DIR) + 1 :]
        if folder.is_dir() and step.isdigit():
            found.append((int(step), folder))
    skipped = []
    for _, folder in sorted(found, reverse=True):
        if (folder / "trainer_state.json").is_file():
            return str(folder), skipped
        skipped.append(str(folder))
    return None, skipped


def resume_checkpoint(script: ScriptArguments, config) -> str | None:
    """The checkpoint to resume from: with ``--resume`` the last complete one in
    ``--output_dir`` (``None`` when there is none yet, so the same command starts a run and
    continues it after a stop)."""
    if config.resume_from_checkpoint:
        if not Path(config.resume_from_checkpoint, "trainer_state.json").is_file():
            raise UsageError(
                f"--resume_from_checkpoint {config.resume_from_checkpoint!r}: not a checkpoint "
                "folder (expected checkpoint-N with a trainer_state.json)"
            )
        return config.resume_from_checkpoint
    last, skipped = last_complete_checkpoint(config.output_dir)
    if script.resume:
        for folder in skipped:
            print(f"trl_train: skipping {folder}: incomplete (the run stopped while saving it)")
        return last
    if last is not None or skipped:
        raise UsageError(
            f"--output_dir {config.output_dir!r} already holds "
            f"{Path(last or skipped[0]).name}: pass --resume to continue from its last "
            "checkpoint, or choose another --output_dir"
        )
    return None


# --------------------------------------------------------------------------- throughput


class _Counted:
    """A reward function that also counts the completions (and their tokens) it scores: TRL
    scores each generated completion once, so this counts generation without touching it."""

    def __init__(self, func: Callable, meter: ThroughputMeter):
        from trl.trainer.utils import get_callable_name

        self.func, self.meter = func, meter
        self.__name__ = get_callable_name(func)  # TRL logs rewards/<name>

    def __call__(self, *args: Any, completion_ids=None, **kwargs: Any):
        self.meter.count(completion_ids)
        return self.func(*args, completion_ids=completion_ids, **kwargs)


class _CountedAsync(_Counted):
    async def __call__(self, *args: Any, completion_ids=None, **kwargs: Any):
        self.meter.count(completion_ids)
        return await self.func(*args, completion_ids=completion_ids, **kwargs)


class ThroughputMeter(TrainerCallback):
    """A ``TrainerCallback`` recording, per optimizer step: wall seconds (generation, scoring
    and the update), completions generated, generated tokens, and TRL's logged train reward.

    Wrap the reward functions with :meth:`counting` so that generation is counted. Counts are
    this process's (one GPU: the run's). :meth:`summary` leaves out the first step (model
    warm-up, vLLM start-up) when there are more.

    :param printer: called with a line per logged step (e.g. ``print``), or ``None``.
    """

    def __init__(self, printer: Callable[[str], None] | None = None, label: str = ""):
        self.steps: list[dict] = []
        self.printer, self.label = printer, label
        self._start = 0.0
        self._completions = self._tokens = 0

    def counting(self, reward_funcs: list) -> list:
        """The reward functions with the first one counting (and otherwise unchanged)."""
        from trl.trainer.utils import is_async_callable

        first, *rest = reward_funcs
        wrapper = _CountedAsync if is_async_callable(first) else _Counted
        return [wrapper(first, self), *rest]

    def count(self, completion_ids) -> None:
        if completion_ids is not None:
            self._completions += len(completion_ids)
            self._tokens += sum(len(ids) for ids in completion_ids)

    def on_step_begin(self, args, state, control, **kwargs):
        self._start = time.perf_counter()
        self._completions = self._tokens = 0

    def on_step_end(self, args, state, control, **kwargs):
        seconds = time.perf_counter() - self._start
        self.steps.append(
            {
                "step": state.global_step,
                "seconds": seconds,
                "completions": self._completions,
                "generated_tokens": self._tokens,
                "reward": None,
            }
        )

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not (
            logs and "reward" in logs and self.steps and self.steps[-1]["step"] == state.global_step
        ):
            return
        row = self.steps[-1]
        row["reward"] = float(logs["reward"])
        if self.printer is not None and state.is_world_process_zero:
            self.printer(
                f"{self.label}step {row['step']}/{state.max_steps}: reward {row['reward']:.3f}, "
                f"{row['seconds']:.2f} s, {row['completions']} completions, "
                f"{row['generated_tokens']} tokens ({row['generated_tokens'] / row['seconds']:.1f} tokens/s)"
            )

    def summary(self) -> dict:
        """Totals and rates over the steps after the first (all of them if only one)."""
        if not self.steps:
            return {"steps": 0}
        measured = self.steps[1:] if len(self.steps) > 1 else self.steps
        seconds = sum(s["seconds"] for s in measured)
        tokens = sum(s["generated_tokens"] for s in measured)
        completions = sum(s["completions"] for s in measured)
        return {
            "steps": len(self.steps),
            "measured_steps": [measured[0]["step"], measured[-1]["step"]],
            "first_step_seconds": self.steps[0]["seconds"],
            "seconds_per_step": seconds / len(measured),
            "generated_tokens_per_s": tokens / seconds,
            "completions_per_s": completions / seconds,
            "generated_tokens": sum(s["generated_tokens"] for s in self.steps),
            "completions": sum(s["completions"] for s in self.steps),
        }


def throughput_line(summary: dict) -> str:
    """One line: generated tokens/s, completions/s, s/step (and over which steps)."""
    if not summary.get("steps"):
        return "no step ran"
    first, last = summary["measured_steps"]
    return (
        f"{summary['generated_tokens_per_s']:.1f} generated tokens/s, "
        f"{summary['completions_per_s']:.2f} completions/s, {summary['seconds_per_step']:.2f} s/step "
        f"(steps {first}-{last}; first step {summary['first_step_seconds']:.2f} s)"
    )


# --------------------------------------------------------------------------- main


@needs_extra("llm", "python -m zoo.trl_train")
def main(argv: Sequence[str] | None = None, callbacks: Sequence[Any] = ()) -> dict:
    """Parse, check, train, save; return the summary written to ``OUTPUT_DIR/trl_train.json``.

    :param callbacks: extra ``TrainerCallback`` objects (tests stop a run with one).
    """
    parser, script, config = parse_args(argv)
    try:
        return _train(script, config, callbacks)
    except UsageError as err:
        parser.error(str(err))


def _train(script: ScriptArguments, config, callbacks: Sequence[Any]) -> dict:
    check_model_folder(script.model)
    check_report_to(config.report_to)
    peft = lora_config(
        script.lora_r, script.lora_alpha, script.lora_dropout, script.lora_target_modules
    )
    resume_from = resume_checkpoint(script, config)

    from transformers import AutoTokenizer
    from trl import GRPOTrainer

    from tpo_agents.trl import TargetPOTrainer

    tokenizer = AutoTokenizer.from_pretrained(script.model)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    chat = script.prompt_format == "chat" or (
        script.prompt_format == "auto" and tokenizer.chat_template is not None
    )
    if chat and tokenizer.chat_template is None:
        raise UsageError(
            f"--prompt_format chat: the tokenizer of {script.model!r} has no chat template"
        )
    dataset, env = load_prompts(script, chat=chat)
    reward_funcs = resolve_rewards(script, config, env, dataset.column_names)
    if script.dtype != "auto":
        kwargs = config.model_init_kwargs or {}
        kwargs = json.loads(kwargs) if isinstance(kwargs, str) else dict(kwargs)
        config.model_init_kwargs = {**kwargs, "dtype": script.dtype}

    meter = ThroughputMeter()
    trainer_cls = TargetPOTrainer if script.algo == "tpo" else GRPOTrainer
    trainer = trainer_cls(
        model=script.model,
        reward_funcs=meter.counting(reward_funcs),
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=peft,
        callbacks=[meter, *callbacks],
    )
    main_process = trainer.is_world_process_zero()
    if main_process and script.resume:
        print(
            f"trl_train: resuming from {resume_from}"
            if resume_from
            else f"trl_train: --resume: no checkpoint in {config.output_dir} yet, starting at step 0",
            flush=True,
        )
    trainer.train(resume_from_checkpoint=resume_from)
    trainer.save_model(config.output_dir)

    rewards = [s["reward"] for s in meter.steps if s["reward"] is not None]
    summary = {
        "algo": script.algo,
        "model": script.model,
        "dataset": script.dataset,
        "reward_funcs": [f.__name__ for f in trainer.reward_funcs if hasattr(f, "__name__")],
        "global_step": trainer.state.global_step,
        "max_steps": trainer.state.max_steps,
        "resumed_from": resume_from,
        "steps_run": [s["step"] for s in meter.steps],
        "reward": [s["reward"] for s in meter.steps],
        "throughput": meter.summary(),
        "step_log": meter.steps,
        "script_args": asdict(script),
        "config": json.loads(config.to_json_string()),
    }
    if main_process:
        Path(config.output_dir, "trl_train.json").write_text(json.dumps(summary, indent=1) + "\n")
        last = f", last logged reward {rewards[-1]:.3f}" if rewards else ""
        print(
            f"trl_train: {script.algo.upper()} at step {summary['global_step']}{last}; "
            f"{throughput_line(summary['throughput'])}; saved in {config.output_dir}",
            flush=True,
        )
    if hasattr(trainer, "end"):  # transformers >= 5.18: closes the trackers (tensorboard, wandb)
        trainer.end()
    return summary


if __name__ == "__main__":
    from zoo.cli import exit_on_missing_extra

    with exit_on_missing_extra("python -m zoo.trl_train"):
        main()
