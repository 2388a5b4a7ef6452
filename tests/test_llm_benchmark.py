"""benchmarks/llm.py runs at toy size and writes its JSON and markdown table."""

import json
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.mark.slow
def test_llm_benchmark_toy_run_writes_json_and_table(tmp_path):
    from benchmarks import llm

    out = tmp_path / "llm-benchmark.json"
    llm.main(["--impls", "trl_grpo", "trl_tpo", "--prompts", "2", "--k", "2", "--max-new-tokens", "2",
              "--warmup", "0", "--timing-steps", "2", "--rounds", "1", "--reward-steps", "2", "--window", "1",
              "--seeds", "0", "--workdir", str(tmp_path / "models"), "--out", str(out)])
    result = json.loads(out.read_text())
    timing = result["timing"]
    assert set(timing) == {"trl_grpo", "trl_tpo"}
    assert len(timing["trl_tpo"]["step_seconds"]) == 2 and timing["trl_tpo"]["median_seconds"] > 0
    assert timing["trl_grpo"]["ratio_to_trl_grpo"] == pytest.approx(1.0)
    for impl in ("trl_grpo", "trl_tpo"):
        (seed,) = result["reward"][impl]["seeds"]
        assert len(seed["rewards"]) == 2 and 0 <= seed["greedy_accuracy"] <= 1
    table = out.with_suffix(".md").read_text()
    assert "| our TRL TPOTrainer |" in table and "ratio to TRL GRPO" in table


def test_llm_benchmark_rejects_bad_arguments(tmp_path):
    from benchmarks import llm

    with pytest.raises(SystemExit):
        llm.main(["--k", "1", "--out", str(tmp_path / "x.json")])
    with pytest.raises(SystemExit):
        llm.main(["--warmup", "-1", "--out", str(tmp_path / "x.json")])
