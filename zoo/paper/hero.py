"""The paper's hero comparison (Table 3 at H = 10, prompt-matched): ours beside the artifact's.

Reads a ``terminal`` result (``python -m zoo.reproduce terminal --lengths 10 --methods tpo grpo
dg``) and writes ``OUT/hero-H10-<name>.{json,png,md}`` (name: the result's less "terminal-",
e.g. ``paper``): per method the mean final error +- s.e. (at the last iteration, the paper's
Table 3 value, and over the last 50), every seed's final error, take-off iteration (first below
50 % error), iterations to 1 % and how the gradient norm fades once solved, each beside the
same statistic of the paper's published 20-seed curves, with the z-score of the difference of
the two means (``|z| <= 2``: within about two standard errors). The figure shows the mean
curve +- s.e. and every seed's curve, ours on the left and the artifact's statistics in the
table (its curves are not shipped; ``--artifact-npz`` overlays them from the artifact's
``assets/token_reversal_sparse_reward_results.npz`` when a local copy is at hand).

Usage: ``python -m zoo.hero docs/results/terminal-paper.json [--out docs/results]
[--versus-length docs/results/terminal-ours.json ...]`` (the last also draws final error
against H for every method under each result's substrate).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

from tpo_agents.atomic import write_json_atomic
from zoo.paper.token.jobs import GRAD_WINDOW

ARTIFACT_H10 = {
    # From the artifact's published curves (20 seeds, seeds 0..19, 2000 iterations, terminal
    # reverse copy, H = 10, V = 2, K = 8, B = 100, prompt-matched): error at the last iteration,
    # take-off (first iteration below 50 % error) and first iteration below 1 % ("None": never).
    "tpo": {
        "last": [0.0, 0.144, 0.002, 0.021, 0.122, 0.014, 0.001, 0.0, 0.004, 0.131,
                 0.001, 0.0, 0.001, 0.245, 0.005, 0.002, 0.004, 0.001, 0.004, 0.768],
        "takeoff": [476, 1494, 513, 153, 144, 804, 214, 497, 726, 291,
                    414, 931, 212, 354, 1010, 417, 253, 709, 730, None],
        "steps_to_1pct": [500, None, 757, 310, 445, 1254, 236, 530, 959, 414,
                          444, 1040, 229, 986, 1097, 459, 509, 930, 1170, None],
        "last50_mean": 0.087,
    },
    "grpo": {
        "last": [0.481, 0.0, 0.674, 0.22, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0,
                 1.0, 0.46, 1.0, 0.0, 1.0, 0.93, 0.0, 0.93, 0.379, 1.0],
        "takeoff": [2000, 732, 745, 843, 432, None, 1192, 829, 229, 1528,
                    None, 122, None, 1075, None, None, 1190, 714, 1449, None],
        "steps_to_1pct": [None, 946, 765, None, 450, None, 1260, 855, 253, 1580,
                          None, 126, None, 1151, None, None, 1275, 866, None, None],
        "last50_mean": 0.522,
    },
    "dg": {
        "last": [0.99, 0.99, 1.0, 0.99, 1.0, 1.0, 1.0, 1.0, 0.99, 1.0,
                 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.99, 1.0, 1.0],
        "takeoff": [None] * 20,
        "steps_to_1pct": [None] * 20,
        "last50_mean": 0.998,
    },
}
"""The paper's Table 3 prints TPO 7.4 %, GRPO 50.4 %, DG '-' (> 95 %) at H = 10: these means."""

LABELS = {"tpo": "TPO", "grpo": "GRPO", "dg": "DG", "grpo_no_kl": "GRPO (no KL)", "ppo": "PPO"}
COLORS = {"tpo": "tab:blue", "grpo": "tab:orange", "dg": "tab:red", "grpo_no_kl": "teal", "ppo": "tab:green"}


def mean_se(values) -> tuple[float, float]:
    x = np.asarray(values, dtype=float)
    se = x.std(ddof=1) / math.sqrt(len(x)) if len(x) > 1 else 0.0
    return float(x.mean()), float(se)


def z_difference(ours, theirs) -> float | None:
    """``(mean_ours - mean_theirs) / sqrt(se_ours^2 + se_theirs^2)``; None when both s.e. are 0."""
    (m1, s1), (m2, s2) = mean_se(ours), mean_se(theirs)
    scale = math.hypot(s1, s2)
    return None if scale == 0 else (m1 - m2) / scale


def count_reached(values) -> str:
    reached = [v for v in values if v is not None]
    if not reached:
        return f"0/{len(values)}"
    return f"{len(reached)}/{len(values)} (median {int(np.median(reached))})"


SOLVED_ERROR = 0.01
"""A seed counts as solved when its final error (mean of the last 50 iterations) is below this."""


