"""``TargetPOTrainer`` on two processes (``accelerate launch``, CPU, gloo) equals one process.

The launched script is ``tests/data/trl_tpo_run.py``: fixed completions per global row (TRL's
``rollout_func``), plain SGD, two optimizer steps over one rollout (``num_iterations=2``, so the
second step has ``p`` at new parameters and ``q`` frozen at rollout time). Two runs per launch:

* ``whole``: 4 completions per process and micro-batch, each process holds one whole group;
* ``split``: 2 per micro-batch, 3 micro-batches per step, so a process holds 6 rows of the 12
  and the middle group has 2 rows on each process: ``p`` needs the other process's log-probs.

Both ranks must end with identical parameters, equal to a one-process run of the same global
batch with whole-group micro-batches.
"""

import importlib.util
import os
import socket
import subprocess
import sys
from pathlib import Path

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

SCRIPT = Path(__file__).parent / "data" / "trl_tpo_run.py"
STEPS, ITERATIONS = 2, 2
# name: (per-device batch, gradient accumulation) on 2 processes; the 1-process reference
# takes the same global batch in whole-group micro-batches (per_device 4 = K).
RUNS = {"whole": (4, 1), "split": (2, 3)}
REFERENCE = {"whole": (4, 2), "split": (4, 3)}


def _load_script():
    spec = importlib.util.spec_from_file_location("trl_tpo_run", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_processes_match_one_process(tmp_path, tiny_path):
    from transformers import AutoModelForCausalLM

    run = _load_script()
    # The split run puts rows of one group on both processes, the whole run does not.
    assert [per_device * accum % run.K != 0 for per_device, accum in RUNS.values()] == [False, True]
    out = tmp_path / "ddp"
    # `accelerate launch --cpu` starts one process unless mpirun is set up; the torchrun launcher
    # (--multi_gpu) starts both, and use_cpu=True in the config makes accelerate use gloo on CPU.
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--multi_gpu",
        "--num_processes",
        "2",
    ]
    cmd += ["--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]
    cmd += ["--main_process_port", str(_free_port()), str(SCRIPT), "--model", tiny_path]
    cmd += ["--out", str(out), "--steps", str(STEPS), "--iterations", str(ITERATIONS)]
    for name, (per_device, accum) in RUNS.items():
        cmd += ["--run", name, str(per_device), str(accum)]
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "HF_HOME": str(tmp_path / "hf"),  # no user accelerate config file
        "PYTHONPATH": os.pathsep.join([str(SCRIPT.parents[2]), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]

    model = AutoModelForCausalLM.from_pretrained(tiny_path)
    start = {n: p.detach() for n, p in model.named_parameters()}
    for name, (per_device, accum) in REFERENCE.items():
        rank0, rank1 = (torch.load(out / name / f"params_rank{r}.pt") for r in (0, 1))
        assert all(torch.equal(rank0[n], rank1[n]) for n in rank0), f"{name}: ranks differ"
        ref_dir = tmp_path / f"reference-{name}"
        ref_dir.mkdir()
        run.train(tiny_path, ref_dir, per_device, accum, STEPS, ITERATIONS)
        reference = torch.load(ref_dir / "params_rank0.pt")
        diff = max((rank0[n] - reference[n]).abs().max().item() for n in reference)
        moved = max((reference[n] - start[n]).abs().max().item() for n in reference)
        print(f"{name}: max |2 processes - 1 process| = {diff:.2e}, max |update| = {moved:.2e}")
        assert diff < 1e-6 and moved > 1e-2, (name, diff, moved)
