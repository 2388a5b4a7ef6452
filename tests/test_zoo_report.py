"""Figures and tables of every reproduce experiment, and the report page (zoo.paper.report)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from zoo.jobs import sweep
from zoo.jobs.results import markdown_table, summarize
from zoo.paper import mnist as mnist_study
from zoo.paper import report
from zoo.paper.numbers import MNIST as MNIST_PAPER
from zoo.paper.reproduce import EXPERIMENTS
from zoo.paper.reproduce import main as reproduce_main
from zoo.paper.token import experiments as token_experiments
from zoo.paper.token import jobs as token_jobs
from zoo.paper.token import plots as token_plots
from zoo.paper.token import study as token_study

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
DOCS_RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"


def run(out, *argv: str) -> dict:
    return reproduce_main([*argv, "--out", str(out), "--quiet"])


def fake_token_job(job, progress=None) -> dict:
    """A deterministic stand-in for token_study.run_job (no training): a decaying error."""
    rng = np.random.default_rng(job.seed + 17 * len(job.name))
    error = np.clip(np.linspace(0.9, 0.005, job.episodes) + rng.uniform(0, 0.01, job.episodes), 0, 1)
    error = [float(e) for e in error]
    return {
        "spec": job.spec(),
        "agent": {"class": "Fake", "batch_size": 100},
        "error": error,
        "grad_norm": [1.0 / (i + 1) for i in range(job.episodes)],
        "zero_variance_frac": [0.5] * job.episodes,
        "takeoff_iteration": token_jobs.first_iteration_below(error, 0.5),
        "steps_to_1pct": token_jobs.first_iteration_below(error, 0.01),
        "seconds": 0.5,
        "seconds_per_iteration": 0.5 / job.episodes,
        "code_version": sweep.code_version(),
    }


def fake_mnist_run(method, seed, cfg):
    steps = np.asarray(cfg.eval_steps, dtype=float)
    return method, seed, 0.9 * np.exp(-steps / (20 + seed + len(method))), 0.1


@pytest.fixture(scope="module")
def every_experiment(tmp_path_factory):
    """Every experiment name of zoo.paper.reproduce, run with its default settings and a fake job
    function for the trained studies (tabular: real, tiny)."""
    out = tmp_path_factory.mktemp("all")
    patch = pytest.MonkeyPatch()
    patch.setattr(token_study, "run_job", fake_token_job)
    patch.setattr(mnist_study, "run_one", fake_mnist_run)
    try:
        for name in EXPERIMENTS:
            if name.startswith("tabular"):
                run(out, name, "--seeds", "2", "--steps", "5")
            elif name == "mnist":
                argv = ["--dataset", "digits", "--steps", "40", "--eval-every", "10", "--seeds", "2"]
                run(out, name, *argv, "--workers", "1")
            else:
                run(out, name, "--seeds", "2", "--episodes", "4", "--workers", "1")
        run(out, "terminal", "--seeds", "2", "--episodes", "4", "--workers", "1", "--match", "interactions")
    finally:
        patch.undo()
    return out


def output_name(name: str) -> str:
    """Token Reversal results are named with the substrate that made them (paper by default)."""
    return f"{name}-paper" if name in token_experiments.TOKEN_EXPERIMENTS or name == "terminal-interaction" else name


def output_names() -> list[str]:
    names = [n for n in EXPERIMENTS if n != "mnist"] + ["mnist-digits", "terminal-interaction"]
    return sorted(output_name(n) for n in names)


@pytest.mark.slow  # the module fixture runs every experiment (fake jobs)
def test_every_experiment_writes_a_figure_and_a_table_beside_the_paper(every_experiment):
    out = every_experiment
    for name in output_names():
        data = json.loads((out / f"{name}.json").read_text())
        assert data["experiment"] == name
        assert isinstance(data["config"]["wall_seconds"], float), name
        png = (out / f"{name}.png").read_bytes()
        assert png[:8] == PNG_MAGIC and len(png) > 5_000, name
        md = (out / f"{name}.md").read_text()
        assert md.startswith(f"# {name}\n") and "|---|" in md, name
    for name, exp in token_experiments.TOKEN_EXPERIMENTS.items():
        md = (out / f"{output_name(name)}.md").read_text()
        # Cells "ours (paper)": every paper value of the default settings is shown.
        n_paper = sum(len(v) for v in exp.paper.values())
        assert len(re.findall(r"\| [^|(]+ \([^)]+\)", md)) >= min(n_paper, 1), name
    assert "(33.8)" in (out / "terminal-paper.md").read_text()  # Table 3, prompt-matched DG H=7
    assert "(47.7)" in (out / "terminal-interaction-paper.md").read_text()  # interaction-matched
    for name in ("tabular-single", "tabular-multi", "mnist-digits"):
        assert "Paper: " in (out / f"{name}.md").read_text()


def test_mnist_table_puts_the_papers_numbers_beside_ours():
    rng = np.random.default_rng(0)
    steps = list(range(0, 2001, 200))
    result = {"experiment": "mnist-mnist", "config": {"dataset": "mnist"}, "methods": {}}
    for m in ("ce", "pg", "dg", "tpo", "grpo", "group_pg"):
        error = np.exp(-np.array(steps) / 500) * 0.9 + rng.uniform(0, 0.01, (3, len(steps)))
        result["methods"][m] = summarize(error, steps, thresholds=(0.01, 0.05))
    md = markdown_table(result, "", MNIST_PAPER)
    tpo = next(line for line in md.splitlines() if line.startswith("| TPO |"))
    assert "(0.029)" in tpo and "(1600)" in tpo
    assert "(2200)" in next(line for line in md.splitlines() if line.startswith("| DG |"))
    assert "(0.072)" in md and "ours (paper)" in md
    assert EXPERIMENTS["mnist"].paper_values({"config": {"dataset": "digits"}}) is None


@pytest.mark.slow  # the module fixture runs every experiment (fake jobs)
def test_sweep_figures_have_a_final_error_panel(every_experiment, monkeypatch):
    import matplotlib.figure

    saved = []
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda fig, *a, **k: saved.append(fig))
    data = json.loads((every_experiment / "k-sweep-paper.json").read_text())
    token_plots.plot(data, every_experiment / "unused.png")
    axes = [ax for ax in saved[0].axes if ax.get_title() == "final error vs K"]
    assert len(axes) == 1
    ax = axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["4", "8", "16", "32", "64"]
    error_axes = [a for a in saved[0].axes if a.get_ylabel() == "error (training batch)"]
    assert len(error_axes) == 5 and all(a.get_yscale() == "log" for a in error_axes)


# ---------------------------------------------------------------------------- report


def image_links(md: str) -> list[str]:
    return re.findall(r"!\[[^\]]*\]\(<?([^)>]+)>?\)", md)


@pytest.mark.slow  # the module fixture runs every experiment (fake jobs)
def test_report_collects_results_in_the_papers_order(every_experiment, tmp_path):
    out = every_experiment
    (out / "notes.json").write_text(json.dumps({"hello": 1}))
    (out / "broken.json").write_text("{not json")
    (out / "zz-other.json").write_text(json.dumps({"rows": [1, 2]}))
    (out / "zz-other.md").write_text("# Other script\n\n## Its table\n\n| a |\n|---|\n| 1 |\n")
    page = report.main([str(out)])
    assert page == out / "REPORT.md"
    md = page.read_text()
    titles = re.findall(r"^## (.+)$", md, flags=re.M)
    expected = [
        "tabular-single",
        "tabular-multi",
        "mnist-digits",
        "token-vocab",
        "token-variations",
        "terminal",
        "terminal-interaction",
        "ablations",
        "k-sweep",
        "zero-variance-mask",
        "epoch-sweep",
        "eta-sweep",
        "zz-other",
        "Skipped files",
    ]
    expected = [output_name(n) for n in expected]
    assert titles == expected
    assert image_links(md) == [f"{n}.png" for n in expected[:-2]]
    # A JSON of an unknown shape with its own page is included through that page.
    assert "### Its table" in md.split("## zz-other")[1]
    assert "`notes.json`: not a result file" in md and "`broken.json`: not readable JSON" in md
    assert "cache/" not in md.split("## Skipped files")[1]  # per-job records are not results
    assert "| TPO |" in md and "(33.8)" in md  # the tables, with the paper's numbers
    assert "**Time:** wall time" in md and "backend local, 1 worker(s)" in md
    assert "[terminal-paper](#terminal-paper)" in md  # the contents table links the sections
    # Headings of the included pages are demoted below the section headings.
    assert "\n# " not in md.split("\n", 1)[1]


def test_report_on_two_result_files_elsewhere(tmp_path):
    results = tmp_path / "results"
    run(results, "tabular-single", "--seeds", "2", "--steps", "5")
    run(results, "tabular-multi", "--seeds", "2", "--steps", "5")
    (results / "tabular-multi.md").unlink()  # rebuilt from the JSON
    page = report.main([str(results), "--out", str(tmp_path / "pages" / "index.md"), "--title", "Two"])
    md = page.read_text()
    assert md.startswith("# Two\n")
    links = image_links(md)
    assert links == ["../results/tabular-single.png", "../results/tabular-multi.png"]
    assert all((page.parent / link).is_file() for link in links)
    multi = md.split("## tabular-multi")[1]
    assert "| method | final error (mean +- s.e.) | steps to 1pct | mean misalignment |" in multi
    assert "| TPO |" in multi and 'Config: `{"n_contexts": 100' in multi
    assert "Skipped files" not in md


def test_report_finds_the_figure_and_page_of_a_name_with_dots(tmp_path):
    # zoo.paper.reproduce names variants "-lr0.001"; Path.with_suffix would take ".001" for the
    # extension and look for "...-lr0.png", so every learning rate shared one missing figure.
    results = tmp_path / "results"
    run(results, "tabular-single", "--seeds", "2", "--steps", "5")
    for lr in ("0.001", "0.003"):
        for ext in ("json", "png", "md"):
            (results / f"tabular-single-lr{lr}.{ext}").write_bytes((results / f"tabular-single.{ext}").read_bytes())
        page = results / f"tabular-single-lr{lr}.md"
        page.write_text(page.read_text() + f"\nPage of lr {lr}.\n")
    for ext in ("json", "png", "md"):
        (results / f"tabular-single.{ext}").unlink()
    md = report.main([str(results)]).read_text()
    assert "is missing" not in md
    assert image_links(md) == ["tabular-single-lr0.001.png", "tabular-single-lr0.003.png"]
    assert "Page of lr 0.001." in md and "Page of lr 0.003." in md


def test_report_of_the_committed_results(tmp_path):
    page = report.main([str(DOCS_RESULTS), "--out", str(tmp_path / "REPORT.md")])
    md = page.read_text()
    assert "Skipped files" not in md  # every committed result has a known shape or a page
    links = image_links(md)
    assert links and all((page.parent / link).resolve().is_file() for link in links)
    for path in DOCS_RESULTS.glob("*.json"):
        assert f"[`{path.name}`]" in md, path.name
    assert md.index("## tabular-single") < md.index("## terminal") < md.index("## classic_control")
    speed = md.split("## speed\n")[1].split("\n## ")[0]  # the speed benchmark, from its JSON
    assert "| 1 | tpo (paper) |" in speed and "| 2 | ppo (ours) |" in speed
    assert "<details><summary>Config</summary>" in speed
    assert "The artifact's vmapped 20-seed runner, timed in this run: 1039.8 ms" in speed
    sweep = md.split("## speed-sweep")[1]  # the paper's runner timed beside our first iterations and whole runs
    assert "| 2 | tpo (paper) |" in sweep
    assert "The artifact's vmapped 20-seed runner, timed in this run: 1103.5 ms" in sweep
    assert re.search(r"Seed sweep \(paper substrate.*x3\.93 vs the artifact's vmapped runner timed in this run", sweep)
    assert re.search(
        r"Seed sweep, whole runs \(paper substrate, sequence TPO, 2 single-thread workers, 2000 iterations per seed\): "
        r"85 ms per seed-iteration, x13\.04 vs the artifact's vmapped runner timed in this run",
        sweep,
    )


def test_report_bad_input(tmp_path, capsys):
    with pytest.raises(SystemExit):
        report.main([str(tmp_path / "missing")])
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "other.json").write_text("[1, 2]")
    with pytest.raises(SystemExit):
        report.main([str(tmp_path)])
    assert "no result files" in capsys.readouterr().err
