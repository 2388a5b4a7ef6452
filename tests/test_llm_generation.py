"""Shared-prompt sampling (:mod:`tpo_agents.llm.generation`) and CausalLMPolicy's
``shared_prompt_cache`` option: each prompt is pre-filled once, and the samples are those of
plain ``generate`` (same tokens greedy and, with one seed, sampled; log-probs that
``completion_log_probs`` recomputes; first-token frequencies of softmax of the logits).
Offline, tiny random Llama, one thread."""

from __future__ import annotations

import math
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import gymnasium as gym  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from gymnasium import spaces  # noqa: E402

import tpo_gym  # noqa: E402, F401  (registers the ids)
from tpo_agents import TPO  # noqa: E402
from tpo_agents.llm.generation import generate_shared_prefix, shares_prefix  # noqa: E402
from tpo_agents.llm.logprobs import position_ids_from_mask  # noqa: E402
from tpo_agents.policies.causal_lm import CausalLMPolicy  # noqa: E402
from zoo.paper.llm.tiny import build_tiny_causal_lm  # noqa: E402

TEXT = spaces.Text(max_length=64)
PROMPTS = ["7", "3+4=", "12+34=", "hello world, a longer prompt"]  # 1 to 28 tokens: left padding
SAME_LENGTH = ["1+2=", "3+4=", "5+6="]  # no padding at all


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny_path: tests/conftest.py


def tiny(bias: dict[int, float] | None = None, spread: float = 0.0, seed: int = 0):
    """The tiny model in eval mode; ``bias`` adds logit offsets to some tokens (e.g. EOS),
    ``spread`` a random per-token offset of that scale (a far-from-uniform distribution)."""
    model, tok = build_tiny_causal_lm()
    if bias or spread:
        head = torch.nn.Linear(model.config.hidden_size, model.config.vocab_size, bias=True)
        head.weight.data.copy_(model.lm_head.weight.data)
        gen = torch.Generator().manual_seed(seed)
        head.bias.data.copy_(spread * torch.randn(model.config.vocab_size, generator=gen))
        for token, value in (bias or {}).items():
            head.bias.data[token] += value
        model.lm_head = head
    return model.eval(), tok


def encode(tok, prompts):
    enc = tok(prompts, return_tensors="pt", padding=True)
    return enc["input_ids"], enc["attention_mask"]


def make_policy(model, tok, **kwargs) -> CausalLMPolicy:
    kwargs.setdefault("use_chat_template", False)
    return CausalLMPolicy(TEXT, TEXT, lambda _: 1e-3, model=model, tokenizer=tok, **kwargs)


def record_forward_inputs(model) -> list[tuple[int, ...]]:
    """The ``input_ids`` shapes of every forward call of ``model`` from now on."""
    shapes: list[tuple[int, ...]] = []
    target = model.get_base_model() if hasattr(model, "get_base_model") else model
    target.register_forward_pre_hook(
        lambda _m, args, kwargs: shapes.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True
    )
    return shapes


def sampled(policy, prompts, n, seed=0, **kwargs):
    torch.manual_seed(seed)
    return policy.sample_completions(prompts, n, **kwargs)


def assert_same_completions(a, b):
    for field in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask"):
        assert torch.equal(getattr(a, field), getattr(b, field)), field
    assert a.texts == b.texts


# ------------------------------------------------------------------ greedy


