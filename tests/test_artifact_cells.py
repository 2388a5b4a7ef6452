"""zoo.paper.artifact_cells: per-seed runs of the paper's code, resumed from the cache, and the
report beside ours, on a stand-in artifact whose curves are known."""

from __future__ import annotations

import json
import textwrap

import pytest

from zoo.paper import artifact_cells

pytest.importorskip("jax")


def _fake_artifact(root):
    """A ``tpo.experiments._trial.run_trial`` whose error curve is ``seed / 10`` throughout and
    that counts its calls in ``calls.txt``."""
    pkg = root / "tpo" / "experiments"
    pkg.mkdir(parents=True)
    (root / "tpo" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "_trial.py").write_text(
        textwrap.dedent(f"""
        import jax.numpy as jnp

        def run_trial(*, num_seeds, seed_offset, sequence_length, num_episodes, algorithms,
                      batch_size, k_candidates, learning_rate, **kw):
            assert num_seeds == 1 and (batch_size, k_candidates, learning_rate) == (100, 8, 1e-4)
            with open({str(root / "calls.txt")!r}, "a") as f:
                f.write(f"{{algorithms[0]}} {{sequence_length}} {{seed_offset}}\\n")
            return {{algorithms[0]: jnp.full((1, num_episodes), seed_offset / 10)}}
    """)
    )
    return root


def _ours(folder, method, horizon, finals):
    folder.mkdir(parents=True, exist_ok=True)
    for seed, final in enumerate(finals):
        path = folder / f"{method}__H{horizon}-paper__seed{seed}.json"
        path.write_text(json.dumps({"error": [1.0] * 100 + [final] * 50}))


def test_runs_each_seed_once_resumes_from_the_cache_and_reports_beside_ours(tmp_path):
    src = _fake_artifact(tmp_path / "art")
    cache, ours, out = tmp_path / "cache", tmp_path / "ours", tmp_path / "out" / "cells"
    _ours(ours, "grpo", 9, [0.0, 0.1, 0.2, 0.3])
    cells = [("grpo", 9), ("grpo_no_kl", 7)]

    artifact_cells.run_cells(src, cells, [0, 1], cache, episodes=60, log=lambda _: None)
    artifact_cells.run_cells(src, cells, [0, 1, 2], cache, episodes=60, log=lambda _: None)
    calls = (tmp_path / "art" / "calls.txt").read_text().split("\n")[:-1]
    # Seed-major order; the second call ran only seed 2 (0 and 1 came from the cache).
    assert calls == [
        "grpo 9 0",
        "grpo_no_kl 7 0",
        "grpo 9 1",
        "grpo_no_kl 7 1",
        "grpo 9 2",
        "grpo_no_kl 7 2",
    ]
    record = json.loads((cache / "grpo__H9__seed2.json").read_text())
    assert record["made_by"]["artifact_commit"] == "unknown" and len(record["error"]) == 60

    result = artifact_cells.report(cells, cache, ours, out)
    grpo, no_kl = result["cells"]
    assert grpo["paper"] == "30.0"
    assert grpo["paper_code_final_by_seed"] == pytest.approx({0: 0.0, 1: 10.0, 2: 20.0})
    assert grpo["ours_final_by_seed"] == pytest.approx({0: 0.0, 1: 10.0, 2: 20.0, 3: 30.0})
    assert grpo["paper_code"]["seeds"] == 3 and grpo["paper_code"]["mean"] == pytest.approx(10.0)
    # 15 +- 6.5 against 10 +- 5.8 agree; 10 +- 5.8 is more than two s.e. below the paper's 30.
    assert "agree" in grpo["verdict"] and "does not give the paper's 30.0" in grpo["verdict"]
    assert no_kl["verdict"] == "not run yet"  # no run of ours is cached for that cell
    md = (tmp_path / "out" / "cells.md").read_text()
    assert "| GRPO H=9 | 30.0 | 15.0 +- 6.5 (4 seeds) | 10.0 +- 5.8 (3 seeds) |" in md
    assert "| 3 | 30.0 | - |" in md


@pytest.mark.parametrize(
    "ours, theirs, paper, words",
    [
        ([60.0, 62.0, 58.0], [30.0, 31.0, 29.0], "30.0", "differ"),
        (
            [60.0, 62.0, 58.0],
            [61.0, 59.0, 60.0],
            "30.0",
            "the paper's table differs from its own code",
        ),
        ([30.0, 32.0, 28.0], [31.0, 29.0, 30.0], "30.0", "within seed variance"),
        ([97.0, 98.0, 99.0], [96.0, 99.0, 98.0], ">95", "gives the paper's >95"),
    ],
)
def test_verdict_names_which_side_differs(ours, theirs, paper, words):
    assert words in artifact_cells.verdict(ours, theirs, paper)


def test_a_verdict_under_six_seeds_of_the_paper_code_says_it_is_provisional():
    five, six = [98.3] * 5, [98.3] * 6
    assert artifact_cells.verdict([0.0, 20.0], five, "66.6").startswith(
        "provisional (5 of the 6 seeds of the paper's code a verdict needs): ours (10.0)"
    )
    assert artifact_cells.verdict([0.0, 20.0], six, "66.6").startswith("ours (10.0) and the paper's code (98.3) differ")


def test_a_cell_must_be_method_colon_horizon():
    with pytest.raises(SystemExit):
        artifact_cells.main(["--cells", "grpo9", "--report-only"])
