"""The speed benchmark runs end to end and writes its JSON (no timing is asserted)."""

from __future__ import annotations

import json

import pytest

from benchmarks import speed


def test_speed_benchmark_writes_phases_baselines_and_flops(tmp_path):
    out = tmp_path / "speed.json"
    result = speed.main(
        ["--threads", "1", "--iterations", "1", "--methods", "tpo", "dg", "--sweep-workers", "2", "--out", str(out)]
    )
    assert json.loads(out.read_text()) == result
    row = result["threads"]["1"]
    assert row["matmul_peak_gflops"] > 0
    assert set(row["substrates"]) == {"paper", "ours"}
    ours = row["substrates"]["ours"]["methods"]
    assert ours["tpo"]["iteration_ms"] > 0 and "jax_baseline" not in ours["tpo"]  # timed once
    for substrate, sweep in result["sweep"].items():
        assert sweep["workers"] == 2 and sweep["ms_per_seed_iteration"] > 0, substrate
        assert sweep["speedup_vs_artifact_sweep"] == 1000.0 / sweep["ms_per_seed_iteration"]
    tpo, dg = row["substrates"]["paper"]["methods"]["tpo"], row["substrates"]["paper"]["methods"]["dg"]
    for m in (tpo, dg):
        assert m["iteration_ms"] > 0 and m["sampling_ms"] > 0 and m["update_ms"] > 0
        assert m["iteration_ms"] == m["sampling_ms"] + m["update_ms"]
        assert 0 < m["fraction_of_peak"] and m["kv_cache_speedup"] > 0 and "artifact_ms" in m
    assert tpo["gflop_per_iteration"] > 4 * dg["gflop_per_iteration"]  # K = 8 and 4 epochs vs 1
    assert tpo["update_ms_identical_candidates"] > 0 and "update_ms_identical_candidates" not in dg
    jax = tpo["jax_baseline"]
    assert jax["iteration_ms"] > 0 and jax["busy_threads"] == 1 and "jax_baseline" not in dg
    assert tpo["speedup_vs_jax"] == jax["iteration_ms"] / tpo["iteration_ms"]


def test_a_negative_whole_run_length_is_refused_by_name(capsys):
    with pytest.raises(SystemExit):
        speed.main(["--sweep-run-iterations", "-3", "--methods", "dg"])
    assert "--sweep-run-iterations must be 0 (skip) or a number of iterations; got -3" in capsys.readouterr().err