@pytest.mark.parametrize("prompts", [PROMPTS, SAME_LENGTH], ids=["left-padded", "unpadded"])
def test_greedy_equals_generate_greedy(prompts):
    model, tok = tiny()
    ids, mask = encode(tok, prompts)
    ours = generate_shared_prefix(model, ids, mask, 3, do_sample=False, max_new_tokens=12)
    plain = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=12)
    assert torch.equal(ours, plain.repeat_interleave(3, 0))
    # And the same logits at every step (the cached prefix is the one generate computes).
    kw = dict(do_sample=False, max_new_tokens=12, output_logits=True, return_dict_in_generate=True)
    ours_logits = torch.stack(generate_shared_prefix(model, ids, mask, 3, **kw).logits, 1)
    plain_logits = torch.stack(model.generate(input_ids=ids, attention_mask=mask, **kw).logits, 1)
    assert torch.allclose(ours_logits, plain_logits.repeat_interleave(3, 0), atol=1e-5)
    # Through the policy: K greedy rows per prompt, each the plain greedy completion.
    policy = make_policy(model, tok, max_new_tokens=12)
    fallback = make_policy(model, tok, max_new_tokens=12, shared_prompt_cache=False)
    greedy = policy.sample_completions(prompts, 3, greedy=True)
    one = fallback.sample_completions(prompts, 1, greedy=True)
    assert torch.equal(greedy.completion_ids, one.completion_ids.repeat_interleave(3, 0))
    assert greedy.texts == [t for t in one.texts for _ in range(3)]
    assert policy.predict(prompts, deterministic=True)[0] == one.texts


def test_each_prompt_is_prefilled_once():
    """The first forward pass runs the B prompts minus their last token; every later one
    feeds one token per sequence. The fallback pre-fills B * K full prompts."""
    model, tok = tiny()
    ids, _ = encode(tok, PROMPTS)
    B, P = ids.shape
    shapes = record_forward_inputs(model)
    sampled(make_policy(model, tok, max_new_tokens=5), PROMPTS, 4)
    assert shapes[0] == (B, P - 1)
    assert set(shapes[1:]) == {(B * 4, 1)} and len(shapes) >= 2
    shapes.clear()
    sampled(make_policy(model, tok, max_new_tokens=5, shared_prompt_cache=False), PROMPTS, 4)
    assert shapes[0] == (B * 4, P)


# ---------------------------------------------------------------- sampling


@pytest.mark.parametrize(
    ("temperature", "top_k", "top_p"), [(0.7, 0, 1.0), (1.3, 5, 1.0), (1.0, 0, 0.8)]
)
def test_sampling_gives_generates_tokens_for_one_seed(temperature, top_k, top_p):
    """generate's own sampling code runs on the same [B * K, V] probabilities, so one seed
    gives the tokens of generate(num_return_sequences=K)."""
    model, tok = tiny(spread=1.0)
    ids, mask = encode(tok, PROMPTS)
    settings = dict(
        do_sample=True, temperature=temperature, top_k=top_k, top_p=top_p, max_new_tokens=10
    )
    torch.manual_seed(3)
    ours = generate_shared_prefix(model, ids, mask, 5, **settings)
    torch.manual_seed(3)
    plain = model.generate(input_ids=ids, attention_mask=mask, num_return_sequences=5, **settings)
    assert torch.equal(ours, plain)
    torch.manual_seed(4)
    assert not torch.equal(generate_shared_prefix(model, ids, mask, 5, **settings), plain)


def teacher_forced_logits(model, prompt_ids, prompt_mask, completion_ids, completion_mask):
    """``[N, T, V]`` logits predicting each completion token, from one full forward pass."""
    input_ids = torch.cat([prompt_ids, completion_ids], 1)
    attention_mask = torch.cat([prompt_mask, completion_mask], 1).long()
    with torch.no_grad():
        logits = model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids_from_mask(attention_mask),
        ).logits
    T = completion_ids.shape[1]
    return logits[:, -(T + 1) : -1].float()


