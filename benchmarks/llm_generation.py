"""Completion tokens per second of sampling K completions per prompt, on a tiny offline LM.

What is compared (one call = K completions for each of B prompts, from prompt texts to
completion tokens; same model, prompts, K, B, ``max_new_tokens`` and sampling settings
everywhere: temperature 1, top-p 1, top-k 0, stop at EOS, as TRL's ``GRPOConfig`` defaults):

* ``shared``: ``CausalLMPolicy.sample_completions(prompts, K)`` with its default shared
  prompt cache (:func:`tpo_agents.llm.generation.generate_shared_prefix`: the B prompts are
  pre-filled once, the cache is repeated K times, then ``generate`` decodes);
* ``generate`` (the **baseline** of the ratios): the same policy with
  ``shared_prompt_cache=False``, whose sampling call is
  ``model.generate(input_ids, attention_mask, num_return_sequences=K, ...)``: every prompt is
  pre-filled K times;
* ``trl``: TRL ``GRPOTrainer``'s generation path, reproduced from trl 1.16's
  ``grpo_trainer.py`` (``_generate`` -> ``_tokenize_prompts`` -> ``_generate_single_turn``,
  the "regular generation path": no vLLM, no continuous batching), call by call: the batch
  holds each prompt K times in a row (``RepeatSampler``); the B * K texts are tokenized with
  ``processing_class(text=prompts)["input_ids"]``; ``trl.trainer.utils.pad`` left-pads ids and
  mask (``pad_to_multiple_of=None``: ``"auto"`` off Neuron); then, under ``torch.no_grad()``,
  ``model.generate(input_ids=..., attention_mask=..., generation_config=GenerationConfig(
  max_new_tokens, do_sample=True, pad/bos/eos token ids, temperature, top_p, top_k,
  min_p=None, repetition_penalty=1.0, cache_implementation=None, disable_compile=True))``
  (the trainer's ``generation_kwargs``; the eos ids are the tokenizer's plus the model's),
  and the completion mask after the first EOS with the per-row token lists. The trainer's
  ``unwrap_model_for_generation`` only unwraps the model here (one CPU process, no
  DeepSpeed/FSDP; its generation-config override is a no-op on transformers >= 5).

How it is measured

* model: :func:`zoo.paper.llm.tiny.build_tiny_causal_lm` (random 2-layer Llama, hidden
  size 64, character tokenizer: one token per character), ``max_position_embeddings`` 512 so
  long prompts stay in range, float32, eval mode (no dropout either way), CPU;
* prompts: B random printable strings per length setting (``--prompt-lengths``, default a
  short ~20-token and a long ~300-token setting), each length drawn within +-10% so
  that batches are left-padded; fixed seed;
* tokens per second = completion tokens generated in a call (through each row's first EOS:
  the sum of the completion mask) / the call's wall time (``time.perf_counter``); reported as
  the median over ``--rounds`` calls after ``--warmup`` discarded ones, the implementations
  interleaved in a rotating order inside each round so slow drifts of the machine hit all of
  them alike, at each torch thread count of ``--threads``;
* ratios: tokens/s over the baseline's (``generate``) and over TRL's, same prompt length and
  thread count, from the same run;
* a check before timing: with one seed, ``shared`` and ``generate`` must return the same
  completions (the shared cache changes the cost, not the samples); recorded in the JSON.

Usage (from the repository root)::

    python -m benchmarks.llm_generation                     # defaults below
    python -m benchmarks.llm_generation --threads 1 --rounds 5 --prompt-lengths 20 300 1000

It writes ``--out`` (JSON: config, per-call seconds and tokens) and a markdown table next to
it (same name, ``.md``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shlex
import statistics
import string
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from gymnasium import spaces  # noqa: E402

IMPLS = ("shared", "generate", "trl")
BASELINE = "generate"
LABELS = {
    "shared": "ours: shared prompt cache (default)",
    "generate": "`generate(num_return_sequences=K)`",
    "trl": "TRL GRPOTrainer generation path",
}


@dataclass
class Setup:
    """The shared work of one call."""

    prompts: int = 8
    k: int = 8
    max_new_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_position_embeddings: int = 512
    seed: int = 0


def make_prompts(n: int, length: int, seed: int) -> list[str]:
    """``n`` random printable strings of ``length`` +- 10% characters (= tokens)."""
    rng = random.Random(seed * 100_003 + length)
    alphabet = string.ascii_letters + string.digits + " +-=.,"
    spread = max(1, length // 10)
    return ["".join(rng.choices(alphabet, k=rng.randint(length - spread, length + spread)))
            for _ in range(n)]


# ----------------------------------------------------------------------------- samplers


def make_policy(model, tokenizer, setup: Setup, shared: bool):
    from tpo_agents.policies.causal_lm import CausalLMPolicy

    text = spaces.Text(max_length=4 * setup.max_new_tokens + 16)
    return CausalLMPolicy(
        text, text, lambda _: 1e-3, model=model, tokenizer=tokenizer, use_chat_template=False,
        max_new_tokens=setup.max_new_tokens, temperature=setup.temperature, top_p=setup.top_p,
        top_k=setup.top_k, shared_prompt_cache=shared,
    )


def policy_sampler(policy, k: int):
    """One call of our policy: its completion-token count."""
    def call(prompts: list[str]) -> int:
        return int(policy.sample_completions(prompts, k).completion_mask.sum())

    return call


def trl_sampler(model, tokenizer, setup: Setup):
    """GRPOTrainer's transformers generation path (trl 1.16), see the module docstring."""
    from transformers import GenerationConfig
    from trl.trainer.utils import pad

    eos = model.generation_config.eos_token_id
    eos_token_ids = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
    if tokenizer.eos_token_id not in eos_token_ids:
        eos_token_ids = [tokenizer.eos_token_id, *eos_token_ids]
    generation_config = GenerationConfig(
        max_new_tokens=setup.max_new_tokens, do_sample=True, pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=eos_token_ids,
        temperature=setup.temperature, top_p=setup.top_p, top_k=setup.top_k, min_p=None,
        repetition_penalty=1.0, cache_implementation=None, disable_compile=True,
    )
    device = model.device

    def call(prompts: list[str]) -> int:
        batch = [p for p in prompts for _ in range(setup.k)]  # RepeatSampler: each prompt K times
        prompt_ids = tokenizer(text=batch)["input_ids"]  # _tokenize_prompts (not conversational)
        prompt_tensors = [torch.tensor(ids) for ids in prompt_ids]
        padded_ids = pad(prompt_tensors, padding_value=tokenizer.pad_token_id, padding_side="left",
                         pad_to_multiple_of=None)
        attention_mask = pad([torch.ones_like(t) for t in prompt_tensors], padding_value=0,
                             padding_side="left", pad_to_multiple_of=None)
        with torch.no_grad():
            out = model.generate(input_ids=padded_ids.to(device), attention_mask=attention_mask.to(device),
                                 generation_config=generation_config)
        completion_ids = out[:, padded_ids.size(1):]
        is_eos = torch.isin(completion_ids, torch.tensor(eos_token_ids, device=device))
        eos_idx = torch.full((is_eos.size(0),), is_eos.size(1), dtype=torch.long, device=device)
        eos_idx[is_eos.any(dim=1)] = is_eos.int().argmax(dim=1)[is_eos.any(dim=1)]
        sequence_indices = torch.arange(is_eos.size(1), device=device).expand(is_eos.size(0), -1)
        completion_mask = (sequence_indices <= eos_idx.unsqueeze(1)).int()
        rows = [c[m].tolist() for c, m in zip(completion_ids.cpu(), completion_mask.bool().cpu())]
        return sum(len(r) for r in rows)

    return call


