"""benchmarks.artifact_sweep: the paper runner's timing, on a stand-in with a known cost."""

from __future__ import annotations

import json
import textwrap

import pytest

from benchmarks import artifact_sweep

pytest.importorskip("jax")


def _fake_artifact(root, seconds_per_episode: float, setup_seconds: float):
    """A folder with a ``tpo.experiments._trial.run_trial`` that sleeps a fixed set-up time
    plus a fixed time per episode and checks it is called with the paper's H = 8 setting."""
    pkg = root / "tpo" / "experiments"
    pkg.mkdir(parents=True)
    (root / "tpo" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "_trial.py").write_text(textwrap.dedent(f"""
        import time
        import jax.numpy as jnp

        def run_trial(*, num_seeds, sequence_length, num_episodes, algorithms, reward_type, **kw):
            assert (num_seeds, sequence_length, reward_type, algorithms) == (20, 8, "terminal", ("tpo",))
            print("    tpo...")  # the artifact prints progress on stdout
            time.sleep({setup_seconds} + {seconds_per_episode} * num_episodes)
            return {{"tpo": jnp.zeros((num_seeds, num_episodes))}}
    """))
    return root


def test_measure_cancels_set_up_and_reports_per_seed_iteration(tmp_path):
    src = _fake_artifact(tmp_path, seconds_per_episode=0.2, setup_seconds=0.5)
    result = artifact_sweep.measure(src, episodes=(1, 3))
    assert result["episodes"] == [1, 3] and len(result["wall_seconds"]) == 2
    # The per-iteration time is the difference of the two calls over the episode gap (set-up
    # cancels; per_iteration's arithmetic is checked exactly below), never a timing bound here.
    seconds = result["wall_seconds"]
    assert result["s_per_sweep_iteration"] == pytest.approx((seconds[1] - seconds[0]) / 2)
    assert result["ms_per_seed_iteration"] == pytest.approx(1e3 * result["s_per_sweep_iteration"] / 20)
    assert result["setting"]["k_candidates"] == 8 and result["setting"]["batch_size"] == 100


def test_measure_names_a_folder_without_the_artifact(tmp_path):
    with pytest.raises(RuntimeError, match="no importable tpo.experiments._trial"):
        artifact_sweep.measure(tmp_path, episodes=(1, 2))


@pytest.mark.parametrize(
    "args, match",
    [((1.0, 2.0, 3, 3, 20), "episodes must increase"), ((2.0, 1.5, 2, 6, 20), "not slower")],
)
def test_per_iteration_refuses_what_cannot_be_a_timing(args, match):
    with pytest.raises(ValueError, match=match):
        artifact_sweep.per_iteration(*args)


def test_per_iteration_arithmetic():
    assert artifact_sweep.per_iteration(50.0, 117.0, 2, 6, 20) == {
        "s_per_sweep_iteration": 16.75,
        "ms_per_seed_iteration": 837.5,
    }


def test_speed_benchmark_reports_the_measured_artifact_beside_our_sweep(tmp_path):
    from benchmarks import speed

    src = _fake_artifact(tmp_path / "artifact", seconds_per_episode=0.1, setup_seconds=0.1)
    out = tmp_path / "speed.json"
    result = speed.main([
        "--threads", "1", "--iterations", "1", "--methods", "tpo", "--substrate", "paper",
        "--sweep-workers", "2", "--sweep-run-iterations", "3", "--no-jax-baseline", "--artifact-src", str(src),
        "--out", str(out),
    ])
    saved = json.loads(out.read_text())
    assert saved["config"]["artifact_src"] == str(src)
    measured = saved["artifact_sweep_measured"]["ms_per_seed_iteration"]
    sweep = saved["sweep"]["paper"]
    assert sweep["speedup_vs_artifact_sweep_measured"] == pytest.approx(measured / sweep["ms_per_seed_iteration"])
    assert result["sweep"]["paper"] == sweep
    whole = saved["sweep_whole_run"]["paper"]  # each seed trained 3 iterations, timed whole
    assert whole["iterations_per_seed"] == 3 and whole["workers"] == 2 and sweep["iterations_per_seed"] == 2
    assert whole["speedup_vs_artifact_sweep_measured"] == pytest.approx(measured / whole["ms_per_seed_iteration"])
    assert len(whole["final_success"]) == 2 and all(0.0 <= s <= 1.0 for s in whole["final_success"])
