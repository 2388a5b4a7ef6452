"""Build (or find in the cache) the small pretrained model of a sparse prompt task.

``python -m zoo.pretrain_lm --task arithmetic [--out DIR] [--seed N] [--target-accuracy A]``
prints the model folder; see :mod:`tpo_agents.llm.pretrain` and docs/llm.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path


def main(argv: list[str] | None = None) -> Path:
    from tpo_agents.llm.pretrain import SPARSE_TASKS, pretrained_lm

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", default="arithmetic", choices=sorted(SPARSE_TASKS))
    parser.add_argument("--seed", type=int, default=0, help="weight initialisation and data order")
    parser.add_argument("--target-accuracy", type=float, default=0.10,
                        help="stop at the first validation check at or above it")
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help="default: $TPO_CACHE_DIR or ~/.cache/tpo/pretrained")
    parser.add_argument("--out", type=Path, default=None,
                        help="also copy the model folder here (save_pretrained layout)")
    args = parser.parse_args(argv)
    path = pretrained_lm(args.task, cache_dir=args.cache_dir, seed=args.seed,
                         target_accuracy=args.target_accuracy)
    if args.out is not None:
        shutil.copytree(path, args.out, dirs_exist_ok=True)
        path = args.out
    report = json.loads((path / "sft_report.json").read_text())
    print(f"{path}  ({report['parameters']:,} parameters, {report['steps']} SFT steps, "
          f"validation accuracy {report['val_accuracy']:.3f})")
    return path


if __name__ == "__main__":
    main()