def gradient_fade(summary: dict) -> dict | None:
    """Does the gradient die out once the task is solved (the paper's claim for TPO)?

    From one (method, setting) summary: the seed mean of each seed's median gradient norm over
    its first iterations (all seeds) and over its last iterations (solved seeds only; see
    :data:`SOLVED_ERROR`), their ratio, and the solved seeds' mean over the last iterations
    (which counts the spikes the median leaves out). None for summaries made before these per-seed
    statistics were recorded."""
    keys = ("grad_norm_first_per_seed", "grad_norm_last_per_seed", "grad_norm_last_mean_per_seed")
    if any(k not in summary for k in keys):
        return None
    first, last, last_mean = (summary[k] for k in keys)
    solved = [i for i, e in enumerate(summary["final_error_per_seed"]) if e < SOLVED_ERROR]
    start = float(np.mean(first))
    end = float(np.mean([last[i] for i in solved])) if solved else None
    return {
        "n_solved": len(solved),
        "n_seeds": len(first),
        "first": start,
        "last_solved": end,
        "last_mean_solved": float(np.mean([last_mean[i] for i in solved])) if solved else None,
        "last_over_first": None if end is None or start == 0 else end / start,
    }


def compare(result: dict, setting: str = "H=10") -> dict:
    """Per-method statistics of ``result`` at ``setting`` beside the artifact's."""
    rows = {}
    for method, per in result["methods"].items():
        if setting not in per:  # not run at this setting: no row rather than a KeyError
            continue
        s = per[setting]
        ours_last = s["last_iteration_error_per_seed"]
        row = {
            "n_seeds": s["n_seeds"],
            "last_iteration_error": list(mean_se(ours_last)),  # [mean, s.e.]
            "last50_error": [s["final_error"], s["final_error_se"]],
            "last_iteration_error_per_seed": ours_last,
            "last50_error_per_seed": s["final_error_per_seed"],
            "takeoff_per_seed": s["takeoff_iteration_per_seed"],
            "steps_to_1pct_per_seed": s["steps_to_1pct_per_seed"],
            "seconds_per_iteration": s.get("seconds_per_iteration"),
            "gradient": gradient_fade(s),
        }
        ref = ARTIFACT_H10.get(method) if setting == "H=10" else None
        if ref is not None:
            row["artifact"] = {
                "n_seeds": len(ref["last"]),
                "last_iteration_error": list(mean_se(ref["last"])),
                "last50_error_mean": ref["last50_mean"],
                "last_iteration_error_per_seed": ref["last"],
                "takeoff_per_seed": ref["takeoff"],
                "steps_to_1pct_per_seed": ref["steps_to_1pct"],
            }
            row["z_last_iteration_vs_artifact"] = z_difference(ours_last, ref["last"])
        rows[method] = row
    return rows


def markdown(rows: dict, result: dict, setting: str) -> str:
    cfg = result["config"]
    pct = lambda m_se: f"{100 * m_se[0]:.1f} +- {100 * m_se[1]:.1f}"  # noqa: E731
    lines = [
        f"# Hero: Table 3 at {setting}, prompt-matched ({cfg.get('substrate', '?')} substrate)",
        "",
        f"Substrate {cfg.get('substrate', '?')}, init {cfg.get('init', '?')}, optimizer "
        f"{cfg.get('optimizer', '?')}; {cfg['episodes']} iterations; terminal reverse copy, V = 2, K = 8, "
        "B = 100. Error = 1 - exact-match rate of the sampled training batch before the update. "
        "Artifact: the paper's published curves (20 seeds).",
        "",
        "| method | seeds | last-iteration error % (artifact) | z vs artifact | last-50 error % "
        "(artifact) | take-off < 50 % reached (artifact) | 1 % reached (artifact) |",
        "|---|---|---|---|---|---|---|",
    ]
    for method, r in rows.items():
        a = r.get("artifact")
        z = r.get("z_last_iteration_vs_artifact")
        lines.append(
            f"| {LABELS.get(method, method)} | {r['n_seeds']} | {pct(r['last_iteration_error'])}"
            + (f" ({pct(a['last_iteration_error'])})" if a else "")
            + f" | {'-' if z is None else f'{z:+.1f}'} | {pct(r['last50_error'])}"
            + (f" ({100 * a['last50_error_mean']:.1f})" if a else "")
            + f" | {count_reached(r['takeoff_per_seed'])}"
            + (f" ({count_reached(a['takeoff_per_seed'])})" if a else "")
            + f" | {count_reached(r['steps_to_1pct_per_seed'])}"
            + (f" ({count_reached(a['steps_to_1pct_per_seed'])})" if a else "")
            + " |"
        )
    lines += ["", "Per seed (seed: last-iteration error %, take-off, iterations to 1 %):", ""]
    for method, r in rows.items():
        cells = [
            f"{i}: {100 * e:.1f}, {t if t is not None else '-'}, {s if s is not None else '-'}"
            for i, (e, t, s) in enumerate(
                zip(r["last_iteration_error_per_seed"], r["takeoff_per_seed"], r["steps_to_1pct_per_seed"])
            )
        ]
        lines.append(f"- {LABELS.get(method, method)}: " + "; ".join(cells))
    fades = {LABELS.get(m, m): r["gradient"] for m, r in rows.items() if r.get("gradient")}
    if fades:
        lines += ["", gradient_table(fades)]
    return "\n".join(lines) + "\n"


