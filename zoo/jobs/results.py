"""Summaries, JSON, PNG figures and markdown tables for the reproduction experiments.

A result is ``{"experiment": name, "config": {...}, "methods": {key: summary}}`` with
lower-case method keys. Each summary holds ``final_error`` (mean over seeds),
``final_error_se``, ``steps_to_1pct`` (first recorded step whose seed-mean error is
below 0.01, or None), ``mean_misalignment`` (when measured) and the mean curves.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from tpo_agents.atomic import write_json_atomic

METHOD_LABELS = {
    "ce": "CE (oracle)",
    "pg": "PG",
    "dg": "DG",
    "grpo": "GRPO",
    "tpo": "TPO",
    "ppo": "PPO",
    "grpo_no_kl": "GRPO (no KL)",
    "tpo_no_anchor": "TPO (no anchor)",
    "group_pg": "Group PG",
    "tpo_token": "TPO (token)",
    "grpo_token": "GRPO (token)",
}


def standard_error(values: np.ndarray, axis: int = 0) -> np.ndarray:
    """Standard error of the mean over ``axis`` (0 when there is a single seed)."""
    n = values.shape[axis]
    if n < 2:
        return np.zeros_like(values.mean(axis=axis))
    return values.std(axis=axis, ddof=1) / math.sqrt(n)


def first_step_below(mean_curve: np.ndarray, steps: Sequence[int], threshold: float) -> int | None:
    """First entry of ``steps`` whose mean error is strictly below ``threshold``."""
    below = np.flatnonzero(np.asarray(mean_curve) < threshold)
    return int(steps[below[0]]) if below.size else None


def summarize(
    error: np.ndarray,
    steps: Sequence[int],
    misalignment: np.ndarray | None = None,
    thresholds: Sequence[float] = (0.01,),
    final_window: int | None = None,
) -> dict:
    """Summary of per-seed curves ``error[seed, i]`` recorded at ``steps[i]``.

    ``final_error`` is the seed-mean of the last recorded error, or, with
    ``final_window=w``, of each seed's mean over its last ``w`` records (all of them
    when fewer); ``final_error_se`` is the standard error of the same per-seed values.
    """
    error = np.asarray(error, dtype=float)
    if error.ndim != 2 or error.shape[1] != len(steps):
        raise ValueError(
            f"error must have shape [n_seeds, {len(steps)}] to match steps; got {error.shape}"
        )
    mean = error.mean(0)
    se = standard_error(error)
    if final_window is None:
        final, final_se = mean[-1], se[-1]
    else:
        if final_window < 1:
            raise ValueError(f"final_window must be a positive integer or None; got {final_window!r}")
        per_seed = error[:, -final_window:].mean(1)
        final, final_se = per_seed.mean(), standard_error(per_seed)
    out = {
        "n_seeds": int(error.shape[0]),
        "final_error": float(final),
        "final_error_se": float(final_se),
    }
    for th in thresholds:
        out[f"steps_to_{_pct_name(th)}"] = first_step_below(mean, steps, th)
    curves = {"steps": [int(s) for s in steps], "error_mean": mean.tolist(), "error_se": se.tolist()}
    if misalignment is not None:
        misalignment = np.asarray(misalignment, dtype=float)
        out["mean_misalignment"] = float(misalignment.mean())
        curves["misalignment_mean"] = misalignment.mean(0).tolist()
        curves["misalignment_se"] = standard_error(misalignment).tolist()
    out["curves"] = curves
    return out


def _pct_name(threshold: float) -> str:
    pct = threshold * 100
    return f"{pct:g}pct".replace(".", "_")


def plot_result(result: dict, path: Path, log_x: bool = False) -> None:
    """Error (log scale) and, when measured, misalignment curves: mean +- s.e. bands."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = result["methods"]
    has_mis = any("misalignment_mean" in m["curves"] for m in methods.values())
    fig, axes = plt.subplots(1, 2 if has_mis else 1, figsize=(11 if has_mis else 6, 4), squeeze=False)
    ax_err = axes[0, 0]
    for key, m in methods.items():
        c = m["curves"]
        steps = np.asarray(c["steps"])
        mean, se = np.asarray(c["error_mean"]), np.asarray(c["error_se"])
        (line,) = ax_err.plot(steps, mean, label=METHOD_LABELS.get(key, key))
        ax_err.fill_between(steps, _log_floor(mean, se), mean + se, alpha=0.2, color=line.get_color())
        # The oracle's own misalignment is 0 up to rounding: nothing to draw on a log axis.
        if has_mis and "misalignment_mean" in c and max(c["misalignment_mean"]) > 1e-9:
            mm, mse = np.asarray(c["misalignment_mean"]), np.asarray(c["misalignment_se"])
            ms = steps[-len(mm) :]  # misalignment is measured per update, from step 1
            axes[0, 1].plot(ms, mm, label=METHOD_LABELS.get(key, key), color=line.get_color())
            axes[0, 1].fill_between(ms, _log_floor(mm, mse), mm + mse, alpha=0.2, color=line.get_color())
    ax_err.set_yscale("log")
    ax_err.set_xlabel("step")
    ax_err.set_ylabel("error")
    for threshold in _thresholds(methods):
        ax_err.axhline(threshold, color="grey", lw=0.8, ls=":")
    ax_err.legend()
    ax_err.set_title(result["experiment"])
    if has_mis:
        axes[0, 1].set_yscale("log")
        axes[0, 1].set_xlabel("step")
        axes[0, 1].set_ylabel("misalignment 1 - cos(g, g_oracle)")
    if log_x:
        for ax in axes.flat:
            ax.set_xscale("log")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _thresholds(methods: dict) -> list[float]:
    """The error thresholds of the summaries' ``steps_to_*`` keys (1% when none)."""
    found = set()
    for m in methods.values():
        for key in m:
            if key.startswith("steps_to_") and key.endswith("pct"):
                try:
                    found.add(float(key[len("steps_to_") : -3].replace("_", ".")) / 100)
                except ValueError:
                    pass
    return sorted(found) or [0.01]


