"""The markdown page of a Token Reversal result: our numbers beside the paper's.

The tables follow the paper's layout (docs/algorithms.md, section 10): each cell is ``ours (paper)``, the
paper's value from :mod:`zoo.paper.numbers`; then the per-seed statistics (final error
+- s.e., take-off, steps to 1%, seconds per iteration).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping

import numpy as np

from zoo.paper import numbers as paper_numbers
from zoo.paper.token.experiments import TokenExperiment, setting_order
from zoo.paper.token.methods import label


def _paper_values(exp: TokenExperiment, result: dict, metric: str) -> dict:
    if exp.name == "terminal" and result["config"].get("match") == "interactions":
        return paper_numbers.TERMINAL["interactions"] if metric == "final_error" else {}
    return exp.paper.get(metric, {})


def _fmt(summary: dict, metric: str) -> str:
    if metric == "final_error":
        return f"{100 * summary['final_error']:.1f}"
    value = summary.get("steps_to_1pct")
    return "-" if value is None else str(value)


# A method not run at a setting (a --cached-only report of a partial sweep) shows this.
NOT_RUN = "not run"


def _cell(summary: dict | None, metric: str, paper: Mapping, key: tuple[str, str]) -> str:
    ours = NOT_RUN if summary is None else _fmt(summary, metric)
    return f"{ours} ({paper[key]})" if key in paper else ours


def grid_table(result: dict, metric: str, paper: Mapping, settings_rows: bool = False) -> list[str]:
    """A markdown table of ``metric``: methods x settings (or transposed), ``ours (paper)``."""
    methods = list(result["methods"])
    settings = setting_order(result)

    def cell(m: str, s: str) -> str:
        return _cell(result["methods"][m].get(s), metric, paper, (m, s))

    if settings_rows:
        head = ["setting"] + [label(m) for m in methods]
        rows = [[s] + [cell(m, s) for m in methods] for s in settings]
    else:
        head = ["method"] + settings
        rows = [[label(m)] + [cell(m, s) for s in settings] for m in methods]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return lines + ["| " + " | ".join(r) + " |" for r in rows]


def _per_method_table(result: dict, value: Callable[[dict], str]) -> list[str]:
    settings = setting_order(result)
    lines = ["| method | " + " | ".join(settings) + " |", "|" + "---|" * (len(settings) + 1)]
    for m, per in result["methods"].items():
        cells = (value(per[s]) if s in per else NOT_RUN for s in settings)
        lines.append(f"| {label(m)} | " + " | ".join(cells) + " |")
    return lines


def _mean_or_dash(values: Iterable[int | None]) -> str:
    values = list(values)
    hit = [v for v in values if v is not None]
    if not hit:
        return "-"
    text = f"{np.mean(hit):.0f}"
    return text if len(hit) == len(values) else f"{text} ({len(hit)}/{len(values)} seeds)"


def substrate_line(cfg: Mapping) -> str:
    """Which substrate, initialization and optimizer made a result (docs/substrates.md)."""
    line = (f"Substrate: {cfg.get('substrate', 'not recorded')} (init {cfg.get('init', 'not recorded')}, "
            f"optimizer {cfg.get('optimizer', 'not recorded')}).")
    return f"{line} {cfg['substrate_note']}" if cfg.get("substrate_note") else line


def seeds_short_note(result: dict) -> str:
    """`` (fewer so far: GRPO at H=10 3)`` for the cells of a sweep still running that have
    fewer seeds than asked; empty when every cell has them all."""
    asked = result["config"]["seeds"]
    short = [
        f"{label(method)} at {setting} {cell['n_seeds']}"
        for method, per in result["methods"].items()
        for setting, cell in per.items()
        if isinstance(cell, dict) and cell.get("n_seeds", asked) < asked
    ]
    return f" (fewer so far: {', '.join(short)})" if short else ""


def markdown(result: dict, exp: TokenExperiment) -> str:
    cfg = result["config"]
    metric_names = {
        "final_error": f"final error % (mean of the last {cfg['final_window']} iterations)",
        "steps_to_1pct": "steps to 1% error (seed-mean curve)",
    }
    lines = [f"# {result['experiment']}", "", exp.notes, ""]
    lines.append(
        f"Ours: {cfg['seeds']} seeds{seeds_short_note(result)}, {cfg['episodes']} iterations, "
        f"match={cfg['match']}; cells are `ours (paper)`. Error = 1 - mean return of the training batch."
    )
    lines += ["", substrate_line(cfg), ""]
    settings_rows = exp.layout == "settings_rows"
    metrics = [exp.primary] + [m for m in ("final_error", "steps_to_1pct") if m != exp.primary]
    for metric in metrics:
        lines += [f"## {metric_names[metric]}", ""]
        lines += grid_table(result, metric, _paper_values(exp, result, metric), settings_rows)
        lines.append("")
    lines += ["## final error % +- s.e. over seeds", ""]
    lines += _per_method_table(
        result, lambda s: f"{100 * s['final_error']:.2f} +- {100 * s['final_error_se']:.2f}"
    )
    lines += [
        "",
        f"## take-off iteration (first error < {cfg['takeoff_error']}), mean over seeds",
        "",
    ]
    lines += _per_method_table(result, lambda s: _mean_or_dash(s["takeoff_iteration_per_seed"]))
    lines += ["", "## steps to 1% per seed, mean over the seeds that got there", ""]
    lines += _per_method_table(result, lambda s: _mean_or_dash(s["steps_to_1pct_per_seed"]))
    lines += ["", "## seconds per iteration (mean over seeds; one torch thread per job)", ""]
    lines += _per_method_table(result, lambda s: f"{s['seconds_per_iteration']:.3f}")
    lines += [
        "",
        "Config: `" + json.dumps({k: v for k, v in cfg.items() if k != "settings"}) + "`",
        "",
    ]
    return "\n".join(lines)