@pytest.mark.parametrize(("temperature", "top_k"), [(0.7, 0), (1.5, 5)])
def test_sampled_log_probs_equal_the_recomputed_ones(temperature, top_k):
    """The logits the sampler drew each token from are those that completion_log_probs sees
    (so the policy's log-probs describe the sampling distribution), and with top-k every
    token comes from the top k of those logits."""
    model, tok = tiny(bias={2: 2.0}, spread=1.0)
    policy = make_policy(model, tok, temperature=temperature, top_k=top_k, max_new_tokens=8)
    c = sampled(policy, PROMPTS, 4, seed=5)
    assert (c.completion_mask.sum(-1) < 8).any()  # some rows stopped at EOS
    # The same call with the step logits returned (same seed: same samples).
    ids, mask = policy.encode_prompts(PROMPTS)
    torch.manual_seed(5)
    with policy._own_generation_config():
        out = generate_shared_prefix(
            model,
            ids,
            mask.long(),
            4,
            do_sample=True,
            temperature=temperature,
            top_k=top_k,
            top_p=1.0,
            max_new_tokens=8,
            output_logits=True,
            output_scores=True,
            return_dict_in_generate=True,
        )
    generated = out.sequences[:, ids.shape[1] :]
    m = c.completion_mask
    assert torch.equal(generated.masked_fill(~m, tok.pad_token_id), c.completion_ids)
    step_logits = torch.stack(out.logits, 1)  # [N, T, V], before temperature / top-k
    forced = teacher_forced_logits(model, c.prompt_ids, c.prompt_mask, c.completion_ids, m)
    assert torch.allclose(step_logits[m], forced[m], atol=1e-4)
    sampler_logp = (
        (step_logits / temperature).log_softmax(-1).gather(-1, generated.unsqueeze(-1)).squeeze(-1)
    ).masked_fill(~m, 0.0)
    with torch.no_grad():
        ours = policy.completion_log_probs(c.prompt_ids, c.prompt_mask, c.completion_ids, m)
    assert torch.allclose(ours, sampler_logp, atol=1e-5)
    if top_k:
        kept = torch.isfinite(torch.stack(out.scores, 1))
        assert (kept.sum(-1)[m] == top_k).all()
        top = forced.topk(top_k, -1).indices
        assert torch.equal(kept[m], torch.zeros_like(kept[m]).scatter_(-1, top[m], True))
        assert kept.gather(-1, generated.unsqueeze(-1)).squeeze(-1)[m].all()


@pytest.mark.parametrize(("temperature", "top_k"), [(0.8, 0), (1.0, 10)])
def test_first_token_frequencies_match_softmax_of_the_logits(temperature, top_k):
    """6000 first tokens of one prompt against softmax(logits / temperature) (restricted to
    the top k): a chi-square statistic within ~6 standard deviations of its mean (a loose
    bound; the seed is fixed, so the test is deterministic), none outside the top k."""
    model, tok = tiny(spread=2.0)  # far from uniform: the frequencies must follow the logits
    policy = make_policy(model, tok, temperature=temperature, top_k=top_k, max_new_tokens=1)
    n = 6000
    c = sampled(policy, ["3+4="], n, seed=11)
    counts = torch.bincount(c.completion_ids[:, 0], minlength=len(tok)).double()
    ids, mask = policy.encode_prompts(["3+4="])
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask.long()).logits[0, -1].double()
    logits = logits / temperature
    if top_k:
        outside = torch.ones_like(logits, dtype=torch.bool).scatter_(
            0, logits.topk(top_k).indices, False
        )
        assert counts[outside].sum() == 0
        logits = logits.masked_fill(outside, -math.inf)
    expected = n * logits.softmax(-1)
    big = expected >= 5  # chi-square bins; the small ones pooled into one
    observed = torch.cat([counts[big], counts[~big].sum().view(1)])
    expect = torch.cat([expected[big], expected[~big].sum().view(1)])
    if expect[-1] < 5:
        observed, expect = observed[:-1], expect[:-1]
    chi2 = float(((observed - expect) ** 2 / expect).sum())
    df = len(expect) - 1
    assert df >= 5
    assert chi2 < df + 6 * math.sqrt(2 * df), (chi2, df)
    # The statistic does see a wrong distribution (the untempered one) at this sample size.
    if temperature != 1.0:
        wrong = n * (logits * temperature).softmax(-1)
        wrong_chi2 = float(((counts[big] - wrong[big]) ** 2 / wrong[big]).sum())
        assert wrong_chi2 > df + 6 * math.sqrt(2 * df)