# -------------------------------------------------------------------------- measuring


def same_samples(shared, plain, prompts: list[str], k: int, seed: int) -> bool:
    """Whether one seed gives the same completions with and without the shared cache."""
    torch.manual_seed(seed)
    a = shared.sample_completions(prompts, k)
    torch.manual_seed(seed)
    b = plain.sample_completions(prompts, k)
    return torch.equal(a.completion_ids, b.completion_ids) and a.texts == b.texts


def measure(samplers: dict, prompts: list[str], warmup: int, rounds: int, seed: int) -> dict:
    """Per implementation: seconds and completion tokens of each timed call."""
    runs = {impl: {"seconds": [], "tokens": []} for impl in samplers}
    impls = list(samplers)
    for r in range(warmup + rounds):
        order = impls[r % len(impls):] + impls[: r % len(impls)]  # rotate the order
        for impl in order:
            torch.manual_seed(seed + r)
            start = time.perf_counter()
            tokens = samplers[impl](prompts)
            seconds = time.perf_counter() - start
            if r >= warmup:
                runs[impl]["seconds"].append(seconds)
                runs[impl]["tokens"].append(tokens)
    for row in runs.values():
        rates = [t / s for t, s in zip(row["tokens"], row["seconds"])]
        row["tokens_per_second"] = statistics.median(rates)
        row["median_seconds"] = statistics.median(row["seconds"])
        row["mean_tokens"] = statistics.mean(row["tokens"])
    return runs


