"""Collect every result in a folder into one markdown page with the figures embedded.

Usage::

    python -m zoo.report DIR [--out DIR/REPORT.md] [--title TITLE]

``DIR`` is a ``python -m zoo.reproduce --out`` folder or one like ``docs/results``
(sub-folders are searched too; ``cache/`` folders of per-job records are not). Each
result file becomes one section, in the paper's order (tabular, MNIST, Token Reversal
tables, sweeps), then the benchmarks:

* reproduce results (``<name>.json`` with ``experiment``/``config``/``methods``): the
  figure ``<name>.png`` (a relative image link), the tables of ``<name>.md`` (our numbers
  beside the paper's; rebuilt from the JSON when the markdown is missing), the wall time
  and compute time, and the config;
* benchmark results (``benchmarks/classic_control.py``, ``benchmarks/speed.py``): their
  markdown and figure, or a table built from the JSON;
* any other JSON file that has a markdown page of the same name beside it: that page
  (and ``<name>.png`` when present), after the benchmarks.

Other JSON files (not valid JSON, or of an unknown shape without a page) are skipped,
each with a note at the end of the page.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from zoo.jobs.results import markdown_table
from zoo.paper.token import experiments as token_experiments
from zoo.paper.token import tables as token_tables

_PAPER_ORDER = (
    "tabular-single",  # Figure 3
    "tabular-multi",  # Figure 4
    "mnist",  # Figure 5
    "token-vocab",  # Table 1
    "token-variations",  # Table 2
    "terminal",  # Table 3
    "ablations",  # Figure 9
    "k-sweep",  # Figure 13
    "zero-variance-mask",  # Figure 14
    "epoch-sweep",  # Figure 16
    "eta-sweep",  # Table 5
)
REPRODUCE_ORDER: tuple[str, ...] = _PAPER_ORDER + tuple(
    name for name in token_experiments.TOKEN_EXPERIMENTS if name not in _PAPER_ORDER
)
"""Section order of reproduce results, the paper's (``mnist-<dataset>`` sort as
``mnist``; a ``-interactions`` variant follows its prompt-matched run)."""
BENCHMARK_ORDER: tuple[str, ...] = ("classic_control", "speed")


@dataclass
class Entry:
    """One result file found in the folder."""

    path: Path
    kind: str  # "reproduce", "benchmark", "speed" or "other" (unknown JSON with its own .md)
    name: str
    data: dict

    def sibling(self, ext: str) -> Path:
        """The file beside this result with extension ``ext`` (see :func:`sibling`)."""
        return sibling(self.path, ext)


def sibling(path: Path, ext: str) -> Path:
    """``path`` (a ``.json``) with ``ext`` instead; names may hold dots (``-lr0.001``), which
    ``Path.with_suffix`` would take for the extension."""
    return path.with_name(path.name.removesuffix(".json") + ext)


def classify(data: object) -> str | None:
    """The kind of a parsed JSON file, or None when it is not a result we know."""
    if not isinstance(data, dict):
        return None
    if (
        isinstance(data.get("experiment"), str)
        and isinstance(data.get("config"), dict)
        and isinstance(data.get("methods"), dict)
    ):
        return "reproduce"
    if isinstance(data.get("benchmark"), str):
        return "benchmark"
    threads = data.get("threads")
    if (
        isinstance(threads, dict)
        and threads
        and all(
            isinstance(t, dict) and isinstance(t.get("methods", t.get("substrates")), dict)
            for t in threads.values()
        )
    ):
        return "speed"
    return None


def collect(folder: Path) -> tuple[list[Entry], list[tuple[Path, str]]]:
    """The result files under ``folder`` (sorted for the page) and the skipped ones."""
    entries: list[Entry] = []
    skipped: list[tuple[Path, str]] = []
    for path in sorted(folder.rglob("*.json")):
        rel = path.relative_to(folder)
        if any(part == "cache" or part.startswith(".") for part in rel.parts[:-1]):
            continue  # per-job cache records, hidden folders
        try:
            data = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            skipped.append((path, f"not readable JSON ({type(exc).__name__}: {exc})"))
            continue
        kind = classify(data)
        if kind is None and isinstance(data, dict) and sibling(path, ".md").is_file():
            kind = "other"  # a result of some other script that wrote its own page
        if kind is None:
            keys = sorted(data)[:6] if isinstance(data, dict) else type(data).__name__
            skipped.append((path, f"not a result file this report knows (top level: {keys})"))
            continue
        name = data["experiment"] if kind == "reproduce" else data.get("benchmark", path.stem)
        entries.append(Entry(path, kind, str(name), data))
    entries.sort(key=lambda e: sort_key(e, folder))
    return entries, skipped


def sort_key(entry: Entry, folder: Path) -> tuple:
    """Folder, then reproduce results in the paper's order, benchmarks, others by name."""
    where = entry.path.parent.relative_to(folder).as_posix()
    if entry.kind == "reproduce":
        base = token_experiments.base_experiment(entry.name)
        # The paper-substrate, prompt-matched run first, then its variants
        # (-interactions, -ours, -lrLR, -initINIT).
        variant = entry.name not in (base, f"{base}-paper")
        base = "mnist" if base.startswith("mnist-") else base
        rank = REPRODUCE_ORDER.index(base) if base in REPRODUCE_ORDER else len(REPRODUCE_ORDER)
        return (where, 0, rank, variant, entry.name)
    rank = BENCHMARK_ORDER.index(entry.name) if entry.name in BENCHMARK_ORDER else len(BENCHMARK_ORDER)
    return (where, 1 if entry.kind != "other" else 2, rank, False, entry.name)


