"""Tests of the Token Reversal environments (tpo_gym.token_reversal)."""

from __future__ import annotations

import copy
import re
import subprocess
import sys
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env, data_equivalence
from gymnasium.vector import AutoresetMode
from stable_baselines3.common.env_checker import check_env as sb3_check_env

import tpo_gym  # noqa: F401  (registers the ids)
from tpo_gym.candidates import score_candidates, supports_candidate_scoring
from tpo_gym.token_reversal import (
    REWARDS,
    TARGETS,
    NoPerStateScoreError,
    TokenReversalEnv,
    TokenReversalResetNeeded,
    TokenReversalVectorEnv,
    sequence_rewards,
    target_sequence,
)

IDS = {
    "TokenReversal-v0": "bag",
    "TokenReversal-bag-v0": "bag",
    "TokenReversal-sequential-v0": "sequential",
    "TokenReversal-terminal-v0": "terminal",
}
DENSE = ("bag", "sequential")


def _play(env: TokenReversalEnv, prompt, tokens):
    """Replay ``prompt``, write ``tokens``; return (obs list, rewards, infos)."""
    obs, info = env.reset(options={"context": np.asarray(prompt)})
    all_obs, rewards, infos = [obs], [], []
    for a in tokens:
        obs, r, term, trunc, info = env.step(int(a))
        all_obs.append(obs)
        rewards.append(r)
        infos.append(info)
        assert trunc is False
    assert term is True
    return all_obs, np.array(rewards), infos


# --------------------------------------------------------------------------- targets


def test_target_sequences_worked_example():
    x = np.array([0, 1, 3, 2, 2])  # V = 4
    assert target_sequence(x, "copy", 4).tolist() == [0, 1, 3, 2, 2]
    assert target_sequence(x, "flip", 4).tolist() == [3, 2, 0, 1, 1]
    assert target_sequence(x, "reverse_copy", 4).tolist() == [2, 2, 3, 1, 0]
    assert target_sequence(x, "reverse_flip", 4).tolist() == [1, 1, 0, 2, 3]
    # batched over leading axes, int64, a new array
    batch = np.stack([x, 3 - x])
    out = target_sequence(batch, "reverse_flip", 4)
    assert out.dtype == np.int64 and out.shape == (2, 5)
    assert out.tolist() == [[1, 1, 0, 2, 3], [2, 2, 3, 1, 0]]
    out[0, 0] = 99
    assert batch[0, 0] == 0
    # V = 2: flip is the bit complement
    assert target_sequence([0, 1, 1], "flip", 2).tolist() == [1, 0, 0]


@pytest.mark.parametrize("target", TARGETS)
def test_env_target_matches_helper(target):
    env = TokenReversalEnv(length=6, vocab_size=5, target=target)
    obs, _ = env.reset(seed=3)
    assert np.array_equal(env.target_tokens, target_sequence(env.prompt, target, 5))
    # Writing the target gives the maximal return; the final info carries the target.
    _, rewards, infos = _play(env, env.prompt, env.target_tokens)
    assert rewards.sum() == pytest.approx(1.0)
    assert infos[-1]["exact_match"] is True
    assert np.array_equal(infos[-1]["target"], target_sequence(obs[:6], target, 5))


# --------------------------------------------------------------------------- rewards


