"""Fixed-seed fingerprints of the agents and the studies, to compare before and after a refactor.

Each line: a name and the sha256 (first 16 hex) of what a fixed-seed run produced: an
agent's parameters after a short ``learn()`` (bandit, Token Reversal, CartPole's critic
groups, Pendulum's branch groups, a tiny causal LM), a study's JSON with its wall-clock and
path fields removed, or the report page of ``docs/results``. A refactor that keeps
behaviour keeps every line; torch and platform versions may change them, so the lines are
compared on one machine, not asserted by a test. From the repository root::

    python tests/behaviour_digest.py > before.txt   # on the old commit
    python tests/behaviour_digest.py | diff before.txt -
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

torch.set_num_threads(1)

VOLATILE = ("time", "wall", "seconds", "code_version", "date", "host", "elapsed", "stale", "command", "out", "path", "fps", "ms", "cache")


def _strip(value):
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in sorted(value.items())
                if not any(word in k.lower() for word in VOLATILE)}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def json_digest(path: Path) -> str:
    return hashlib.sha256(json.dumps(_strip(json.loads(path.read_text())), sort_keys=True).encode()).hexdigest()[:16]


def params_digest(model) -> str:
    digest = hashlib.sha256()
    for name, tensor in sorted(model.policy.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def agents() -> dict[str, str]:
    import gymnasium as gym

    import tpo_gym  # noqa: F401
    from tpo_agents import DG, GRPO, PG, TPO

    out = {}
    for algo in (TPO, GRPO, DG, PG):
        model = algo("MlpPolicy", gym.make("MultiContextBandit-v0", n_contexts=5), seed=0, batch_size=20)
        model.learn(400)
        out[f"{algo.__name__}-bandit"] = params_digest(model)
    for algo in (TPO, GRPO, DG):
        model = algo("TransformerPolicy", "TokenReversal-sequential-v0", seed=0, batch_size=8)
        model.learn(1000)
        out[f"{algo.__name__}-token-sequential"] = params_digest(model)
    model = TPO("MlpPolicy", "CartPole-v1", seed=0)
    model.learn(600)
    out["TPO-cartpole-critic"] = params_digest(model)
    model = TPO("MlpPolicy", "Pendulum-v1", seed=0, batch_size=8, group_mode="branch")
    model.learn(200)
    out["TPO-pendulum-branch"] = params_digest(model)
    out.update(causal_lm())
    return out


def causal_lm() -> dict[str, str]:
    import tpo_gym  # noqa: F401
    from tpo_agents import TPO
    from zoo.paper.llm.tiny import build_tiny_causal_lm

    with tempfile.TemporaryDirectory() as tmp:
        build_tiny_causal_lm(path=tmp, seed=0)
        model = TPO("CausalLMPolicy", "TinyArithmetic-v0", seed=0, batch_size=2, n_candidates=4,
                    policy_kwargs={"model": tmp, "max_new_tokens": 4})
        model.learn(16)
        return {"TPO-causal-lm": params_digest(model)}


def studies() -> dict[str, str]:
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        runs = {
            "tabular-single": ["tabular-single", "--seeds", "3", "--steps", "50"],
            "terminal-H7": ["terminal", "--lengths", "7", "--methods", "tpo", "grpo", "--seeds", "1", "--steps", "4", "--workers", "1"],
            "mnist-digits": ["mnist", "--dataset", "digits", "--seeds", "1", "--steps", "200", "--eval-every", "100", "--workers", "1"],
        }
        for name, argv in runs.items():
            folder = tmp / name
            subprocess.run([sys.executable, "-m", "zoo.reproduce", *argv, "--out", str(folder), "--quiet"],
                           check=True, capture_output=True, text=True)
            for path in sorted(folder.glob("*.json")):
                out[f"{name}:{path.name}"] = json_digest(path)
        report = tmp / "REPORT.md"
        subprocess.run([sys.executable, "-m", "zoo.report", "docs/results", "--out", str(report)],
                       check=True, capture_output=True, text=True)
        out["report:docs/results"] = hashlib.sha256(report.read_bytes()).hexdigest()[:16]
    return out


if __name__ == "__main__":
    results = {**agents(), **studies()}
    for key, value in results.items():
        print(f"{key:40s} {value}")
