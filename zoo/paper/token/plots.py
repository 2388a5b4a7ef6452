"""The figure of a Token Reversal result: error and gradient-norm curves per setting, and for
a sweep experiment the final error against the swept setting."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from zoo.paper.token.experiments import TOKEN_EXPERIMENTS, base_experiment, setting_order
from zoo.paper.token.methods import label


def _band(ax, x, mean, se, floor: float, color) -> None:
    """Shade mean +- s.e., floored at ``floor`` for a log axis."""
    lo, hi = np.maximum(mean - se, floor), np.maximum(mean + se, floor)
    ax.fill_between(x, lo, hi, alpha=0.2, color=color)


def plot(result: dict, path: Path) -> None:
    """Per setting: error (log) and gradient norm (log) curves, mean +- s.e. over seeds.

    A sweep experiment (``TokenExperiment.sweep``) gets one more panel: final error (%)
    against the swept setting, mean +- s.e. over seeds, log-log.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    settings = setting_order(result)
    exp = TOKEN_EXPERIMENTS.get(base_experiment(result["experiment"]))
    sweep = exp.sweep if exp is not None and len(settings) > 1 else None
    ncols = min(4, len(settings))
    nblocks = math.ceil(len(settings) / ncols)
    nrows = 2 * nblocks + (1 if sweep else 0)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 3.2 * nrows), squeeze=False)
    colors: dict[str, str] = {}
    for i, s in enumerate(settings):
        ax_e = axes[2 * (i // ncols), i % ncols]
        ax_g = axes[2 * (i // ncols) + 1, i % ncols]
        for m, per in result["methods"].items():
            if s not in per:  # this method was not run at this setting
                continue
            c = per[s]["curves"]
            x = np.asarray(c["steps"])
            mean, se = np.asarray(c["error_mean"]), np.asarray(c["error_se"])
            (line,) = ax_e.plot(x, np.maximum(mean, 1e-4), label=label(m), lw=1, color=colors.get(m))
            colors[m] = line.get_color()
            _band(ax_e, x, mean, se, 1e-4, line.get_color())
            g = np.asarray(c["grad_norm_mean"])
            ax_g.plot(x, np.maximum(g, 1e-8), color=line.get_color(), lw=1)
            if "grad_norm_se" in c:
                _band(ax_g, x, g, np.asarray(c["grad_norm_se"]), 1e-8, line.get_color())
        ax_e.set_yscale("log")
        ax_e.axhline(0.01, color="grey", lw=0.8, ls=":")
        ax_e.set_title(s)
        ax_e.set_ylabel("error (training batch)")
        ax_g.set_yscale("log")
        ax_g.set_ylabel("gradient norm")
        ax_g.set_xlabel("episode (iteration)")
        if i == 0:
            ax_e.legend(fontsize=7)
    for j in range(len(settings), nblocks * ncols):
        axes[2 * (j // ncols), j % ncols].axis("off")
        axes[2 * (j // ncols) + 1, j % ncols].axis("off")
    if sweep:
        _plot_sweep(axes[-1, 0], result, settings, sweep, colors)
        for ax in axes[-1, 1:]:
            ax.axis("off")
    fig.suptitle(result["experiment"])
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_sweep(ax, result: dict, settings: list[str], sweep: tuple[str, str], colors: dict) -> None:
    """Final error (%) against the swept agent setting, mean +- s.e. (log-log)."""
    axis_label, key = sweep
    agents = {c["label"]: c["agent"] for c in result["config"].get("settings", [])}
    xs = [agents.get(s, {}).get(key) for s in settings]
    if any(x is None for x in xs):
        ax.axis("off")
        return
    for m, per in result["methods"].items():
        have = [(x, s) for x, s in zip(xs, settings) if s in per]
        y = np.array([100 * per[s]["final_error"] for _, s in have])
        yerr = np.array([100 * per[s]["final_error_se"] for _, s in have])
        ax.errorbar([x for x, _ in have], np.maximum(y, 1e-3), yerr=yerr, marker="o", capsize=3,
                    label=label(m), color=colors.get(m))
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(xs)
    ax.set_xticklabels([f"{x:g}" for x in xs])
    ax.set_xlabel(axis_label)
    ax.set_ylabel(f"final error % (last {result['config'].get('final_window', '?')})")
    ax.set_title(f"final error vs {axis_label}")
    ax.legend(fontsize=7)
