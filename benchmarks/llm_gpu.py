"""The LLM RLVR comparison on a GPU, in under five minutes: bf16 and, if installed, vLLM.

The same runs as ``python -m zoo.llm_study`` (small pretrained model of a sparse task, held-out
greedy accuracy vs step, seconds per step), on CUDA: our ``TPO`` / ``GRPO`` agents on
``CausalLMPolicy`` in bfloat16, TRL's ``GRPOTrainer`` (``loss_type="dapo"``, its default) and
our ``TargetPOTrainer`` with ``bf16=True`` and, when ``vllm`` imports, ``use_vllm=True``
(colocated). Never run by the tests on a GPU; it refuses to start without CUDA unless
``--device cpu`` is given (a dry run of the same code path).

Usage::

    python -m benchmarks.llm_gpu                       # on a machine with CUDA
    python -m benchmarks.llm_gpu --device cpu --steps 2 --n-eval 8   # dry run

Writes ``--out`` (JSON) and a markdown table next to it.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
import time
from pathlib import Path

METHODS = ("tpo", "grpo", "trl_dapo", "trl_targetpo")


def main(argv: list[str] | None = None) -> dict:
    import torch

    from zoo.paper.llm.study import LABELS, run_one, summarize

    parser = argparse.ArgumentParser(prog="python -m benchmarks.llm_gpu", description=__doc__.split("\n")[0])
    parser.add_argument("--task", default="arithmetic")
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--k", type=int, default=16)
    parser.add_argument("--lr", type=float, default=3e-5)
    parser.add_argument("--eval-every", type=int, default=25)
    parser.add_argument("--n-eval", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-vllm", action="store_true", help="TRL generates with transformers")
    parser.add_argument("--out", type=Path, default=Path("results/llm-gpu.json"))
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("no CUDA device is available to this torch "
                     f"({torch.__version__}); run on a GPU machine or pass --device cpu")
    on_gpu = args.device == "cuda"
    use_vllm = on_gpu and not args.no_vllm and importlib.util.find_spec("vllm") is not None
    cfg = dict(task=args.task, steps=args.steps, prompts=args.prompts, k=args.k,
               eval_every=args.eval_every, n_eval=args.n_eval, threads=torch.get_num_threads(),
               lr=args.lr, device=args.device, dtype="bfloat16" if on_gpu else "float32")
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for method in args.methods:
            run_cfg = dict(cfg, use_vllm=use_vllm and method.startswith("trl_"))
            start = time.perf_counter()
            run = run_one(method, run_cfg, args.seed, Path(tmp) / "cache", Path(tmp) / "work")
            rows[method] = dict(summarize([run]), wall_seconds=time.perf_counter() - start,
                                use_vllm=run_cfg["use_vllm"])
            print(f"[gpu] {method}: {rows[method]['start_accuracy']:.3f} -> "
                  f"{rows[method]['final_mean']:.3f} in {rows[method]['wall_seconds']:.0f} s",
                  flush=True)
    result = {"config": dict(cfg, argv=list(argv) if argv is not None else sys.argv[1:],
                             use_vllm=use_vllm,
                             gpu=torch.cuda.get_device_name(0) if on_gpu else None),
              "methods": rows}
    lines = [f"# LLM RLVR on {result['config']['gpu'] or 'CPU (dry run)'}: {args.task}", "",
             "| method | start | final | s / step | wall s | vLLM |", "|---|---|---|---|---|---|"]
    for method, r in rows.items():
        lines.append(f"| {LABELS[method]} | {r['start_accuracy']:.3f} | {r['final_mean']:.3f} | "
                     f"{r['seconds_per_step']:.3f} | {r['wall_seconds']:.0f} | {r['use_vllm']} |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return result


if __name__ == "__main__":
    main()