# --------------------------------------------------------------------------- rendering


def demote(markdown: str, drop_title: bool = True) -> str:
    """``markdown`` one heading level down, without its leading ``# title`` line."""
    lines = markdown.strip("\n").splitlines()
    if drop_title and lines and re.match(r"#\s", lines[0]):
        lines = lines[1:]
    out, fenced = [], False
    for line in lines:
        if line.lstrip().startswith("```"):
            fenced = not fenced
        out.append("#" + line if not fenced and re.match(r"#+\s", line) else line)
    return "\n".join(out).strip("\n")


def seconds_text(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds >= 120:
        return f"{seconds:.0f} s ({seconds / 60:.1f} min)"
    return f"{seconds:.1f} s"


def wall_seconds(entry: Entry) -> float | None:
    """Wall time of the run that wrote the file, when it was recorded."""
    data = entry.data
    cfg = data.get("config") if isinstance(data.get("config"), dict) else {}
    for value in (cfg.get("wall_seconds"), data.get("total_seconds")):
        if isinstance(value, (int, float)):
            return float(value)
    return None


def compute_seconds(entry: Entry) -> float | None:
    """Sum of the per-run times: a result's own ``compute_seconds`` (LLM study, gym
    benchmark), else the per-method (per-setting) run times of a reproduce result."""
    if isinstance(entry.data.get("compute_seconds"), (int, float)):
        return float(entry.data["compute_seconds"])
    if entry.kind != "reproduce":
        return None
    total, found = 0.0, False
    for summary in entry.data["methods"].values():
        per = summary.values() if isinstance(summary, dict) and "seconds" not in summary else [summary]
        for s in per:
            if isinstance(s, dict) and isinstance(s.get("seconds"), (int, float)):
                total += s["seconds"]
                found = True
    return total if found else None


def n_seeds(entry: Entry) -> str:
    cfg = entry.data.get("config") if isinstance(entry.data.get("config"), dict) else {}
    for key in ("seeds", "n_seeds"):
        if isinstance(cfg.get(key), int):
            return str(cfg[key])
    return "-"


def link(target: Path, page: Path) -> str:
    """``target`` relative to the folder of ``page``, as a markdown link path."""
    rel = Path(os.path.relpath(target.resolve(), page.resolve().parent)).as_posix()
    return f"<{rel}>" if " " in rel else rel


def anchor(title: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[^\w\- ]", "", title.strip().lower())
    return text.replace(" ", "-")


def result_markdown(entry: Entry) -> str:
    """The tables of a result: its ``.md`` file, else rebuilt from the JSON."""
    md = entry.sibling(".md")
    if md.is_file():
        return demote(md.read_text())
    if entry.kind == "reproduce":
        exp = token_experiments.TOKEN_EXPERIMENTS.get(token_experiments.base_experiment(entry.name))
        if exp is not None and "setting_order" in entry.data:
            return demote(token_tables.markdown(entry.data, exp))
        return demote(markdown_table(entry.data))
    if entry.kind == "speed":
        return speed_table(entry.data)
    return "_No markdown table next to this file._"


def speed_table(data: dict) -> str:
    """A table of ``benchmarks/speed.py`` results: ms per iteration by method and threads."""
    cfg = data.get("config", {})
    lines = [
        f"Milliseconds per training iteration ({cfg.get('iterations', '?')} iterations timed), "
        "by torch threads.",
        "",
        "| threads | method | iteration ms | sampling ms | update ms | achieved GFLOP/s |",
        "|---|---|---|---|---|---|",
    ]

    def num(value: object, fmt: str = ".0f") -> str:
        return format(value, fmt) if isinstance(value, (int, float)) else "-"

    for threads, block in data["threads"].items():
        # Older files have one substrate's "methods"; newer ones a "methods" per substrate.
        per_substrate = block.get("substrates") or {"": {"methods": block.get("methods", {})}}
        for substrate, sub in per_substrate.items():
            for method, m in sub["methods"].items():
                name = f"{method} ({substrate})" if substrate else method
                lines.append(
                    f"| {threads} | {name} | {num(m.get('iteration_ms'))} | {num(m.get('sampling_ms'))} "
                    f"| {num(m.get('update_ms'))} | {num(m.get('achieved_gflops'), '.1f')} |"
                )
    measured = data.get("artifact_sweep_measured")
    if measured:
        lines.append(
            f"\nThe artifact's vmapped 20-seed runner, timed in this run: "
            f"{num(measured.get('ms_per_seed_iteration'), '.1f')} ms per seed-iteration."
        )
    # "sweep": a fresh policy's first iterations; "sweep_whole_run": whole runs of each seed.
    for key, what in (("sweep", "Seed sweep"), ("sweep_whole_run", "Seed sweep, whole runs")):
        for substrate, m in data.get(key, {}).items():
            versus = (
                f"x{num(m.get('speedup_vs_artifact_sweep_measured'), '.2f')} vs the artifact's vmapped runner "
                "timed in this run"
                if "speedup_vs_artifact_sweep_measured" in m
                else f"x{num(m.get('speedup_vs_artifact_sweep'), '.2f')} vs the artifact's vmapped runner (quoted)"
            )
            span = f", {m['iterations_per_seed']} iterations per seed" if "iterations_per_seed" in m else ""
            lines.append(
                f"\n{what} ({substrate} substrate, sequence TPO, {m.get('workers')} single-thread "
                f"workers{span}): {num(m.get('ms_per_seed_iteration'))} ms per seed-iteration, {versus}."
            )
    return "\n".join(lines)


def section(entry: Entry, folder: Path, page: Path) -> tuple[str, list[str]]:
    """The title and markdown lines of one result's section."""
    where = entry.path.parent.relative_to(folder).as_posix()
    title = entry.name if where == "." else f"{where}/{entry.name}"
    lines = [f"## {title}", ""]
    lines.append(f"Source: [`{entry.path.name}`]({link(entry.path, page)})")
    lines.append("")
    png = entry.sibling(".png")
    if png.is_file():
        lines += [f"![{entry.name}]({link(png, page)})", ""]
    elif entry.kind not in ("speed", "other"):
        lines += [f"_No figure ({png.name} is missing)._", ""]
    tables = result_markdown(entry)
    lines += [tables, ""]
    cfg = entry.data.get("config", {}) if isinstance(entry.data.get("config"), dict) else {}
    timing = [f"wall time {seconds_text(wall_seconds(entry))}"]
    compute = compute_seconds(entry)
    if compute is not None:
        timing.append(f"compute {seconds_text(compute)} (sum over runs)")
    if "backend" in cfg:
        timing.append(f"backend {cfg['backend']}, {cfg.get('workers', '?')} worker(s)")
    if "jobs_run" in cfg:
        timing.append(f"{cfg['jobs_run']} of {cfg.get('jobs_total', '?')} jobs run, the rest cached")
    lines += ["**Time:** " + "; ".join(timing) + ".", ""]
    if cfg and "Config: `" not in tables:
        lines += [
            "<details><summary>Config</summary>",
            "",
            "```json",
            json.dumps(cfg, indent=1, sort_keys=False),
            "```",
            "",
            "</details>",
            "",
        ]
    return title, lines


def render(
    entries: Sequence[Entry],
    skipped: Sequence[tuple[Path, str]],
    folder: Path,
    page: Path,
    title: str = "Results",
) -> str:
    """The whole report page."""
    lines = [
        f"# {title}",
        "",
        f"Generated by `python -m zoo.report {folder.as_posix()}` from {len(entries)} result "
        f"file(s). Reproduce results: mean +- s.e. over seeds; tables put our numbers beside "
        "the paper's as `ours (paper)` where it reports one.",
        "",
        "| result | kind | seeds | wall time | compute time (sum over runs) |",
        "|---|---|---|---|---|",
    ]
    sections = []
    for entry in entries:
        sec_title, sec_lines = section(entry, folder, page)
        sections += sec_lines
        lines.append(
            f"| [{sec_title}](#{anchor(sec_title)}) | {entry.kind} | {n_seeds(entry)} "
            f"| {seconds_text(wall_seconds(entry))} | {seconds_text(compute_seconds(entry))} |"
        )
    lines.append("")
    lines += sections
    if skipped:
        lines += ["## Skipped files", ""]
        lines += [f"- `{p.relative_to(folder).as_posix()}`: {why}" for p, why in skipped]
        lines.append("")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m zoo.report", description=__doc__.split("\n")[0])
    parser.add_argument("folder", type=Path, help="folder of result files (a reproduce --out folder)")
    parser.add_argument("--out", type=Path, default=None, help="markdown page to write (default: FOLDER/REPORT.md)")
    parser.add_argument("--title", default="Results", help="the page's title")
    return parser


def main(argv: list[str] | None = None) -> Path:
    parser = build_parser()
    args = parser.parse_args(argv)
    folder: Path = args.folder
    if not folder.is_dir():
        parser.error(f"result folder {str(folder)!r} does not exist or is not a folder")
    entries, skipped = collect(folder)
    if not entries:
        parser.error(
            f"no result files in {str(folder)!r}: expected *.json written by python -m zoo.reproduce "
            f"or the benchmarks ({len(skipped)} JSON file(s) skipped)"
        )
    page = args.out if args.out is not None else folder / "REPORT.md"
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(render(entries, skipped, folder, page, args.title))
    print(f"wrote {page} ({len(entries)} results, {len(skipped)} skipped)")
    return page


if __name__ == "__main__":
    main(sys.argv[1:])
