"""Sample completions in the logs (the agents' ``log_completions_every``), as TRL logs them.

Every ``log_completions_every`` rollouts the agent writes the rollout's (prompt, completion,
score) rows to

* tensorboard, as a markdown table under the text tag ``completions`` (SB3's logger has no
  text type, so the table goes straight to ``TensorBoardOutputFormat.writer.add_text``),
  at step ``num_timesteps``;
* ``completions.jsonl`` in the logger folder (``model.logger.get_dir()``), one JSON object
  per completion: ``rollout``, ``timesteps``, ``group``, ``prompt``, ``completion``,
  ``score``.

The prompt is the model's input text (chat template and system prompt applied), the
completion the text the env scored.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from stable_baselines3.common.logger import Logger, TensorBoardOutputFormat

__all__ = ["COMPLETIONS_FILE", "COMPLETIONS_TAG", "completion_records", "log_completions"]

COMPLETIONS_FILE = "completions.jsonl"
"""The file in the logger folder that collects the logged completions."""

COMPLETIONS_TAG = "completions"
"""The tensorboard text tag of the completions tables."""


def completion_records(policy, batch) -> list[dict[str, Any]]:
    """One ``{"group", "prompt", "completion", "score"}`` per completion of ``batch`` (an
    :class:`~tpo_agents.rollout.batches.LMGroupBatch`), rows in the batch's order."""
    K = batch.group_size
    tokenizer = policy.tokenizer
    prompts = [
        tokenizer.decode(ids[mask].tolist(), skip_special_tokens=True)
        for ids, mask in zip(batch.prompt_ids[::K], batch.prompt_mask[::K].bool())
    ]
    texts = policy.decode(batch.completion_ids, batch.completion_mask.bool())
    scores = batch.scores.detach().cpu()
    return [
        {
            "group": g,
            "prompt": prompts[g],
            "completion": texts[g * K + k],
            "score": float(scores[g, k]),
        }
        for g in range(batch.n_groups)
        for k in range(K)
    ]


def _cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", "<br>")


def markdown_table(records: list[dict[str, Any]]) -> str:
    """The records as a markdown table (tensorboard's text plugin renders it)."""
    lines = ["| group | prompt | completion | score |", "|---:|---|---|---:|"]
    lines += [
        f"| {r['group']} | {_cell(r['prompt'])} | {_cell(r['completion'])} | {r['score']:.4g} |"
        for r in records
    ]
    return "\n".join(lines)


def log_completions(
    logger: Logger, records: list[dict[str, Any]], timesteps: int, rollout: int
) -> Path | None:
    """Write ``records`` to the logger's tensorboard writer (if any) and append them to
    ``completions.jsonl`` in its folder; returns that file (None: the logger has no folder)."""
    for output in logger.output_formats:
        if isinstance(output, TensorBoardOutputFormat):
            output.writer.add_text(COMPLETIONS_TAG, markdown_table(records), global_step=timesteps)
            output.writer.flush()
    folder = logger.get_dir()
    if folder is None:
        return None
    path = Path(folder) / COMPLETIONS_FILE
    with path.open("a", encoding="utf-8") as file:
        for record in records:
            row = {"rollout": rollout, "timesteps": timesteps, **record}
            file.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path
