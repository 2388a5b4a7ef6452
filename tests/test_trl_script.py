"""``python -m zoo.trl_train`` (zoo/paper/llm/trl_train.py): TRL's ``trl grpo`` script with our
trainer, run from the command line on the tiny offline model (tests/conftest.py's ``tiny_path``)."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from zoo.paper.llm import trl_train  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# K = 4 completions of at most 4 tokens, 2 prompts per step: a step takes ~0.1 s on a CPU.
TOY = [
    "--num_generations",
    "4",
    "--per-device-train-batch-size",
    "8",
    "--max-completion-length",
    "4",
    "--learning_rate",
    "1e-3",
    "--disable_tqdm",
    "true",
    "--seed",
    "0",
]


def cli(*args: str, timeout: float = 300, **kwargs) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "zoo.trl_train", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        **kwargs,
    )


def test_every_config_field_is_a_flag():
    from trl import GRPOConfig

    from tpo_agents.trl import TargetPOConfig

    for algo, config_cls in (("tpo", TargetPOConfig), ("grpo", GRPOConfig)):
        options = {o for a in trl_train.make_parser(algo)._actions for o in a.option_strings}
        for f in (*dataclasses.fields(config_cls), *dataclasses.fields(trl_train.ScriptArguments)):
            if f.init:
                assert f"--{f.name}" in options, (algo, f.name)
        assert ("--tpo_eta" in options) == (algo == "tpo")
    assert {"--lora-r", "--lora-alpha", "--report-to", "--reward-funcs", "--save-steps"} <= options


def test_defaults_and_a_yaml_config(tmp_path, tiny_path):
    _, script, config = trl_train.parse_args(
        ["--model", tiny_path, "--dataset", "TinyArithmetic-v0", "--output_dir", str(tmp_path)]
    )
    assert script.algo == "tpo" and type(config).__name__ == "TargetPOConfig"
    # Checkpoints on by default, the last two kept; a log line per step.
    assert (config.save_strategy, config.save_steps, config.save_total_limit) == ("steps", 50, 2)
    assert config.logging_steps == 1 and config.report_to == []
    yaml = tmp_path / "run.yaml"
    yaml.write_text(f"model: {tiny_path}\ndataset: TinyArithmetic-v0\nalgo: grpo\nbeta: 0.01\n")
    _, script, config = trl_train.parse_args(["--config", str(yaml), "--output_dir", str(tmp_path)])
    assert script.algo == "grpo" and type(config).__name__ == "GRPOConfig" and config.beta == 0.01
    # An abbreviated --algo still picks GRPO's config.
    _, script, config = trl_train.parse_args(
        ["--model", tiny_path, "--dataset", "x", "--alg", "grpo", "--output_dir", str(tmp_path)]
    )
    assert type(config).__name__ == "GRPOConfig"


@pytest.mark.slow
def test_command_line_run_with_lora_tensorboard_and_a_checkpoint(tmp_path, tiny_path):
    out = tmp_path / "grpo"
    proc = cli(
        "--model",
        tiny_path,
        "--dataset",
        "TinyArithmetic-v0",
        "--algo",
        "grpo",
        "--output_dir",
        str(out),
        "--max_steps",
        "2",
        "--lora-r",
        "4",
        "--lora-alpha",
        "8",
        "--lora_target_modules",
        "q_proj",
        "v_proj",
        "--report-to",
        "tensorboard",
        *TOY,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "trl_train: GRPO at step 2" in proc.stdout and "generated tokens/s" in proc.stdout
    summary = json.loads((out / "trl_train.json").read_text())
    assert summary["global_step"] == 2 and summary["steps_run"] == [1, 2]
    assert summary["reward_funcs"] == ["tiny_arithmetic"]  # the environment's verifier
    assert summary["config"]["save_total_limit"] == 2
    # 2 prompts x K = 4 completions per step, each 1 to 4 tokens.
    for row in summary["step_log"]:
        assert row["completions"] == 8 and 8 <= row["generated_tokens"] <= 32
        assert 0.0 <= row["reward"] <= 1.0 and row["seconds"] > 0
    assert summary["throughput"]["generated_tokens_per_s"] > 0
    adapter = json.loads((out / "adapter_config.json").read_text())
    assert (adapter["r"], adapter["lora_alpha"]) == (4, 8)
    assert sorted(adapter["target_modules"]) == ["q_proj", "v_proj"]
    assert (out / "checkpoint-2" / "trainer_state.json").is_file()  # saved at the last step
    assert list(out.glob("runs/*/events.out.tfevents.*")), "no tensorboard event file"


@pytest.mark.slow
def test_a_killed_run_resumes_from_its_last_checkpoint(tmp_path, tiny_path, capsys):
    out = tmp_path / "tpo"
    argv = [
        "--model",
        tiny_path,
        "--dataset",
        "TinyArithmetic-v0",
        "--output_dir",
        str(out),
        "--max_steps",
        "40",
        "--save_steps",
        "4",
        *TOY,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "zoo.trl_train", *argv],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 240
        while not list(out.glob("checkpoint-*/trainer_state.json")):
            assert proc.poll() is None, f"the run ended early: {proc.stderr.read()[-3000:]}"
            assert time.monotonic() < deadline, "no checkpoint within 240 s"
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)  # as a preempted job dies: no clean-up
    finally:
        proc.kill()
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, "the run finished before it was killed"
    assert not (out / "trl_train.json").exists()
    last, _ = trl_train.last_complete_checkpoint(out)
    stopped_at = json.loads(Path(last, "trainer_state.json").read_text())["global_step"]
    assert 4 <= stopped_at < 40

    with pytest.raises(SystemExit) as exit_:  # not silently restarted over the checkpoints
        trl_train.main(argv)
    assert exit_.value.code == 2 and "pass --resume" in capsys.readouterr().err

    summary = trl_train.main([*argv, "--resume"])
    assert summary["resumed_from"] == last
    # The step count continues from the checkpoint instead of restarting at 1.
    assert summary["steps_run"] == list(range(stopped_at + 1, 41))
    assert summary["global_step"] == 40
    state = json.loads((out / "checkpoint-40" / "trainer_state.json").read_text())
    assert state["global_step"] == 40
    assert [h["step"] for h in state["log_history"] if "reward" in h] == list(range(1, 41))


@pytest.mark.slow
def test_a_data_file_with_its_own_prompt_column_and_rewards(tmp_path, tiny_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = tmp_path / "sums.parquet"
    rows = [{"question": f"{a}+{b}=", "answer": str(a + b)} for a in range(3) for b in range(3)]
    pq.write_table(pa.Table.from_pylist(rows), data)
    out = tmp_path / "run"
    summary = trl_train.main(
        [
            "--model",
            tiny_path,
            "--dataset",
            str(data),
            "--prompt_column",
            "question",
            "--reward_funcs",
            "answer_match",
            "think_format_reward",
            "--reward_weights",
            "1",
            "0.5",
            "--output_dir",
            str(out),
            "--max_steps",
            "1",
            *TOY,
        ]
    )
    assert summary["reward_funcs"] == ["answer_match", "think_format_reward"]
    assert summary["global_step"] == 1 and 0.0 <= summary["reward"][0] <= 1.5


def test_gsm8k_env_with_a_local_parquet_file(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = tmp_path / "gsm8k.parquet"
    rows = [
        {"question": "What is 3 plus 4?", "answer": "3 + 4 = 7\n#### 7"},
        {"question": "What is 20 plus 22?", "answer": "20 + 22 = 42\n#### 42"},
    ]
    pq.write_table(pa.Table.from_pylist(rows), data)
    script = trl_train.ScriptArguments(model="unused", dataset="GSM8K-v0", data_file=str(data))
    dataset, env = trl_train.load_prompts(script, chat=True)
    assert len(dataset) == 2 and dataset[1]["prompt"][-1]["content"].startswith(
        "What is 20 plus 22?"
    )
    (reward,) = trl_train.resolve_rewards(script, _config(), env, dataset.column_names)
    assert reward(["<answer>7</answer>", "<answer>42</answer>"], prompt_index=[1, 1]) == [0.0, 1.0]


def _config():
    from tpo_agents.trl import TargetPOConfig

    return TargetPOConfig(output_dir="unused", report_to="none", use_cpu=True, bf16=False)


def test_answer_match_reads_tags_hashes_and_numbers():
    reward = trl_train.AnswerMatch("answer")
    completions = [
        "so <answer>7</answer>",
        "#### 1,000",
        [{"role": "assistant", "content": "the answer is 42."}],
        "no number here",
        "<answer>8</answer>",
    ]
    answers = ["7", "1000", "6 * 7 = 42\n#### 42", "3", "7"]
    assert reward(completions, answer=answers) == [1.0, 1.0, 1.0, 0.0, 0.0]


def test_bad_input_names_the_value_and_what_was_expected(tmp_path, tiny_path, capsys, monkeypatch):
    import pandas as pd
    import transformers.integrations

    # wandb not installed, whatever this machine has
    monkeypatch.setattr(
        transformers.integrations, "get_available_reporting_integrations", lambda: ["tensorboard"]
    )

    table = tmp_path / "table.jsonl"
    pd.DataFrame({"question": ["1+1="], "solution": ["2"]}).to_json(
        table, orient="records", lines=True
    )
    empty_folder = tmp_path / "empty"
    empty_folder.mkdir()
    out = ["--output_dir", str(tmp_path / "out")]
    tiny = ["--model", tiny_path]
    cases = [
        (
            ["--model", str(tmp_path / "nope"), "--dataset", "TinyArithmetic-v0"],
            ["nope", "no such folder", "hf download"],
        ),
        (["--model", str(empty_folder), "--dataset", "TinyArithmetic-v0"], ["no config.json"]),
        (
            [*tiny, "--dataset", "Nope-v0"],
            ["'Nope-v0'", "TinyArithmetic-v0", "GSM8K-v0", ".parquet"],
        ),
        ([*tiny, "--dataset", "CartPole-v1"], ["'CartPole-v1'", "not a prompt environment"]),
        ([*tiny, "--dataset", "GSM8K-v0"], ["GSM8K-v0", "path="]),
        (
            [*tiny, "--dataset", "GSM8K-v0", "--data_file", str(tmp_path / "gsm.parquet")],
            ["gsm.parquet", "not found"],
        ),
        (
            [*tiny, "--dataset", str(tmp_path / "gone.jsonl"), "--reward_funcs", "answer_match"],
            ["gone.jsonl", "no such file"],
        ),
        (
            [*tiny, "--dataset", str(table), "--reward_funcs", "answer_match"],
            ["no column 'prompt'", "question, solution"],
        ),
        (
            [*tiny, "--dataset", str(table), "--prompt_column", "question"],
            ["no verifier", "--reward_funcs"],
        ),
        (
            [
                *tiny,
                "--dataset",
                str(table),
                "--prompt_column",
                "question",
                "--reward_funcs",
                "answer_match",
            ],
            ["answer_match needs the column 'answer'", "prompt: solution"],
        ),
        (
            [
                *tiny,
                "--dataset",
                str(table),
                "--prompt_column",
                "question",
                "--reward_funcs",
                "verifier",
            ],
            ["verifier", "not a prompt environment"],
        ),
        (
            [*tiny, "--dataset", "TinyArithmetic-v0", "--reward_funcs", "nope"],
            ["'nope'", "unknown reward", "answer_match"],
        ),
        (
            [*tiny, "--dataset", "TinyArithmetic-v0", "--reward_funcs", "no_such_module.f"],
            ["no_such_module"],
        ),
        (
            [*tiny, "--dataset", "TinyArithmetic-v0", "--reward_weights", "1", "2"],
            ["2 values for 1 reward"],
        ),
        (
            [*tiny, "--dataset", "TinyArithmetic-v0", "--env_kwargs", "size=3"],
            ["--env_kwargs", "not JSON"],
        ),
        (
            [*tiny, "--dataset", "TinyArithmetic-v0", "--report_to", "wandb"],
            ["not installed"],
        ),
        ([*tiny, "--dataset", "TinyArithmetic-v0", "--lora_r", "-1"], ["--lora_r must be >= 0"]),
        (
            [*tiny, "--dataset", "TinyArithmetic-v0", "--algo", "grpo", "--tpo_eta", "2"],
            ["need --algo tpo"],
        ),
        ([*tiny, "--dataset", "TinyArithmetic-v0", "--tpo_eta", "-1"], ["tpo_eta must be", "-1"]),
        ([*tiny, "--dataset", "TinyArithmetic-v0", "--no_such_flag", "1"], ["--no_such_flag"]),
    ]
    for argv, expected in cases:
        with pytest.raises(SystemExit) as exit_:
            trl_train.main([*argv, *out])
        err = capsys.readouterr().err
        assert exit_.value.code == 2, (argv, err)
        for text in expected:
            assert text in err, (argv, text, err)
    assert not (tmp_path / "out").exists()  # nothing trained, nothing written


def test_missing_output_dir_and_help(tiny_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        trl_train.main(["--model", tiny_path, "--dataset", "TinyArithmetic-v0"])
    assert exit_.value.code == 2 and "--output_dir" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        trl_train.main(["--help"])
    help_text = capsys.readouterr().out
    assert exit_.value.code == 0 and "--tpo_eta" in help_text and "--reward_funcs" in help_text
