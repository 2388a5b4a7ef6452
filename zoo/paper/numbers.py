"""The paper's published numbers and settings, as printed, in one place.

The tabular and MNIST claims (:data:`TABULAR_SINGLE`, :data:`TABULAR_MULTI`, :data:`MNIST`,
:data:`MNIST_NOTE`), the LLM recipe's settings and claim (:data:`LLM_RECIPE`,
:data:`LLM_CLAIM`) and the Token Reversal tables below.

Each Token Reversal table is ``{(method, setting_label): value}``: ``method`` is the name the results store
the method under (:func:`zoo.paper.token.methods.record_key`: ``tpo_token`` in Tables 1, 2 and 5,
``ppo`` for the critic-free PPO), ``setting_label`` the label of one of
:mod:`zoo.paper.token.experiments`' settings, and ``value`` the paper's string (``"-"``: never
reached; ``">95"``: the paper's ``-`` in Table 3). Final errors are in %.
"""

from __future__ import annotations

from collections.abc import Sequence

Table = dict[tuple[str, str], str]


def _row(method: str, labels: Sequence[str], values: Sequence[str]) -> Table:
    return {(method, lab): v for lab, v in zip(labels, values)}


def _paper(*rows: Table) -> Table:
    out: Table = {}
    for r in rows:
        out.update(r)
    return out


_V = ["V=2", "V=4", "V=8", "V=16"]
_H = ["H=7", "H=8", "H=9", "H=10"]
_K = ["K=4", "K=8", "K=16", "K=32", "K=64"]
_E = ["epochs=1", "epochs=2", "epochs=4", "epochs=8", "epochs=16"]
_ETA = ["eta=0.25", "eta=0.5", "eta=1", "eta=2", "eta=4"]

TOKEN_VOCAB: Table = _paper(
    _row("tpo_token", _V, ["58", "74", "103", "102"]),
    _row("grpo_token", _V, ["904", "141", "124", "148"]),
    _row("dg", _V, ["199", "273", "314", "393"]),
    _row("ppo", _V, ["872", "181", "191", "259"]),
)
"""Table 1: steps to 1% error against the vocabulary size V."""

_VARIATIONS = {  # Table 2 columns TPO_token, GRPO_token, DG, PPO
    "bag/copy": ("81", "338", "219", "170"),
    "bag/flip": ("56", "104", "201", "146"),
    "bag/rev. copy": ("55", "352", "202", "-"),
    "bag/rev. flip": ("59", "209", "200", "143"),
    "sequential/copy": ("295", "-", "439", "-"),
    "sequential/flip": ("321", "-", "349", "-"),
    "sequential/rev. copy": ("159", "-", "515", "-"),
    "sequential/rev. flip": ("276", "-", "309", "-"),
}
TOKEN_VARIATIONS: Table = {
    (m, s): v[i]
    for s, v in _VARIATIONS.items()
    for i, m in enumerate(("tpo_token", "grpo_token", "dg", "ppo"))
}
"""Table 2: steps to 1% error per reward and target."""

TERMINAL: dict[str, Table] = {
    "prompts": _paper(
        _row("tpo", _H, ["6.9", "8.6", "6.1", "7.4"]),
        _row("grpo", _H, ["14.5", "27.6", "30.0", "50.4"]),
        _row("grpo_no_kl", _H, ["66.6", "92.5", ">95", ">95"]),
        _row("ppo", _H, ["12.0", "26.3", "90.6", ">95"]),
        _row("dg", _H, ["33.8", "58.8", ">95", ">95"]),
    ),
    "interactions": _paper(
        _row("tpo", _H, ["1.8", "2.8", "5.3", "19.0"]),
        _row("grpo", _H, ["9.6", "23.2", "36.2", "48.7"]),
        _row("grpo_no_kl", _H, ["78.1", "83.8", ">95", ">95"]),
        _row("ppo", _H, ["38.6", "62.1", "66.2", ">95"]),
        _row("dg", _H, ["47.7", "69.4", ">95", ">95"]),
    ),
}
"""Table 3: final error (%) against H, prompt-matched and interaction-matched."""

