"""A jit-compiled JAX baseline for ``benchmarks.speed``: one sequence-level TPO iteration
on terminal-reward Token Reversal at the paper's sizes.

This is our own JAX equivalent of the paper's jit-compiled artifact, not the artifact
itself. It mirrors our torch ``tpo`` setup: H = 8, V = 2, reverse copy, reward 1 iff a
completion matches the target exactly; B = 100 prompts, K = 8 completions each; the
``CausalTransformer`` defaults (d_model 64, 2 pre-LN blocks, 2 heads, 4x exact-GELU FFN,
learned positions over 2H; the initialization does not affect timing); sampling with a fixed-size key/value cache;
``n_epochs = 4`` full-batch steps of TPO's cross-entropy to ``q = softmax(l_old + u / eta)``;
optax Muon on every 2-D parameter and AdamW on the rest, lr 1e-3. Known differences
from the torch run: optax bias-corrects Muon's momentum (steps after the first differ
slightly), and the update does not merge identical completions of a prompt.

Measured (compile excluded, ``block_until_ready``, median over ``--iterations``):
``iteration_ms`` (one jitted function: new prompts, sampling, rewards, epochs),
``sampling_ms`` and ``update_ms`` (two more jitted functions). Each thread count runs in
its own process, since XLA sizes its thread pool when its CPU client starts: ``NPROC=N``
(read by XLA's thread-pool sizing) and, for one thread,
``XLA_FLAGS=--xla_cpu_multi_thread_eigen=false``. ``busy_threads`` counts the threads that
used at least a quarter of the busiest thread's CPU time while timing, to check the setting
took effect.

Usage: ``python -m benchmarks.jax_baseline --threads 1 2 --iterations 10
--out results/jax_baseline.json``; from Python, :func:`measure`. JAX is imported only
inside functions, so importing this module does not need it.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tpo_gym.extras import require

LN_EPS = 1e-5
"""LayerNorm epsilon (torch's default)."""
ZERO_VARIANCE_EPS = 1e-6
"""A group whose population std is at or below this gets u = 0 (as in tpo_agents.objectives)."""


@dataclasses.dataclass(frozen=True)
class Config:
    """Sizes and hyperparameters (defaults: our torch ``tpo`` speed setup)."""

    horizon: int = 8  # H: prompt and completion length
    vocab: int = 2  # V
    batch: int = 100  # B prompts (groups) per iteration
    samples: int = 8  # K completions per prompt
    epochs: int = 4
    lr: float = 1e-3
    eta: float = 1.0
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 2
    ffn_mult: int = 4
    momentum: float = 0.95  # Muon
    betas: tuple[float, float] = (0.9, 0.999)  # AdamW
    weight_decay: float = 0.0  # both parts, as tpo_agents.optim.MuonAdamW's default
    max_grad_norm: float | None = None  # GroupedAlgorithm's default: no clipping
    share_prompt: bool = False  # update: encode each prompt once for its K rows


# ------------------------------------------------------------------------ network


def init_params(seed: int = 0, cfg: Config = Config()) -> dict:
    """Parameters with torch's default init: embeddings N(0, 1), Linear weights and
    biases U(+-1/sqrt(fan_in)), LayerNorm scale 1 and bias 0. Linear weights are
    ``[in, out]``. Drawn with numpy (a jitted threefry init takes seconds to compile)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    rng = np.random.default_rng(seed)
    d, f = cfg.d_model, cfg.ffn_mult * cfg.d_model

    def linear(n_in, n_out):
        bound = n_in**-0.5
        return {
            "w": rng.uniform(-bound, bound, (n_in, n_out)),
            "b": rng.uniform(-bound, bound, n_out),
        }

    def norm():
        return {"scale": np.ones(d), "bias": np.zeros(d)}

    params = {
        "tok_emb": rng.standard_normal((cfg.vocab + 1, d)),
        "pos_emb": rng.standard_normal((2 * cfg.horizon, d)),
        "blocks": [
            {
                "ln1": norm(),
                "qkv": linear(d, 3 * d),
                "proj": linear(d, d),
                "ln2": norm(),
                "fc1": linear(d, f),
                "fc2": linear(f, d),
            }
            for _ in range(cfg.n_layers)
        ],
        "ln_f": norm(),
        "head": linear(d, cfg.vocab),
    }
    return jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), params)


def params_from_torch(tensors) -> dict:
    """The parameter pytree of a torch ``CausalTransformer``, from the module, its
    ``state_dict()`` or any ``{name: tensor}`` mapping of the same names (gradients too).
    Linear weights are transposed from torch's ``[out, in]`` to ``[in, out]``."""
    import jax.numpy as jnp

    if hasattr(tensors, "state_dict"):
        tensors = tensors.state_dict()

    def arr(name):
        return jnp.asarray(tensors[name].detach().cpu().float().numpy())

    def linear(prefix):
        return {"w": arr(prefix + ".weight").T, "b": arr(prefix + ".bias")}

    def norm(prefix):
        return {"scale": arr(prefix + ".weight"), "bias": arr(prefix + ".bias")}

    n_layers = len({k.split(".")[1] for k in tensors if k.startswith("blocks.")})
    return {
        "tok_emb": arr("tok_emb.weight"),
        "pos_emb": arr("pos_emb.weight"),
        "blocks": [
            {
                "ln1": norm(f"blocks.{i}.ln1"),
                "qkv": linear(f"blocks.{i}.attn.qkv"),
                "proj": linear(f"blocks.{i}.attn.proj"),
                "ln2": norm(f"blocks.{i}.ln2"),
                "fc1": linear(f"blocks.{i}.ffn.0"),
                "fc2": linear(f"blocks.{i}.ffn.2"),
            }
            for i in range(n_layers)
        ],
        "ln_f": norm("ln_f"),
        "head": linear("head"),
    }


def _layer_norm(p, x):
    import jax

    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + LN_EPS) * p["scale"] + p["bias"]