# ---------------------------------------------------------------- EOS, rows


def test_stops_at_every_eos_and_pads_after_it():
    model, tok = tiny(bias={2: 2.5, 66: 2.5})  # 66 is "!": a second EOS of the model
    model.generation_config.eos_token_id = [tok.eos_token_id, 66]
    policy = make_policy(model, tok, max_new_tokens=8)
    assert policy._eos_ids == [2, 66]
    c = sampled(policy, PROMPTS, 6, seed=2)
    ids, m = c.completion_ids, c.completion_mask
    lengths = m.sum(-1)
    assert (lengths < 8).any() and (lengths == 8).any()
    last = ids.gather(1, (lengths - 1).unsqueeze(1)).squeeze(1)
    stopped = lengths < ids.shape[1]
    assert set(last[lengths < 8].tolist()) == {2, 66}  # both ids end completions
    assert torch.isin(last[stopped], torch.tensor([2, 66])).all()
    assert (ids[~m] == tok.pad_token_id).all()  # padding after the first EOS
    for row, mask_row in zip(ids, m):
        inside = row[mask_row]
        assert not torch.isin(inside[:-1], torch.tensor([2, 66])).any()  # the first EOS ends it
    assert all("</s>" not in t and "<pad>" not in t for t in c.texts)
    # Same tokens as the plain path for this seed.
    assert_same_completions(
        c,
        sampled(
            make_policy(model, tok, max_new_tokens=8, shared_prompt_cache=False), PROMPTS, 6, seed=2
        ),
    )


def test_rows_are_prompt_major_and_micro_batches_agree():
    """Rows b * K + k belong to prompt b, with or without micro-batches (2 prompts of K = 3
    per generate call), and match the fallback's rows for the same seed."""
    model, tok = tiny(spread=1.0)
    K = 3
    for micro in (None, 6):
        policy = make_policy(model, tok, max_new_tokens=6, micro_batch_size=micro)
        c = sampled(policy, PROMPTS, K, seed=8)
        assert c.completion_ids.shape[0] == len(PROMPTS) * K == len(c.texts)
        for b, prompt in enumerate(PROMPTS):
            for k in range(K):
                row = b * K + k
                assert tok.decode(c.prompt_ids[row][c.prompt_mask[row]]) == prompt
        fallback = make_policy(
            model, tok, max_new_tokens=6, micro_batch_size=micro, shared_prompt_cache=False
        )
        assert_same_completions(c, sampled(fallback, PROMPTS, K, seed=8))
    # Greedy: micro-batching changes nothing at all.
    full = make_policy(model, tok, max_new_tokens=6).sample_completions(PROMPTS, K, greedy=True)
    micro = make_policy(model, tok, max_new_tokens=6, micro_batch_size=K).sample_completions(
        PROMPTS, K, greedy=True
    )
    assert_same_completions(full, micro)


def test_lora_model_shares_the_prompt_cache():
    model, tok = tiny()
    lora = {"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"]}
    policy = make_policy(model, tok, max_new_tokens=6, lora=lora)
    with torch.no_grad():  # non-zero adapters, so that they change the logits
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5, generator=torch.Generator().manual_seed(len(name)))
    ids, _ = encode(tok, PROMPTS)
    shapes = record_forward_inputs(policy.model)
    c = sampled(policy, PROMPTS, 3, seed=1)
    assert shapes[0] == (len(PROMPTS), ids.shape[1] - 1)
    policy.shared_prompt_cache = False
    assert_same_completions(c, sampled(policy, PROMPTS, 3, seed=1))
    greedy = policy.sample_completions(PROMPTS, 1, greedy=True)
    policy.shared_prompt_cache = True
    shared_greedy = policy.sample_completions(PROMPTS, 2, greedy=True)
    assert torch.equal(shared_greedy.completion_ids, greedy.completion_ids.repeat_interleave(2, 0))
    # The adapters matter: without them the same completions get other log-probs.
    args = (c.prompt_ids, c.prompt_mask, c.completion_ids, c.completion_mask)
    with torch.no_grad():
        with_adapters = policy.completion_log_probs(*args)
        with policy.model.disable_adapter():
            without = policy.completion_log_probs(*args)
    assert not torch.allclose(with_adapters, without, atol=1e-3)