ETA_SWEEP: dict[str, Table] = {
    "final_error": _row("tpo_token", _ETA, ["1.0", "0.0", "0.7", "1.0", "0.8"]),
    "steps_to_1pct": _row("tpo_token", _ETA, ["72", "67", "96", "141", "260"]),
}
"""Table 5: TPO_token's final error (%) and steps to 1% against eta."""

K_SWEEP: Table = _paper(
    _row("tpo", _K, ["8.9", "5.2", "5.1", "2.6", "0.36"]),
    _row("grpo", _K, ["19.4", "19.8", "9.2", "4.4", "5.6"]),
)
"""Sparse-reward diagnostics: final error (%) against the number of candidates K."""

EPOCH_SWEEP: Table = _paper(
    _row("tpo", _E, ["0.02", "<2.3", "0.05", "<2.3", "<2.3"]),
    _row("grpo", _E, ["4.3", "37.6", "6.3", "3.3", "1.1"]),
)
"""Sparse-reward diagnostics: final error (%) against the number of epochs."""

ZERO_VARIANCE_MASK: Table = {("grpo", "H=8"): "6.3", ("grpo_masked", "H=8"): "29.7"}
"""Sparse-reward diagnostics: GRPO's final error (%) without and with zero-variance masking."""

ABLATIONS: Table = {
    ("tpo", "H=10"): "7.4",
    ("tpo_no_anchor", "H=10"): ">99",
    ("group_pg", "H=10"): ">99",
    ("grpo_no_kl", "H=10"): ">99",
}
"""The H = 10 ablation: final error (%)."""


TABULAR_SINGLE = (
    "single-context symmetric bandit (A = 100, B = 100, 150 steps, 100 seeds): "
    "TPO and DG converge fastest and keep improving below 1% error; PG and GRPO plateau "
    "higher; TPO has the lowest misalignment."
)
"""The single-context symmetric bandit study: the paper's claim (its figure, no table)."""

TABULAR_MULTI = (
    "multi-context exact bandit (N = 100, A = 10, 1000 steps, 100 seeds): CE is "
    "fastest; TPO overtakes DG and GRPO after the early transient, ends lowest of the RL "
    "updates, and its direction stays closest to CE."
)
"""The multi-context exact bandit study: the paper's claim."""

MNIST = {
    "tpo": {"final_error": "0.029", "steps_to_5pct": "1600"},
    "dg": {"steps_to_5pct": "2200"},
    "pg": {"final_error": "0.053"},
    "grpo": {"final_error": "0.059"},
    "group_pg": {"final_error": "0.072"},
}
"""The paper's MNIST numbers (real MNIST only): final test error and steps to 5% error."""

MNIST_NOTE = (
    "MNIST contextual bandit (real MNIST; MLP 784-50-50-10, Adam 1e-3, batch 100, "
    "10,000 steps, 20 seeds, test error every 200 steps): final test error TPO 2.9%, "
    "PG 5.3%, GRPO 5.9%, Group PG 7.2%; TPO reaches 5% error at step 1,600 vs 2,200 "
    "for DG. (The paper reports no Fashion-MNIST or digits numbers.)"
)

LLM_RECIPE = {
    "k": 16,
    "prompts": 16,
    "lr": 1e-5,
    "lora_rank": 32,
    "lora_alpha": 64,
    "beta": 1e-3,
    "max_new_tokens": 512,
}
"""The paper's LLM RLVR settings (Qwen3-1.7B with verl on 4 A100s; docs/algorithms.md 8.5)."""

LLM_CLAIM = (
    "Paper (different scale: Qwen3-1.7B, verl, 4 A100s, K = 16, 300 steps, Reasoning Gym "
    "graph colouring): TPO reaches about 0.96, GRPO stays near 0."
)
"""The paper's LLM claim (its Figure 10), as the LLM study's pages quote it."""