CASES = {
    # name: (tokens written relative to the target y of length 5, mask of correct tokens)
    "perfect": [1, 1, 1, 1, 1],
    "all_wrong": [0, 0, 0, 0, 0],
    "mixed": [1, 1, 0, 1, 1],
    "late_error": [1, 1, 1, 1, 0],
    "early_error": [0, 1, 1, 1, 1],
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("reward", REWARDS)
def test_returns_equal_paper_metric(case, reward):
    h, v = 5, 3
    mask = np.array(CASES[case], dtype=bool)
    prompt = np.array([2, 0, 1, 1, 0])
    y = target_sequence(prompt, "reverse_copy", v)
    tokens = np.where(mask, y, (y + 1) % v)
    env = TokenReversalEnv(length=h, vocab_size=v, reward=reward)
    _, rewards, infos = _play(env, prompt, tokens)

    prefix = int(np.argmin(mask)) if not mask.all() else h
    expected = {"bag": mask.mean(), "sequential": prefix / h, "terminal": float(mask.all())}
    assert rewards.sum() == pytest.approx(expected[reward])
    assert [i["correct"] for i in infos] == mask.tolist()
    # per-step shape of the rewards
    if reward == "bag":
        assert np.allclose(rewards, mask / h)
    elif reward == "sequential":
        assert np.allclose(rewards, np.cumprod(mask) / h)
    else:
        assert rewards[:-1].tolist() == [0.0] * (h - 1) and rewards[-1] == float(mask.all())
    final = infos[-1]
    assert final["n_correct"] == int(mask.sum()) and isinstance(final["n_correct"], int)
    assert final["exact_match"] is bool(mask.all())
    assert final["target"].dtype == np.int64 and final["target"].tolist() == y.tolist()
    assert all("target" not in i for i in infos[:-1])
    # the pure helper gives the very same per-step rewards
    assert np.array_equal(sequence_rewards(prompt, tokens, "reverse_copy", v, reward), rewards)


@pytest.mark.parametrize("reward", REWARDS)
@pytest.mark.parametrize("target", TARGETS)
def test_sequence_rewards_equals_stepping_env(reward, target):
    h, v, n = 7, 3, 40
    rng = np.random.default_rng(0)
    prompts = rng.integers(v, size=(n, h))
    y = target_sequence(prompts, target, v)
    # mostly-right sequences so that every reward kind gives non-zero returns
    tokens = np.where(rng.random((n, h)) < 0.85, y, rng.integers(v, size=(n, h)))
    tokens[0] = y[0]
    got = sequence_rewards(prompts, tokens, target, v, reward)
    assert got.shape == (n, h) and got.dtype == np.float64
    env = TokenReversalEnv(length=h, vocab_size=v, target=target, reward=reward)
    for i in range(n):
        _, rewards, _ = _play(env, prompts[i], tokens[i])
        assert np.array_equal(got[i], rewards)
    assert got.sum(axis=1).max() == pytest.approx(1.0)


def test_sequence_rewards_broadcasts_k_samples_per_prompt():
    h, v, b, k = 4, 2, 3, 5
    rng = np.random.default_rng(1)
    prompts = rng.integers(v, size=(b, h))
    tokens = rng.integers(v, size=(b, k, h))
    out = sequence_rewards(prompts[:, None, :], tokens, "flip", v, "sequential")
    assert out.shape == (b, k, h)
    for i in range(b):
        for j in range(k):
            assert np.array_equal(
                out[i, j], sequence_rewards(prompts[i], tokens[i, j], "flip", v, "sequential")
            )


# --------------------------------------------------------------------------- spaces, obs


def test_spaces_obs_layout_and_attributes():
    env = TokenReversalEnv(length=3, vocab_size=4, target="copy")
    assert env.observation_space == gym.spaces.MultiDiscrete([5] * 6)
    assert env.action_space == gym.spaces.Discrete(4)
    assert (env.pad_id, env.prompt_length, env.vocab_size) == (4, 3, 4)
    obs, info = env.reset(options={"context": [3, 0, 2]})
    assert info == {} and env.step_index == 0
    assert obs.dtype == np.int64 and obs.tolist() == [3, 0, 2, 4, 4, 4]
    assert obs in env.observation_space
    obs, r, term, _, info = env.step(3)
    assert obs.tolist() == [3, 0, 2, 3, 4, 4] and env.step_index == 1 and not term
    assert info == {"correct": True} and r == pytest.approx(1 / 3)
    obs, *_ = env.step(np.int64(1))
    assert obs.tolist() == [3, 0, 2, 3, 1, 4] and env.step_index == 2
    obs, _, term, trunc, info = env.step(2)
    assert obs.tolist() == [3, 0, 2, 3, 1, 2] and (term, trunc) == (True, False)
    assert env.step_index == 3 and info["n_correct"] == 2 and info["exact_match"] is False
    # returned observations are copies
    obs[0] = 0
    assert env.prompt.tolist() == [3, 0, 2]


def test_seed_determinism_and_uniform_prompts():
    def prompts(seed, n=200):
        env = TokenReversalEnv(length=5, vocab_size=4)
        out = [env.reset(seed=seed)[0][:5]]
        out += [env.reset()[0][:5] for _ in range(n - 1)]
        return np.array(out)

    a = prompts(7)
    assert np.array_equal(a, prompts(7))
    assert not np.array_equal(a, prompts(8))
    freq = np.bincount(a.ravel(), minlength=4) / a.size
    assert np.allclose(freq, 0.25, atol=0.05)
    assert len({tuple(p) for p in a}) > 150  # 1024 possible prompts, nearly all distinct


def test_target_never_in_obs_or_reset_info():
    # Two envs whose targets differ (copy vs flip) but prompts agree must reset and
    # observe identically; the target only appears in the final step's info.
    for seed in range(5):
        a, b = TokenReversalEnv(length=4, target="copy"), TokenReversalEnv(length=4, target="flip")
        ra, rb = a.reset(seed=seed), b.reset(seed=seed)
        assert data_equivalence(ra, rb, exact=True) and ra[1] == {}
        for t in range(4):
            oa, _, _, _, ia = a.step(t % 2)
            ob, _, _, _, ib = b.step(t % 2)
            assert np.array_equal(oa, ob)
            assert ("target" in ia) == (t == 3)
    va = gym.make_vec("TokenReversal-v0", num_envs=3, length=4, target="copy")
    vb = gym.make_vec("TokenReversal-v0", num_envs=3, length=4, target="flip")
    assert data_equivalence(va.reset(seed=0), vb.reset(seed=0), exact=True)


# --------------------------------------------------------------------------- registration, checkers


@pytest.mark.parametrize("env_id", IDS)
def test_gym_make_and_env_checkers(env_id):
    reward = IDS[env_id]
    env = gym.make(env_id)
    assert isinstance(env.unwrapped, TokenReversalEnv)
    assert env.spec.max_episode_steps is None
    u = env.unwrapped
    assert (u.prompt_length, u.vocab_size, u.target, u.reward) == (10, 2, "reverse_copy", reward)
    assert env.metadata["tpo_group_mode"] == ("sequence" if reward == "terminal" else "per_state")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any checker warning fails the test
        check_env(env.unwrapped)
        sb3_check_env(env.unwrapped)
        small = gym.make(env_id, length=4, vocab_size=3, target="flip")
        assert (small.unwrapped.prompt_length, small.unwrapped.target) == (4, "flip")
        sb3_check_env(small)


def test_render_ansi():
    env = gym.make("TokenReversal-v0", render_mode="ansi", length=3, vocab_size=2)
    env.reset(options={"context": [0, 1, 1]})
    env.step(1)
    text = env.render()
    assert isinstance(text, str) and "prompt 0 1 1" in text and "output 1 _ _" in text
    with pytest.raises(ValueError, match="'human'"):
        TokenReversalEnv(render_mode="human")
    venv = TokenReversalVectorEnv(2, length=2, render_mode="ansi")
    venv.reset(seed=0)
    assert len(venv.render()) == 2


def test_episode_end_and_reset_needed():
    env = TokenReversalEnv(length=2)
    with pytest.raises(TokenReversalResetNeeded, match="reset"):
        env.step(0)
    with pytest.raises(gym.error.ResetNeeded):
        env.score_candidates([0])
    env.reset(seed=0)
    env.step(0)
    _, _, term, _, _ = env.step(0)
    assert term
    with pytest.raises(TokenReversalResetNeeded, match="terminated after 2 tokens"):
        env.step(0)
    with pytest.raises(ValueError, match="terminated"):
        env.score_candidates([0, 1])
    env.reset()
    env.step(1)  # fine again


# --------------------------------------------------------------------------- vector env


@pytest.mark.parametrize("env_id", IDS)
def test_make_vec_native_class(env_id):
    venv = gym.make_vec(env_id, num_envs=4, length=3, vocab_size=3, target="copy")
    assert type(venv) is TokenReversalVectorEnv
    assert venv.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    assert venv.reward == IDS[env_id] and venv.target == "copy"
    assert venv.metadata["tpo_group_mode"] == (
        "sequence" if IDS[env_id] == "terminal" else "per_state"
    )
    assert venv.single_observation_space == gym.spaces.MultiDiscrete([4] * 6)
    assert venv.single_action_space == gym.spaces.Discrete(3)
    # gymnasium's batch_space (as SyncVectorEnv): Box(0, pad_id, (num_envs, 2H), int64)
    assert venv.observation_space == gym.spaces.Box(0, 3, (4, 6), np.int64)
    assert venv.action_space == gym.spaces.MultiDiscrete([3] * 4)
    obs, info = venv.reset(seed=0)
    assert obs.shape == (4, 6) and obs.dtype == np.int64 and obs in venv.observation_space
    assert info == {} and (obs[:, 3:] == venv.pad_id).all()


@pytest.mark.parametrize("reward", REWARDS)
def test_vector_env_steps_and_autoreset(reward):
    n, h, v = 5, 3, 2
    venv = TokenReversalVectorEnv(n, length=h, vocab_size=v, target="reverse_flip", reward=reward)
    obs, _ = venv.reset(seed=1)
    for episode in range(3):
        prompts, targets = venv.prompts, venv.targets
        assert np.array_equal(obs[:, :h], prompts)
        assert np.array_equal(targets, target_sequence(prompts, "reverse_flip", v))
        for t in range(h):
            assert venv.step_index == t
            actions = targets[:, t] if episode == 0 else np.zeros(n, dtype=np.int64)
            obs, rew, term, trunc, info = venv.step(actions)
            assert rew.dtype == np.float64 and rew.shape == (n,)
            assert not trunc.any()
            if t < h - 1:
                assert not term.any()
                assert set(info) == {"correct", "_correct"} and info["_correct"].all()
                assert np.array_equal(obs[:, h + t], actions)
                assert (obs[:, h + t + 1 :] == venv.pad_id).all()
        assert term.all() and venv.step_index == 0
        assert set(info) == {"final_obs", "_final_obs", "final_info", "_final_info"}
        assert info["_final_obs"].all() and info["_final_info"].all()
        assert info["final_obs"].dtype == object
        final = np.stack(list(info["final_obs"]))
        assert np.array_equal(final[:, :h], prompts) and (final[:, h:] != venv.pad_id).all()
        fi = info["final_info"]
        assert np.array_equal(fi["target"], targets)
        assert fi["n_correct"].dtype == np.int64 and fi["exact_match"].dtype == np.bool_
        assert all(fi[f"_{k}"].all() for k in ("correct", "target", "n_correct", "exact_match"))
        if episode == 0:
            assert fi["exact_match"].all() and (fi["n_correct"] == h).all()
        # the new episode: fresh prompts, nothing written
        assert (obs[:, h:] == venv.pad_id).all()
        assert np.array_equal(obs[:, :h], venv.prompts)


def test_vector_env_equals_single_envs_under_replayed_prompts():
    n, h, v = 6, 5, 3
    rng = np.random.default_rng(2)
    for reward in REWARDS:
        venv = gym.make_vec(f"TokenReversal-{reward}-v0", num_envs=n, length=h, vocab_size=v)
        singles = [gym.make(f"TokenReversal-{reward}-v0", length=h, vocab_size=v) for _ in range(n)]
        for _ in range(3):
            prompts = rng.integers(v, size=(n, h))
            obs, _ = venv.reset(options={"context": prompts})
            assert np.array_equal(
                obs,
                np.stack([e.reset(options={"context": p})[0] for e, p in zip(singles, prompts)]),
            )
            y = venv.targets
            for t in range(h):
                actions = np.where(rng.random(n) < 0.7, y[:, t], rng.integers(v, size=n))
                obs, rew, term, trunc, info = venv.step(actions)
                res = [e.step(a) for e, a in zip(singles, actions)]
                assert np.array_equal(rew, [r[1] for r in res])
                assert term.tolist() == [r[2] for r in res]
                if t < h - 1:
                    assert np.array_equal(obs, np.stack([r[0] for r in res]))
                    assert info["correct"].tolist() == [r[4]["correct"] for r in res]
                else:
                    assert data_equivalence(
                        list(info["final_obs"]), [r[0] for r in res], exact=True
                    )
                    for key in ("correct", "n_correct", "exact_match"):
                        assert info["final_info"][key].tolist() == [r[4][key] for r in res]
                    assert np.array_equal(
                        info["final_info"]["target"], np.stack([r[4]["target"] for r in res])
                    )


@pytest.mark.parametrize("reward", REWARDS)
def test_vector_env_equals_sync_vector_env_same_step(reward):
    """Seeded with s, sub-env i reproduces a single env seeded s + i, across autoresets."""
    n, h, v = 3, 4, 3
    kwargs = dict(length=h, vocab_size=v, target="flip")
    env_id = f"TokenReversal-{reward}-v0"
    native = gym.make_vec(env_id, num_envs=n, **kwargs)
    sync = gym.make_vec(
        env_id,
        num_envs=n,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
        **kwargs,
    )
    assert data_equivalence(native.reset(seed=4), sync.reset(seed=4), exact=True)
    rng = np.random.default_rng(1)
    for step in range(4 * h):
        if step == 2 * h + 1:  # reset mid-episode without a seed: the streams continue
            assert data_equivalence(native.reset(), sync.reset(), exact=True)
        actions = rng.integers(v, size=n)
        assert data_equivalence(native.step(actions), sync.step(actions), exact=True)


def test_vector_reset_seed_list_and_none():
    venv = TokenReversalVectorEnv(3, length=6, vocab_size=4)
    obs_list, _ = venv.reset(seed=[5, 6, 7])
    obs_int, _ = venv.reset(seed=5)
    assert np.array_equal(obs_list, obs_int)
    nxt, _ = venv.reset()
    single = TokenReversalEnv(length=6, vocab_size=4)
    single.reset(seed=6)
    assert np.array_equal(nxt[1], single.reset()[0])
    with pytest.raises(ValueError, match="list of 3 seeds"):
        venv.reset(seed=[1, 2])


@pytest.mark.parametrize("k", [2, 4])
def test_group_size_blocks_share_prompts_across_autoresets(k):
    n, h = 8, 3
    venv = gym.make_vec(
        "TokenReversal-terminal-v0", num_envs=n, group_size=k, length=h, vocab_size=4
    )
    assert venv.group_size == k and venv.num_groups == n // k
    obs, _ = venv.reset(seed=0)
    seen = set()
    rng = np.random.default_rng(0)
    for _ in range(5):
        blocks = venv.prompts.reshape(n // k, k, h)
        assert (blocks == blocks[:, :1]).all()
        assert np.array_equal(obs[:, :h], venv.prompts)
        seen.update(tuple(p) for p in blocks[:, 0])
        for _ in range(h):  # different actions within a block do not split the block
            obs, *_ = venv.step(rng.integers(4, size=n))
    assert len(seen) > n // k  # new prompts after each autoreset
    # the leader of block b follows the stream of a single env seeded with b * k
    venv.reset(seed=10)
    single = TokenReversalEnv(length=h, vocab_size=4)
    assert np.array_equal(venv.prompts[k], single.reset(seed=10 + k)[0][:h])
    # replayed contexts: one per block, or one per sub-env constant within blocks
    per_block = np.arange(n // k * h).reshape(n // k, h) % 4
    obs, _ = venv.reset(options={"context": per_block})
    assert np.array_equal(obs[:, :h], np.repeat(per_block, k, axis=0))
    venv.reset(options={"context": np.repeat(per_block, k, axis=0)})
    bad = np.repeat(per_block, k, axis=0)
    bad[1] = (bad[1] + 1) % 4
    with pytest.raises(ValueError, match=r"block 0.*group_size="):
        venv.reset(options={"context": bad})


# --------------------------------------------------------------------------- scoring


def _rng_state(gen: np.random.Generator) -> dict:
    return copy.deepcopy(gen.bit_generator.state)


@pytest.mark.parametrize("reward", DENSE)
def test_score_candidates_single_matches_step_and_changes_no_state(reward):
    h, v = 5, 3
    env = gym.make(f"TokenReversal-{reward}-v0", length=h, vocab_size=v)
    twin = gym.make(f"TokenReversal-{reward}-v0", length=h, vocab_size=v)
    assert supports_candidate_scoring(env)
    for episode in range(3):
        obs, _ = env.reset(seed=episode)
        twin.reset(seed=episode)
        u = env.unwrapped
        y = u.target_tokens
        for t in range(h):
            rng_before = _rng_state(u.np_random)
            scores = score_candidates(env, np.arange(v))  # through the wrappers
            again = u.score_candidates([2, 2, 0])
            assert scores.dtype == np.float64 and scores.shape == (v,)
            assert again.tolist() == [scores[2], scores[2], scores[0]]
            alive = reward == "bag" or bool((u._tokens[:t] == y[:t]).all())
            expected = (np.arange(v) == y[t]) * (alive / h)
            assert np.array_equal(scores, expected)
            assert u.np_random.bit_generator.state == rng_before and u.step_index == t
            # make a mistake at step 1 of episode 1 so sequential "alive" flips
            a = (y[t] + 1) % v if (episode, t) == (1, 1) else int(y[t])
            obs2, r, *_ = env.step(a)
            assert r == scores[a] == twin.step(a)[1]
        assert np.array_equal(env.reset()[0], twin.reset()[0])  # next reset unaffected


@pytest.mark.parametrize("reward", DENSE)
def test_score_candidates_vector_matches_step_and_changes_no_state(reward):
    n, h, v = 6, 4, 3
    venv = gym.make_vec(f"TokenReversal-{reward}-v0", num_envs=n, length=h, vocab_size=v)
    twin = gym.make_vec(f"TokenReversal-{reward}-v0", num_envs=n, length=h, vocab_size=v)
    venv.reset(seed=9)
    twin.reset(seed=9)
    rng = np.random.default_rng(0)
    single = TokenReversalEnv(length=h, vocab_size=v, reward=reward)
    for _ in range(3 * h):
        t = venv.step_index
        cands = rng.integers(v, size=(n, 5))
        cands[:, 0] = venv.targets[:, t]
        prompts, keys = venv.prompts, venv._keys.copy()
        scores = venv.score_candidates(cands)
        assert scores.shape == (n, 5) and scores.dtype == np.float64
        assert np.array_equal(venv.prompts, prompts) and np.array_equal(venv._keys, keys)
        assert venv.step_index == t
        # each row equals the single env's scores in the same state
        for i in range(n):
            single.reset(options={"context": venv.prompts[i]})
            for a in venv._tokens[i, :t]:
                single.step(int(a))
            assert np.array_equal(scores[i], single.score_candidates(cands[i]))
        pick = rng.integers(5, size=n)
        actions = cands[np.arange(n), pick]
        obs, rew, *_ = venv.step(actions)
        assert np.array_equal(rew, scores[np.arange(n), pick])
        obs_twin, rew_twin, *_ = twin.step(actions)
        assert np.array_equal(obs, obs_twin) and np.array_equal(rew, rew_twin)


def test_terminal_score_candidates_raises_clear_error():
    env = gym.make("TokenReversal-terminal-v0")
    env.reset(seed=0)
    with pytest.raises(NoPerStateScoreError, match=r"terminal.*group_mode='sequence'"):
        score_candidates(env, [0, 1])
    venv = gym.make_vec("TokenReversal-terminal-v0", num_envs=2)
    venv.reset(seed=0)
    with pytest.raises(NotImplementedError, match="K full rollouts per prompt"):
        venv.score_candidates(np.zeros((2, 3), dtype=int))
    assert issubclass(NoPerStateScoreError, ValueError)


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(length=0), r"length must be an integer >= 1, got 0"),
        (dict(length=2.0), r"length must be an integer >= 1, got 2.0"),
        (dict(vocab_size=1), r"vocab_size must be an integer >= 2, got 1"),
        (dict(vocab_size=True), r"vocab_size must be an integer >= 2, got True"),
        (dict(target="reverse"), r"target must be one of .*'reverse_flip'.*got 'reverse'"),
        (dict(reward="dense"), r"reward must be one of .*got 'dense'"),
    ],
)
def test_bad_constructor_arguments_raise(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TokenReversalEnv(**kwargs)
    with pytest.raises(ValueError, match=message):
        gym.make_vec("TokenReversal-v0", num_envs=2, **kwargs)


def test_bad_vector_arguments_raise():
    with pytest.raises(ValueError, match=r"num_envs=6, group_size=4"):
        TokenReversalVectorEnv(6, group_size=4)
    with pytest.raises(ValueError, match=r"group_size must be an integer >= 1, got 0"):
        TokenReversalVectorEnv(6, group_size=0)
    with pytest.raises(ValueError, match=r"num_envs must be an integer >= 1, got 0"):
        TokenReversalVectorEnv(0)


@pytest.mark.parametrize("bad", [2, -1, 1.0, True, "1", np.array([0, 1])])
def test_invalid_action_raises_with_value(bad):
    env = TokenReversalEnv(vocab_size=2)
    env.reset(seed=0)
    with pytest.raises(ValueError, match=re.escape(repr(bad)[:6])) as exc:
        env.step(bad)
    assert "[0, 1]" in str(exc.value)
    assert env.step_index == 0
    env.step(1)  # the failed step changed nothing


def test_vector_step_and_candidates_validate():
    venv = TokenReversalVectorEnv(3, vocab_size=4)
    with pytest.raises(ValueError, match="reset"):
        venv.step(np.zeros(3, dtype=int))
    with pytest.raises(TokenReversalResetNeeded):
        venv.score_candidates(np.zeros((3, 2), dtype=int))
    venv.reset(seed=0)
    with pytest.raises(ValueError, match=re.escape("(2,)")):
        venv.step(np.zeros(2, dtype=int))
    with pytest.raises(ValueError, match=r"invalid action 4 for sub-env 1.*\[0, 3\]"):
        venv.step(np.array([0, 4, 0]))
    with pytest.raises(ValueError, match="float64"):
        venv.step(np.array([0.0, 1.0, 2.0]))
    with pytest.raises(ValueError, match=re.escape("(2, 2)")):
        venv.score_candidates(np.zeros((2, 2), dtype=int))
    with pytest.raises(ValueError, match="candidate action 4"):
        venv.score_candidates(np.full((3, 2), 4))
    assert venv.step_index == 0
    env = TokenReversalEnv(vocab_size=4)
    env.reset(seed=0)
    with pytest.raises(ValueError, match=re.escape("(2, 3)")):
        env.score_candidates(np.zeros((2, 3), dtype=int))


def test_bad_prompts_raise():
    env = TokenReversalEnv(length=3, vocab_size=2)
    with pytest.raises(ValueError, match=r"shape \(3,\), got shape \(4,\)"):
        env.reset(options={"context": [0, 1, 0, 1]})
    with pytest.raises(ValueError, match=r"token 2 at index \(1,\).*\[0, 1\]"):
        env.reset(options={"context": [0, 2, 0]})
    with pytest.raises(ValueError, match=r"token -1"):
        env.reset(options={"context": [0, -1, 0]})
    with pytest.raises(ValueError, match=r"integer dtype, got dtype float64"):
        env.reset(options={"context": [0.0, 1.0, 0.0]})
    with pytest.raises(ValueError, match=r"unknown reset option.*'prompt'"):
        env.reset(options={"prompt": [0, 1, 0]})
    with pytest.raises(ValueError, match="reset"):
        env.prompt  # noqa: B018  (not reset yet: a failed reset changed nothing)
    venv = TokenReversalVectorEnv(4, length=3, vocab_size=2, group_size=2)
    with pytest.raises(ValueError, match=r"\(4, 3\).*\(2, 3\).*\(3,\).*got shape \(3, 3\)"):
        venv.reset(options={"context": np.zeros((3, 3), dtype=int)})
    with pytest.raises(ValueError, match=r"token 5 at index \(1, 2\)"):
        venv.reset(options={"context": [[0, 0, 0], [0, 0, 5]]})
    obs, _ = venv.reset(options={"context": [1, 0, 1]})  # one prompt for every sub-env
    assert (obs[:, :3] == [1, 0, 1]).all()


def test_bad_helper_input_raises():
    with pytest.raises(ValueError, match=r"target must be one of .*got 'mirror'"):
        target_sequence([0, 1], "mirror", 2)
    with pytest.raises(ValueError, match=r"vocab_size must be an integer >= 2, got 1"):
        target_sequence([0, 0], "copy", 1)
    with pytest.raises(ValueError, match=r"prompts has token 3"):
        target_sequence([0, 3], "copy", 3)
    with pytest.raises(ValueError, match=r"reward must be one of .*got 'sparse'"):
        sequence_rewards([0, 1], [0, 1], "copy", 2, "sparse")
    with pytest.raises(ValueError, match=r"tokens has token 2"):
        sequence_rewards([0, 1], [0, 2], "copy", 2, "bag")
    with pytest.raises(ValueError, match=r"same sequence length.*\(2,\) and \(3,\)"):
        sequence_rewards([0, 1], [0, 1, 1], "copy", 2, "bag")
    with pytest.raises(ValueError, match=r"do not broadcast"):
        sequence_rewards(np.zeros((2, 3), int), np.zeros((3, 3), int), "copy", 2, "bag")
    with pytest.raises(ValueError, match=r"at least one token"):
        sequence_rewards(np.zeros((2, 0), int), np.zeros((2, 0), int), "copy", 2, "bag")


# --------------------------------------------------------------------------- layering


def test_import_tpo_gym_does_not_import_torch():
    code = (
        "import tpo_gym, tpo_gym.token_reversal, sys, gymnasium as gym; "
        "gym.make_vec('TokenReversal-v0', num_envs=2).reset(seed=0); "
        "assert 'torch' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
