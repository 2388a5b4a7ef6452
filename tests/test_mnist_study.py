"""The MNIST contextual bandit study (docs/algorithms.md, section 9.1) end to end on the 8x8 digits."""

import json
import os

import numpy as np
import pytest

from zoo.paper import mnist as mnist_study
from zoo.paper.reproduce import EXPERIMENTS, build_parser
from zoo.paper.reproduce import main as reproduce_main

METHODS = {"ce", "pg", "dg", "tpo", "grpo", "group_pg"}
TINY = ["--dataset", "digits", "--steps", "150", "--eval-every", "50"]


@pytest.fixture(scope="module")
def digits_run(tmp_path_factory):
    """2 seeds x 6 methods x 150 updates on digits, in this process (about 10 s)."""
    out = tmp_path_factory.mktemp("mnist")
    result = reproduce_main(["mnist", *TINY, "--seeds", "2", "--workers", "1", "--out", str(out), "--quiet"])
    return out, result


def test_cli_writes_json_png_markdown(digits_run):
    out, result = digits_run
    data = json.loads((out / "mnist-digits.json").read_text())
    assert data["experiment"] == "mnist-digits"
    cfg = data["config"]
    assert (cfg["dataset"], cfg["seeds"], cfg["steps"], cfg["eval_every"]) == ("digits", 2, 150, 50)
    assert (cfg["input_dim"], cfg["batch_size"], cfg["net_arch"]) == (64, 100, [50, 50])
    assert cfg["agent_kwargs"]["pg"] == cfg["agent_kwargs"]["dg"] == {"baseline": "pi_squared"}
    # TPO / Group PG: all 10 classes per image; PG, DG, GRPO: one sampled class per image.
    assert cfg["group_modes"] == {
        "tpo": "all_actions",
        "group_pg": "all_actions",
        "pg": "single",
        "dg": "single",
        "grpo": "single",
    }
    assert set(data["methods"]) == METHODS
    for m in data["methods"].values():
        assert {"final_error", "final_error_se", "steps_to_1pct", "steps_to_5pct", "curves"} <= set(m)
        assert m["curves"]["steps"] == [0, 50, 100, 150]
        per_seed = np.array(m["curves"]["error_per_seed"])
        assert per_seed.shape == (2, 4)
        assert m["final_error"] == pytest.approx(per_seed[:, -1].mean())
    assert data["methods"]["tpo"]["final_error"] == pytest.approx(result["methods"]["tpo"]["final_error"])
    png = (out / "mnist-digits.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    md = (out / "mnist-digits.md").read_text()
    assert "| TPO |" in md and "| Group PG |" in md and "steps to 5pct" in md
    assert "Paper:" in md and "TPO 2.9%" in md


def test_ce_and_tpo_learn_well_below_chance(digits_run):
    methods = digits_run[1]["methods"]
    per_seed = {k: np.array(m["curves"]["error_per_seed"]) for k, m in methods.items()}
    # Every method starts from the same weights for a seed: the same step-0 error, near chance.
    start = per_seed["ce"][:, 0]
    assert (start > 0.75).all()
    for curve in per_seed.values():
        assert np.array_equal(curve[:, 0], start)
    # Measured at 150 updates (seeds 0, 1): CE 0.072, TPO 0.240; PG 0.391; chance 0.9.
    # Over seeds 0..7 the worst seed was CE 0.106, TPO 0.370.
    assert methods["ce"]["final_error"] < 0.2
    assert methods["tpo"]["final_error"] < 0.5
    assert methods["ce"]["final_error"] < methods["tpo"]["final_error"]


def test_same_seed_same_curve_in_worker_processes(digits_run):
    """Seed 1 rerun in 2 worker processes reproduces the in-process curves exactly."""
    methods = digits_run[1]["methods"]
    cfg = mnist_study.MnistConfig(dataset="digits", steps=150, eval_every=50)
    rerun = mnist_study.run_study(cfg, [1], methods=("tpo", "ce"), workers=2, progress=False)
    for m in ("tpo", "ce"):
        assert rerun[m]["error"].tolist() == [methods[m]["curves"]["error_per_seed"][1]]


def test_callback_records_after_exact_update_counts():
    cfg = mnist_study.MnistConfig(dataset="digits", steps=4, eval_every=3)
    assert cfg.eval_steps == [0, 3, 4]
    images, labels = mnist_study.dataset_split(cfg, "test")
    fresh = mnist_study.make_agent("grpo", cfg, seed=3)
    model = mnist_study.make_agent("grpo", cfg, seed=3)
    callback = mnist_study.TestErrorCallback(images, labels, cfg.eval_steps)
    model.learn(cfg.steps * cfg.batch_size, callback=callback)
    assert model._n_updates == 4
    assert sorted(callback.errors) == [0, 3, 4]
    assert callback.errors[0] == mnist_study.greedy_error(fresh.policy, images, labels)
    assert callback.errors[4] == mnist_study.greedy_error(model.policy, images, labels)


def test_bad_dataset_is_an_argparse_error(capsys):
    with pytest.raises(SystemExit):
        reproduce_main(["mnist", "--dataset", "cifar10"])
    err = capsys.readouterr().err
    assert "invalid choice: 'cifar10'" in err and "digits" in err


def test_mnist_defaults_follow_the_paper():
    args = build_parser().parse_args(["mnist"])
    assert (args.dataset, args.eval_every, args.seeds) == ("mnist", 200, None)
    assert args.workers == min(2, os.cpu_count())
    exp = EXPERIMENTS["mnist"]
    assert (exp.default_steps, exp.default_seeds) == (10_000, 20)
    assert EXPERIMENTS["tabular-single"].default_seeds == 100
    with pytest.raises(ValueError, match="dataset must be one of"):
        mnist_study.MnistConfig(dataset="cifar10")