def gradient_table(fades: dict[str, dict], label: str = "method") -> str:
    """Markdown for :func:`gradient_fade` results keyed by ``label`` (a method, or a
    (method, result) pair joined by " | ")."""
    fmt = lambda x: "-" if x is None else f"{x:.3g}"  # noqa: E731
    lines = [
        f"Gradient norm: a seed's median (or mean) over its first / last {GRAD_WINDOW} iterations, "
        f"then the mean over seeds; the last only over solved seeds (final error < {100 * SOLVED_ERROR:g} %).",
        "",
        f"| {label} | solved | first, median | last, median (solved) | last, mean (solved) | last / first (medians) |",
        "|---" * (label.count("|") + 6) + "|",
    ]
    for key, g in fades.items():
        lines.append(
            f"| {key} | {g['n_solved']}/{g['n_seeds']} | {fmt(g['first'])} | {fmt(g['last_solved'])} "
            f"| {fmt(g['last_mean_solved'])} | {fmt(g['last_over_first'])} |"
        )
    return "\n".join(lines) + "\n"


def plot(result: dict, setting: str, path: Path, artifact_npz: Path | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = [m for m, per in result["methods"].items() if setting in per]
    fig, axes = plt.subplots(1, 2 if artifact_npz else 1, figsize=(11 if artifact_npz else 6, 4), squeeze=False)
    ax = axes[0, 0]
    for m in methods:
        s = result["methods"][m][setting]
        mean, se = np.asarray(s["curves"]["error_mean"]), np.asarray(s["curves"]["error_se"])
        x = np.arange(1, len(mean) + 1)
        ax.plot(x, mean, color=COLORS.get(m), lw=2, label=f"{LABELS.get(m, m)} ({s['n_seeds']} seeds)")
        ax.fill_between(x, mean - se, mean + se, color=COLORS.get(m), alpha=0.2)
    ax.set_title(f"ours, {result['config'].get('substrate', '?')} substrate, {setting}")
    artifact = None if artifact_npz is None else np.load(artifact_npz)
    if artifact is not None:
        bx = axes[0, 1]
        for m in methods:
            if f"{m}_errors" in artifact.files:
                e = artifact[f"{m}_errors"]
                mean, se = e.mean(0), e.std(0, ddof=1) / math.sqrt(len(e))
                x = np.arange(1, len(mean) + 1)
                bx.plot(x, mean, color=COLORS.get(m), lw=2, label=f"{LABELS.get(m, m)} ({len(e)} seeds)")
                bx.fill_between(x, mean - se, mean + se, color=COLORS.get(m), alpha=0.2)
        bx.set_title("the paper's artifact (published curves)")
    for a in axes[0]:
        a.set_xlabel("iteration")
        a.set_ylabel("exact-match error (training batch)")
        a.set_ylim(-0.02, 1.02)
        a.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def result_name(result: dict, path: Path) -> str:
    """A result's name as zoo.paper.reproduce gave it ("terminal-ours-adamw-lr0.003"), else its file's."""
    return result.get("experiment") or Path(path).name.removesuffix(".json")


def _length(setting: str) -> int | None:
    return int(setting[2:]) if setting.startswith("H=") and setting[2:].isdigit() else None


def versus_length(results: dict[str, dict], path: Path) -> dict:
    """Final error (last iteration, seed mean +- s.e.) against H for every method of every
    result (``{label: terminal result}``, e.g. one per substrate): one panel per method, one
    line per result. Returns the plotted numbers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    methods = list(dict.fromkeys(m for r in results.values() for m in r["methods"]))
    data: dict = {m: {} for m in methods}
    fig, axes = plt.subplots(
        1, len(methods), figsize=(3.2 * len(methods), 3.4), squeeze=False, sharex=True, sharey=True
    )
    for ax, m in zip(axes[0], methods):
        for i, (name, r) in enumerate(results.items()):
            per = r["methods"].get(m, {})
            points = sorted((_length(s), v) for s, v in per.items() if _length(s) is not None)
            if not points:
                continue
            xs = [h for h, _ in points]
            ys = [100 * v["last_iteration_error"] for _, v in points]
            es = [100 * v["last_iteration_error_se"] for _, v in points]
            data[m][name] = {"H": xs, "error_pct": ys, "se_pct": es, "seeds": [v["n_seeds"] for _, v in points]}
            ax.errorbar(xs, ys, yerr=es, marker="os^D"[i % 4], capsize=3, label=name)
        ax.set_title(LABELS.get(m, m))
        ax.set_xlabel("H")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # H is a whole number
        ax.set_ylim(-3, 103)
        ax.legend(fontsize=7)
    axes[0, 0].set_ylabel("final exact-match error % (last iteration)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return data


def versus_length_markdown(curves: dict, results: dict[str, dict], setting: str | None = None) -> str:
    """The numbers of :func:`versus_length` as a table: one row per (method, result), one
    column per H, cells ``error % +- s.e. (seeds)``; each result's substrate is named. With
    ``setting``, also every (method, result)'s :func:`gradient_fade` there."""
    lengths = sorted({h for per in curves.values() for c in per.values() for h in c["H"]})
    lines = [
        "# Final error vs H, by substrate",
        "",
        "Table 3's final exact-match error % (last iteration, seed mean +- s.e., seeds in brackets), "
        "terminal reward, prompt-matched; figure: `terminal-versus-H.png`.",
        "",
    ]
    for name, r in results.items():
        cfg = r.get("config", {})
        lines.append(
            f"- `{name}`: substrate {cfg.get('substrate', '?')}, init {cfg.get('init', '?')}, "
            f"optimizer {cfg.get('optimizer', '?')}, {cfg.get('episodes', '?')} iterations"
        )
    lines += ["", "| method | result | " + " | ".join(f"H={h}" for h in lengths) + " |"]
    lines.append("|---|---|" + "---|" * len(lengths))
    for m, per in curves.items():
        for name, c in per.items():
            cells = {h: f"{e:.1f} +- {se:.1f} ({n})" for h, e, se, n in zip(c["H"], c["error_pct"], c["se_pct"], c["seeds"])}
            lines.append(f"| {LABELS.get(m, m)} | {name} | " + " | ".join(cells.get(h, "not run") for h in lengths) + " |")
    fades = {
        f"{LABELS.get(m, m)} | {name}": fade
        for m in curves
        for name, r in results.items()
        if setting in r["methods"].get(m, {}) and (fade := gradient_fade(r["methods"][m][setting]))
    }
    if fades:
        lines += ["", f"## Gradient at {setting}", "", gradient_table(fades, label="method | result")]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("result", type=Path, help="a terminal result JSON from zoo.paper.reproduce")
    parser.add_argument("--setting", default="H=10")
    parser.add_argument("--out", type=Path, default=None, help="folder (default: the result's)")
    parser.add_argument("--artifact-npz", type=Path, default=None)
    parser.add_argument(
        "--versus-length", type=Path, nargs="+", default=None, metavar="RESULT",
        help="also plot final error vs H of these terminal results beside RESULT's "
        "(e.g. other substrates): OUT/terminal-versus-H.{png,json,md}",
    )
    args = parser.parse_args(argv)
    result = json.loads(args.result.read_text())
    if not any(args.setting in per for per in result["methods"].values()):
        parser.error(f"{args.result} has no method run at setting {args.setting!r}")
    missing = [m for m, per in result["methods"].items() if args.setting not in per]
    if missing:
        print(f"[hero] not run at {args.setting}, left out: {', '.join(missing)}", file=sys.stderr)
    out = args.out or args.result.parent
    out.mkdir(parents=True, exist_ok=True)
    tag = args.setting.replace("=", "")
    stem = f"hero-{tag}-{result_name(result, args.result).removeprefix('terminal-')}"  # dots: no with_suffix
    path = {ext: out / f"{stem}.{ext}" for ext in ("json", "md", "png")}
    rows = compare(result, args.setting)
    data = {
        "source": str(args.result),
        "setting": args.setting,
        "config": {k: result["config"].get(k) for k in ("substrate", "init", "optimizer", "episodes", "seeds")},
        "methods": rows,
    }
    write_json_atomic(path["json"], data)
    path["md"].write_text(markdown(rows, result, args.setting))
    plot(result, args.setting, path["png"], args.artifact_npz)
    if args.versus_length:
        results = {}
        for source in [args.result, *args.versus_length]:
            r = json.loads(Path(source).read_text())
            results[result_name(r, source)] = r
        curves = versus_length(results, out / "terminal-versus-H.png")
        write_json_atomic(out / "terminal-versus-H.json", {"sources": list(results), "methods": curves})
        (out / "terminal-versus-H.md").write_text(versus_length_markdown(curves, results, args.setting))
        data["versus_length"] = curves
    print(path["md"].read_text())
    return data


if __name__ == "__main__":
    main()