def run(args) -> dict:
    from zoo.paper.llm.tiny import build_tiny_causal_lm

    setup = Setup(prompts=args.prompts, k=args.k, max_new_tokens=args.max_new_tokens, seed=args.seed)
    model, tokenizer = build_tiny_causal_lm(max_position_embeddings=setup.max_position_embeddings,
                                            seed=setup.seed)
    model.eval()
    shared = make_policy(model, tokenizer, setup, shared=True)
    plain = make_policy(model, tokenizer, setup, shared=False)
    samplers = {
        "shared": policy_sampler(shared, setup.k),
        "generate": policy_sampler(plain, setup.k),
        "trl": trl_sampler(model, tokenizer, setup),
    }
    samplers = {impl: samplers[impl] for impl in args.impls}
    results = []
    previous = torch.get_num_threads()
    try:
        for threads in args.threads:
            torch.set_num_threads(threads)
            for length in args.prompt_lengths:
                prompts = make_prompts(setup.prompts, length, setup.seed)
                tokens = [len(tokenizer(p)["input_ids"]) for p in prompts]
                check = same_samples(shared, plain, prompts, setup.k, setup.seed)
                runs = measure(samplers, prompts, args.warmup, args.rounds, setup.seed)
                for row in runs.values():
                    for other, key in ((BASELINE, "ratio_to_generate"), ("trl", "ratio_to_trl")):
                        base = runs.get(other, {}).get("tokens_per_second")
                        row[key] = row["tokens_per_second"] / base if base else None
                results.append({
                    "threads": threads,
                    "prompt_length": length,
                    "prompt_tokens": {"min": min(tokens), "max": max(tokens),
                                      "mean": statistics.mean(tokens)},
                    "same_samples_as_generate": check,
                    "impls": runs,
                })
                summary = ", ".join(f"{impl} {row['tokens_per_second']:.0f} tok/s" for impl, row in runs.items())
                print(f"[{threads} thread(s), ~{length}-token prompts] {summary}; same samples: {check}",
                      flush=True)
    finally:
        torch.set_num_threads(previous)
    return {"setup": setup, "results": results, "device": model.device}


# ----------------------------------------------------------------------------- output


def markdown(result: dict) -> str:
    cfg = result["config"]
    s = cfg["setup"]
    lines = [
        "# LLM generation benchmark: K completions per prompt (tiny offline Llama)",
        "",
        "`" + " ".join(["python -m benchmarks.llm_generation", shlex.join(cfg["argv"])]).strip() + "`",
        "",
        f"One call: B = {s['prompts']} prompts x K = {s['k']} sampled completions of at most "
        f"{s['max_new_tokens']} tokens (temperature {s['temperature']}, top-p {s['top_p']}, top-k "
        f"{s['top_k']}, stop at EOS), from prompt texts to completion tokens; device {cfg['device']}. "
        f"Tokens/s = completion tokens generated / wall seconds of the call, median of {cfg['rounds']} calls "
        f"after {cfg['warmup']} warm-up call(s), the implementations interleaved. Ratios: tokens/s over "
        "the baseline `generate(num_return_sequences=K)` and over TRL's path, same run.",
        "",
        "| prompt tokens | threads | implementation | tokens / s (median) | x generate | x TRL | s / call | same samples as generate |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for block in result["results"]:
        pt = block["prompt_tokens"]
        for impl, row in block["impls"].items():
            ratio = lambda x: "-" if x is None else f"{x:.2f}"  # noqa: E731
            same = ("yes" if block["same_samples_as_generate"] else "NO") if impl == "shared" else ""
            lines.append(
                f"| {pt['min']}-{pt['max']} | {block['threads']} | {LABELS[impl]} | "
                f"{row['tokens_per_second']:.0f} | {ratio(row['ratio_to_generate'])} | "
                f"{ratio(row['ratio_to_trl'])} | {row['median_seconds']:.3f} | {same} |"
            )
    lines.append("")
    if cfg.get("note"):
        lines += [f"Note: {cfg['note']}", ""]
    return "\n".join(lines)


def _versions() -> dict:
    import transformers
    import trl

    return {"torch": torch.__version__, "transformers": transformers.__version__, "trl": trl.__version__}


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1; got {text!r}")
    return value


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.llm_generation", description=__doc__.split("\n")[0])
    parser.add_argument("--impls", nargs="+", default=list(IMPLS), choices=IMPLS)
    parser.add_argument("--prompts", type=positive_int, default=Setup.prompts, help="prompts per call (B)")
    parser.add_argument("--k", type=positive_int, default=Setup.k, help="completions per prompt (K)")
    parser.add_argument("--max-new-tokens", type=positive_int, default=Setup.max_new_tokens)
    parser.add_argument("--prompt-lengths", type=positive_int, nargs="+", default=[20, 300],
                        help="prompt lengths in tokens (each prompt within +-10%%)")
    parser.add_argument("--threads", type=positive_int, nargs="+", default=[1, 2])
    parser.add_argument("--warmup", type=int, default=1, help="calls discarded per implementation")
    parser.add_argument("--rounds", type=positive_int, default=10, help="timed calls per implementation")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--note", default=None, help="a line added under the table (machine state, ...)")
    parser.add_argument("--out", type=Path, default=Path("results/llm-generation.json"))
    args = parser.parse_args(argv)
    if args.warmup < 0:
        parser.error(f"--warmup must be >= 0; got {args.warmup}")
    start = time.perf_counter()
    measured = run(args)
    result = {
        "benchmark": "llm-generation",
        "config": {
            "argv": list(argv) if argv is not None else sys.argv[1:],
            "setup": asdict(measured["setup"]),
            "impls": args.impls,
            "baseline": BASELINE,
            "prompt_lengths": args.prompt_lengths,
            "threads": args.threads,
            "warmup": args.warmup,
            "rounds": args.rounds,
            "note": args.note,
            "device": str(measured["device"]),
            "versions": _versions(),
            "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
        },
        "results": measured["results"],
        "wall_seconds": time.perf_counter() - start,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))
    return result


if __name__ == "__main__":
    main()