def _log_floor(mean: np.ndarray, se: np.ndarray) -> np.ndarray:
    """Lower edge of a mean - s.e. band that stays positive on a log axis."""
    return np.maximum(mean - se, mean / 10)


def markdown_table(result: dict, paper_notes: str = "", paper_values: dict | None = None) -> str:
    """A markdown page: config, one row per method, and what the paper reports.

    ``paper_values``: the paper's numbers, ``{method: {summary key: text}}`` (keys
    ``final_error`` or ``steps_to_*``); each is shown beside ours as ``ours (paper)``.
    """
    methods = result["methods"]
    paper_values = paper_values or {}
    step_keys = sorted({k for m in methods.values() for k in m if k.startswith("steps_to_")})
    has_mis = any("mean_misalignment" in m for m in methods.values())
    head = ["method", "final error (mean +- s.e.)"] + [k.replace("_", " ") for k in step_keys]
    if has_mis:
        head.append("mean misalignment")
    lines = [f"# {result['experiment']}", "", "Config: `" + json.dumps(result["config"]) + "`", ""]
    if paper_values:
        lines += ["Cells are `ours (paper)` where the paper reports a number.", ""]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key, m in methods.items():
        paper = paper_values.get(key, {})

        def cell(text: str, name: str, paper: dict = paper) -> str:
            return f"{text} ({paper[name]})" if name in paper else text

        row = [
            METHOD_LABELS.get(key, key),
            cell(f"{m['final_error']:.4g} +- {m['final_error_se']:.2g}", "final_error"),
        ]
        row += [cell("-" if m.get(k) is None else str(m[k]), k) for k in step_keys]
        if has_mis:
            row.append(f"{m['mean_misalignment']:.4f}" if "mean_misalignment" in m else "")
        lines.append("| " + " | ".join(row) + " |")
    if paper_notes:
        lines += ["", "Paper: " + paper_notes]
    return "\n".join(lines) + "\n"


def write_outputs(
    result: dict,
    out_dir: Path,
    paper_notes: str = "",
    log_x: bool = False,
    paper_values: dict | None = None,
) -> dict[str, Path]:
    """Write ``<name>.json``, ``<name>.png`` and ``<name>.md`` into ``out_dir``."""
    out_dir = Path(out_dir)
    name = result["experiment"]
    paths = {ext: out_dir / f"{name}.{ext}" for ext in ("json", "png", "md")}
    write_json_atomic(paths["json"], result)
    plot_result(result, paths["png"], log_x=log_x)
    paths["md"].write_text(markdown_table(result, paper_notes, paper_values))
    return paths