def _linear(p, x):
    return x @ p["w"] + p["b"]


def _concat_kv(past, k, v):
    """Keys/values of ``past`` (None or ``(k, v)`` ``[N, h, P, dh]``) followed by the new ones."""
    import jax.numpy as jnp

    if past is None:
        return k, v
    return jnp.concatenate([past[0], k], axis=2), jnp.concatenate([past[1], v], axis=2)


def _write_kv(buffer, pos, k, v):
    """Write one new key/value at ``pos`` of fixed-size buffers ``[N, h, C, dh]``."""
    import jax

    kb = jax.lax.dynamic_update_slice_in_dim(buffer[0], k, pos, axis=2)
    vb = jax.lax.dynamic_update_slice_in_dim(buffer[1], v, pos, axis=2)
    return kb, vb


def _block(p, x, n_heads, kv_fn, allowed):
    """Pre-LN block on ``x [N, T, d]``; ``kv_fn(k, v)`` returns all keys/values the new
    queries read, ``allowed [T, S]`` which of them each query may attend to."""
    import jax
    import jax.numpy as jnp

    N, T, d = x.shape
    heads = (
        _linear(p["qkv"], _layer_norm(p["ln1"], x))
        .reshape(N, T, 3, n_heads, d // n_heads)
        .transpose(2, 0, 3, 1, 4)
    )
    q, (k, v) = heads[0], kv_fn(heads[1], heads[2])
    scores = (q @ k.swapaxes(-1, -2)) * (d // n_heads) ** -0.5
    weights = jax.nn.softmax(jnp.where(allowed, scores, -jnp.inf), axis=-1)
    attn = (weights @ v).transpose(0, 2, 1, 3).reshape(N, T, d)
    x = x + _linear(p["proj"], attn)
    hidden = jax.nn.gelu(_linear(p["fc1"], _layer_norm(p["ln2"], x)), approximate=False)
    return x + _linear(p["fc2"], hidden), (k, v)


def forward(params, tokens, n_heads: int, past=None):
    """Logits ``[N, T, V]`` of ``tokens [N, T]`` following ``past`` (None or a per-layer
    list of ``(k, v)`` ``[N, h, P, dh]``), and the per-layer keys/values of past + new."""
    import jax.numpy as jnp

    T = tokens.shape[1]
    P = 0 if past is None else past[0][0].shape[2]
    x = params["tok_emb"][tokens] + params["pos_emb"][P : P + T]
    allowed = jnp.arange(P + T)[None, :] <= P + jnp.arange(T)[:, None]
    cache = []
    for i, p in enumerate(params["blocks"]):
        kv_fn = functools.partial(_concat_kv, None if past is None else past[i])
        x, kv = _block(p, x, n_heads, kv_fn, allowed)
        cache.append(kv)
    return _linear(params["head"], _layer_norm(params["ln_f"], x)), cache


def token_log_probs(params, prompts, completions, n_heads: int, share_prompt: bool = False):
    """Teacher-forced ``log pi(. | prompt, completion[:t])``, ``[N, T, V]``; row ``r`` of
    ``completions [N, T]`` continues prompt ``r // (N // G)`` of ``prompts [G, H]``.

    Default: one forward pass over each row's prompt + completion. ``share_prompt``:
    encode each prompt once and continue its K rows from its keys/values (as
    ``TransformerPolicy.token_log_probs``), the same numbers with fewer FLOPs."""
    import jax
    import jax.numpy as jnp

    (G, H), (N, T) = prompts.shape, completions.shape
    n = N // G
    if not share_prompt:
        tokens = jnp.concatenate([jnp.repeat(prompts, n, axis=0), completions[:, :-1]], axis=1)
        logits, _ = forward(params, tokens, n_heads)
        return jax.nn.log_softmax(logits[:, H - 1 :], axis=-1)
    logits, cache = forward(params, prompts, n_heads)
    logits = jnp.repeat(logits[:, -1:], n, axis=0)
    if T > 1:
        cache = [(jnp.repeat(k, n, axis=0), jnp.repeat(v, n, axis=0)) for k, v in cache]
        rest, _ = forward(params, completions[:, :-1], n_heads, past=cache)
        logits = jnp.concatenate([logits, rest], axis=1)
    return jax.nn.log_softmax(logits, axis=-1)


def sequence_log_probs(params, prompts, completions, n_heads: int, share_prompt: bool = False):
    """``[N]`` sum of each completion's token log-probs (teacher-forced)."""
    import jax.numpy as jnp

    table = token_log_probs(params, prompts, completions, n_heads, share_prompt)
    return jnp.take_along_axis(table, completions[..., None], axis=-1)[..., 0].sum(-1)


def _decode(params, tokens, pos, buffers, n_heads: int):
    """One new token per row at position ``pos`` with fixed-size key/value buffers:
    next-token log-probs ``[N, V]`` and the updated buffers."""
    import jax
    import jax.numpy as jnp

    x = (params["tok_emb"][tokens] + params["pos_emb"][pos])[:, None]
    allowed = (jnp.arange(buffers[0][0].shape[2]) <= pos)[None, :]
    new = []
    for p, buffer in zip(params["blocks"], buffers):
        x, kv = _block(p, x, n_heads, functools.partial(_write_kv, buffer, pos), allowed)
        new.append(kv)
    logits = _linear(params["head"], _layer_norm(params["ln_f"], x[:, 0]))
    return jax.nn.log_softmax(logits, axis=-1), new


def sample_completions(params, prompts, key, n_samples: int, length: int, n_heads: int):
    """``n_samples`` completions of ``length`` tokens per prompt (rows ``g * n + k``) and
    each sampled token's log-prob, both ``[G * n, length]``.

    The prompts are encoded once; their keys/values fill the first positions of buffers
    of fixed size (the learned positions, 2H) shared by the rows, and a ``lax.scan``
    writes one position per generated token."""
    import jax
    import jax.numpy as jnp

    H = prompts.shape[1]
    capacity = params["pos_emb"].shape[0]
    logits, cache = forward(params, prompts, n_heads)
    logp = jnp.repeat(jax.nn.log_softmax(logits[:, -1], axis=-1), n_samples, axis=0)
    pad = ((0, 0), (0, 0), (0, capacity - H), (0, 0))
    buffers = [tuple(jnp.pad(jnp.repeat(t, n_samples, axis=0), pad) for t in kv) for kv in cache]
    keys = jax.random.split(key, length)

    def draw(logp, k):
        token = jax.random.categorical(k, logp, axis=-1)
        return token, jnp.take_along_axis(logp, token[:, None], axis=-1)[:, 0]

    def step(carry, inputs):
        logp, buffers = carry
        k, t = inputs
        token, token_logp = draw(logp, k)
        return _decode(params, token, H + t, buffers, n_heads), (token, token_logp)

    (logp, _), (tokens, logps) = jax.lax.scan(
        step, (logp, buffers), (keys[:-1], jnp.arange(length - 1))
    )
    last, last_logp = draw(logp, keys[-1])
    return (
        jnp.concatenate([tokens.T, last[:, None]], axis=1),
        jnp.concatenate([logps.T, last_logp[:, None]], axis=1),
    )


# ---------------------------------------------------------------------- objective


def standardize_scores(scores):
    """Within-group ``(s - mean) / std`` over ``[G, K]`` (population std); groups with
    ``std <= 1e-6`` get u = 0 (``tpo_agents.objectives.standardize_scores``)."""
    import jax.numpy as jnp

    mean = scores.mean(-1, keepdims=True)
    std = jnp.sqrt(((scores - mean) ** 2).mean(-1, keepdims=True))
    flat = std <= ZERO_VARIANCE_EPS
    return jnp.where(flat, 0.0, (scores - mean) / jnp.where(flat, 1.0, std))


def tpo_target(old_logp, u, eta: float = 1.0):
    """``q = softmax(l_old + u / eta)`` over each group, i.e. q ∝ p_old exp(u / eta)."""
    import jax

    return jax.nn.softmax(old_logp + u / eta, axis=-1)


def tpo_loss(logp, q):
    """``-mean_groups sum_k q_k log softmax(l)_k`` for ``[G, K]`` log-probs ``l``."""
    import jax

    return -(q * jax.nn.log_softmax(logp, axis=-1)).sum(-1).mean()


def make_optimizer(cfg: Config = Config()):
    """optax Muon on every 2-D parameter (embeddings and head included) and AdamW on the
    rest, like ``tpo_agents.optim.MuonAdamW``.

    Muon is ``optax.contrib.muon`` (Nesterov, beta = momentum, 5 Newton-Schulz steps with
    torch's coefficients, eps 1e-7 as torch) given only the matrices; its width scale
    ``sqrt(max(1, fan_out / fan_in))`` is torch's "original" ``adjust_lr`` rule: Linear
    weights are ``[in, out]`` and the embeddings ``[n, d]`` are declared as
    ``fan_out = n, fan_in = d`` (torch's ``[A, B] = [n, d]``). The other parameters get
    a plain ``optax.adamw`` (torch's AdamW; muon's own Adam branch would be NAdam when
    ``nesterov=True``)."""
    import jax
    import optax
    from optax.contrib import MuonDimensionNumbers

    def dims(tree):
        def spec(path, _):
            embedding = getattr(path[0], "key", None) in ("tok_emb", "pos_emb")
            return MuonDimensionNumbers(1, 0) if embedding else MuonDimensionNumbers(0, 1)

        return jax.tree_util.tree_map_with_path(spec, tree)

    muon = optax.contrib.muon(
        cfg.lr,
        beta=cfg.momentum,
        eps=1e-7,
        weight_decay=cfg.weight_decay,
        nesterov=True,
        muon_weight_dimension_numbers=dims,
    )
    adamw = optax.adamw(cfg.lr, *cfg.betas, eps=1e-8, weight_decay=cfg.weight_decay)
    labels = functools.partial(jax.tree.map, lambda x: "muon" if x.ndim == 2 else "adamw")
    tx = optax.partition({"muon": muon, "adamw": adamw}, labels)
    if cfg.max_grad_norm is not None:
        tx = optax.chain(optax.clip_by_global_norm(cfg.max_grad_norm), tx)
    return tx


# --------------------------------------------------------------------- iteration


def build(cfg: Config = Config()) -> SimpleNamespace:
    """Jitted functions of one TPO iteration at ``cfg``'s sizes:

    * ``init(seed) -> (params, opt_state)``;
    * ``sample(params, key) -> batch``: new prompts, K completions each, their token
      log-probs (old log-probs) and rewards;
    * ``update(params, opt_state, batch) -> (params, opt_state, stats)``: the epochs;
    * ``iteration(params, opt_state, key) -> (params, opt_state, stats)``: both as one
      function. ``stats`` holds the mean reward, per-epoch losses and gradient norms;

    and, not jitted, the update's objective: ``target(batch) -> q`` ``[B, K]`` and
    ``loss(params, batch, q)``.
    """
    import jax
    import jax.numpy as jnp
    import optax

    H, V, B, K = cfg.horizon, cfg.vocab, cfg.batch, cfg.samples
    tx = make_optimizer(cfg)

    def init(seed=0):
        params = init_params(seed, cfg)
        return params, jax.jit(tx.init)(params)

    def sample(params, key):
        prompt_key, sample_key = jax.random.split(key)
        prompts = jax.random.randint(prompt_key, (B, H), 0, V, dtype=jnp.int32)
        completions, token_logp = sample_completions(params, prompts, sample_key, K, H, cfg.n_heads)
        targets = jnp.repeat(prompts[:, ::-1], K, axis=0)
        rewards = (completions == targets).all(-1).astype(jnp.float32)
        return {
            "prompts": prompts,
            "completions": completions,
            "token_logp": token_logp,
            "rewards": rewards,
        }

    def target(batch):
        u = standardize_scores(batch["rewards"].reshape(B, K))
        return tpo_target(batch["token_logp"].sum(-1).reshape(B, K), u, cfg.eta)

    def loss(params, batch, q):
        logp = sequence_log_probs(
            params, batch["prompts"], batch["completions"], cfg.n_heads, cfg.share_prompt
        )
        return tpo_loss(logp.reshape(B, K), q)

    def update(params, opt_state, batch):
        q = target(batch)

        def epoch(carry, _):
            params, opt_state = carry
            value, grads = jax.value_and_grad(loss)(params, batch, q)
            updates, opt_state = tx.update(grads, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state), (
                value,
                optax.tree.norm(grads),
            )

        (params, opt_state), (losses, norms) = jax.lax.scan(
            epoch, (params, opt_state), None, length=cfg.epochs
        )
        stats = {"reward": batch["rewards"].mean(), "loss": losses, "grad_norm": norms}
        return params, opt_state, stats

    def iteration(params, opt_state, key):
        return update(params, opt_state, sample(params, key))

    return SimpleNamespace(
        config=cfg,
        optimizer=tx,
        target=target,
        loss=loss,
        init=init,
        sample=jax.jit(sample),
        update=jax.jit(update),
        iteration=jax.jit(iteration),
    )


# ------------------------------------------------------------------------ timing


def _thread_cpu_ticks() -> dict[str, int]:
    """CPU time (clock ticks) used so far by each thread of this process (Linux)."""
    ticks = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended
            continue
        ticks[tid] = int(fields[11]) + int(fields[12])
    return ticks


def run(iterations: int, cfg: Config = Config(), seed: int = 0) -> dict[str, Any]:
    """Time the jitted functions in this process (its thread setting is whatever XLA
    started with: use :func:`measure` to choose one)."""
    import jax
    import jaxlib
    import optax

    def timed(fn, *args):
        t = time.perf_counter()
        out = jax.block_until_ready(fn(*args))
        return out, 1e3 * (time.perf_counter() - t)

    fns = build(cfg)
    key = jax.random.key(seed)
    params, opt_state = fns.init(seed)
    keys = iter(jax.random.split(jax.random.fold_in(key, 1), iterations + 4))  # 4 for compile and warm-up
    t = time.perf_counter()
    iteration = fns.iteration.lower(params, opt_state, next(keys)).compile()
    sample = fns.sample.lower(params, next(keys)).compile()
    batch = sample(params, next(keys))
    update = fns.update.lower(params, opt_state, batch).compile()
    compile_s = time.perf_counter() - t
    jax.block_until_ready(update(params, opt_state, batch))  # warm-up runs
    jax.block_until_ready(iteration(params, opt_state, next(keys)))

    wall, cpu, ticks = time.perf_counter(), time.process_time(), _thread_cpu_ticks()
    iteration_ms, sampling_ms, update_ms = [], [], []
    for _ in range(iterations):
        (params, opt_state, stats), ms = timed(iteration, params, opt_state, next(keys))
        iteration_ms.append(ms)
    batch_keys = jax.random.split(jax.random.fold_in(key, 2), iterations)
    for k in batch_keys:
        batch, ms = timed(sample, params, k)
        sampling_ms.append(ms)
        (params, opt_state, _), ms = timed(update, params, opt_state, batch)
        update_ms.append(ms)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    used = [v - ticks.get(tid, 0) for tid, v in _thread_cpu_ticks().items()]
    return {
        "iteration_ms": statistics.median(iteration_ms),
        "sampling_ms": statistics.median(sampling_ms),
        "update_ms": statistics.median(update_ms),
        "compile_s": compile_s,
        "iterations": iterations,
        "cpu_per_wall": cpu / wall,
        # A thread counts when it used at least a quarter of the busiest one's CPU time: XLA's
        # helper threads take a few clock ticks, which a short, loaded run made look "busy".
        "busy_threads": sum(v >= 0.25 * max(max(used, default=0), 1) for v in used),
        "final_reward": float(stats["reward"]),
        "jax_version": jax.__version__,
        "jaxlib_version": jaxlib.__version__,
        "optax_version": optax.__version__,
        "backend": jax.default_backend(),
        "config": dataclasses.asdict(cfg),
    }


def thread_env(threads: int) -> dict[str, str]:
    """Environment variables that make a fresh JAX process use ``threads`` CPU threads."""
    env = {"NPROC": str(threads)}
    flags = os.environ.get("XLA_FLAGS", "")
    if threads == 1:
        flags = f"{flags} --xla_cpu_multi_thread_eigen=false".strip()
    if flags:
        env["XLA_FLAGS"] = flags
    return env


def measure(threads: int, iterations: int, timeout: float | None = None) -> dict[str, Any]:
    """Run :func:`run` in a fresh process limited to ``threads`` threads; returns its
    result (``iteration_ms``, ``sampling_ms``, ``update_ms``, ``compile_s``,
    ``jax_version``, ...) with the ``threads``, ``nproc`` and ``xla_flags`` it ran under."""
    # Checked here: in the worker a missing jax would only show as its traceback's last line.
    require("bench", "the JAX baseline (benchmarks.jax_baseline; benchmarks.speed skips it "
            "with --no-jax-baseline)", "jax", "optax")
    env = thread_env(threads)
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--worker",
        "--iterations",
        str(iterations),
    ]
    proc = subprocess.run(
        cmd, env=os.environ | env, capture_output=True, text=True, timeout=timeout, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"JAX baseline worker failed ({proc.returncode}):\n{proc.stderr[-3000:]}"
        )
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    return result | {
        "threads": threads,
        "nproc": env["NPROC"],
        "xla_flags": env.get("XLA_FLAGS", ""),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.jax_baseline", description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--out", type=Path, default=Path("results/jax_baseline.json"))
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:  # one measurement in this process; its caller set the threads
        result = run(args.iterations)
        print(json.dumps(result))
        return result
    result: dict = {"config": vars(args) | {"out": str(args.out)}, "threads": {}}
    for threads in args.threads:
        result["threads"][str(threads)] = m = measure(threads, args.iterations)
        print(
            f"threads={threads} jax tpo {m['iteration_ms']:7.1f} ms/iter (sampling "
            f"{m['sampling_ms']:6.1f}, update {m['update_ms']:6.1f}); compile {m['compile_s']:.1f} s, "
            f"{m['busy_threads']} busy threads",
            flush=True,
        )
    del result["config"]["worker"]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