# ---------------------------------------------------------------- fallback


def test_fallback_option_calls_plain_generate_and_round_trips(tiny_path, tmp_path, monkeypatch):
    model, tok = tiny()
    calls = []
    original = model.generate

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return original(*args, **kwargs)

    monkeypatch.setattr(model, "generate", spy)
    plain = make_policy(model, tok, max_new_tokens=4, shared_prompt_cache=False)
    a = sampled(plain, PROMPTS, 3)
    assert calls[-1]["num_return_sequences"] == 3 and calls[-1].get("cache") is None
    shared = make_policy(model, tok, max_new_tokens=4)
    b = sampled(shared, PROMPTS, 3)
    assert calls[-1]["num_return_sequences"] == 1 and calls[-1]["cache"] is not None
    assert_same_completions(a, b)
    # The option is saved with the policy's options and restored on load.
    assert plain.options()["shared_prompt_cache"] is False
    assert shared.options()["shared_prompt_cache"] is True
    env = gym.make("TinyArithmetic-v0", size=3)
    agent = TPO(
        "CausalLMPolicy",
        env,
        batch_size=2,
        n_candidates=2,
        policy_kwargs={"model": tiny_path, "max_new_tokens": 2, "shared_prompt_cache": False},
    )
    agent.save(tmp_path / "agent")
    assert TPO.load(tmp_path / "agent", env=env).policy.shared_prompt_cache is False
    with pytest.raises(ValueError, match="shared_prompt_cache must be a bool"):
        make_policy(model, tok, shared_prompt_cache="yes")


def test_nothing_to_share_or_unsupported_goes_to_plain_generate():
    model, tok = tiny()
    ids, mask = encode(tok, ["1", "2", "3"])  # one-token prompts: no prefix to pre-fill
    shapes = record_forward_inputs(model)
    torch.manual_seed(0)
    ours = generate_shared_prefix(model, ids, mask, 2, do_sample=True, max_new_tokens=3)
    assert shapes[0] == (6, 1)
    torch.manual_seed(0)
    assert torch.equal(
        ours,
        model.generate(
            input_ids=ids,
            attention_mask=mask,
            num_return_sequences=2,
            do_sample=True,
            max_new_tokens=3,
        ),
    )
    greedy = generate_shared_prefix(model, ids, mask, 2, do_sample=False, max_new_tokens=3)
    plain = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=3)
    assert torch.equal(greedy, plain.repeat_interleave(2, 0))
    assert not shares_prefix(model, 5, 1)
    assert not shares_prefix(model, 1, 2)
    assert shares_prefix(model, 5, 2)
    for kwargs in ({"num_beams": 2}, {"use_cache": False}, {"cache_implementation": "static"}):
        assert not shares_prefix(model, 5, 2, **kwargs), kwargs


# --------------------------------------------------------------- benchmark


def test_generation_benchmark_runs_and_writes_its_table(tmp_path):
    """A minute version of benchmarks/llm_generation.py (no timing is asserted)."""
    from benchmarks import llm_generation

    out = tmp_path / "gen.json"
    args = ["--threads", "1", "--rounds", "1", "--warmup", "0", "--prompts", "2", "--k", "2"]
    result = llm_generation.main(
        [*args, "--max-new-tokens", "2", "--prompt-lengths", "6", "--out", str(out)]
    )
    (block,) = result["results"]
    assert block["same_samples_as_generate"]
    assert set(block["impls"]) == {"shared", "generate", "trl"}
    assert block["impls"]["generate"]["ratio_to_generate"] == pytest.approx(1.0)
    assert all(row["tokens"][0] > 0 for row in block["impls"].values())
    assert out.is_file() and "x generate" in out.with_suffix(".md").read_text()
