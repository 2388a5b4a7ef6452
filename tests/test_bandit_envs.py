"""Tests of the bandit environments (tpo_gym.bandits) and the candidate-scoring helpers."""

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
from tpo_gym.bandits import (
    BanditResetNeeded,
    MultiContextBanditEnv,
    MultiContextBanditVectorEnv,
    SymmetricBanditEnv,
    SymmetricBanditVectorEnv,
)
from tpo_gym.candidates import (
    CandidateScoringEnv,
    check_candidate_actions,
    score_candidates,
    supports_candidate_scoring,
)

SYM = "SymmetricBandit-v0"
MULTI = "MultiContextBandit-v0"
IDS = [SYM, MULTI]
VECTOR_CLASSES = {SYM: SymmetricBanditVectorEnv, MULTI: MultiContextBanditVectorEnv}
# Small task for the multi-context env so that several contexts and rewards show up quickly.
SMALL = {SYM: dict(n_actions=5), MULTI: dict(n_contexts=6, n_actions=4)}


def _rng_state(gen: np.random.Generator) -> dict:
    return copy.deepcopy(gen.bit_generator.state)


# --------------------------------------------------------------------------- spaces, task


def test_spaces_single_and_vector():
    env = SymmetricBanditEnv(n_actions=7)
    assert env.observation_space == gym.spaces.Discrete(1)
    assert env.action_space == gym.spaces.Discrete(7)
    env = MultiContextBanditEnv(n_contexts=5, n_actions=3)
    assert env.observation_space == gym.spaces.Discrete(5)
    assert env.action_space == gym.spaces.Discrete(3)

    venv = gym.make_vec(MULTI, num_envs=4, n_contexts=5, n_actions=3)
    assert venv.num_envs == 4
    assert venv.single_observation_space == gym.spaces.Discrete(5)
    assert venv.single_action_space == gym.spaces.Discrete(3)
    assert venv.observation_space == gym.spaces.MultiDiscrete([5] * 4)
    assert venv.action_space == gym.spaces.MultiDiscrete([3] * 4)
    obs, info = venv.reset(seed=0)
    assert obs.shape == (4,) and obs.dtype == np.int64 and obs in venv.observation_space
    assert info == {}

    venv = gym.make_vec(SYM, num_envs=3, n_actions=7)
    assert venv.single_observation_space == gym.spaces.Discrete(1)
    assert venv.action_space == gym.spaces.MultiDiscrete([7] * 3)
    assert np.array_equal(venv.reset(seed=0)[0], np.zeros(3, dtype=np.int64))


def test_default_sizes_match_paper():
    assert SymmetricBanditEnv().action_space.n == 100
    env = MultiContextBanditEnv()
    assert (env.observation_space.n, env.action_space.n) == (100, 10)


def test_task_fixed_per_instance_and_reset_seed_does_not_change_it():
    a, b = SymmetricBanditEnv(task_seed=3), SymmetricBanditEnv(task_seed=3)
    assert a.correct_action == b.correct_action
    before = a.correct_action
    a.reset(seed=123)
    a.reset(seed=999)
    assert a.correct_action == before
    assert SymmetricBanditEnv(correct_action=42).correct_action == 42
    # Different task seeds give different tasks (over 20 seeds at least two tasks differ).
    assert len({SymmetricBanditEnv(task_seed=s).correct_action for s in range(20)}) > 1

    m = MultiContextBanditEnv(n_contexts=50, n_actions=10, task_seed=1)
    table = m.correct_actions.copy()
    assert table.shape == (50,) and table.dtype == np.int64
    assert set(np.unique(table)) <= set(range(10)) and len(np.unique(table)) > 1
    m.reset(seed=5)
    assert np.array_equal(m.correct_actions, table)
    assert np.array_equal(MultiContextBanditEnv(n_contexts=50, task_seed=1).correct_actions, table)
    assert not np.array_equal(
        MultiContextBanditEnv(n_contexts=50, task_seed=2).correct_actions, table
    )
    given = np.arange(6) % 4
    assert np.array_equal(
        MultiContextBanditEnv(n_contexts=6, n_actions=4, correct_actions=given).correct_actions,
        given,
    )
    with pytest.raises(ValueError):
        m.correct_actions[0] = 3  # read-only view


def test_rewards_termination_and_info():
    env = SymmetricBanditEnv(n_actions=10, correct_action=3)
    obs, info = env.reset(seed=0)
    assert obs == 0 and isinstance(obs, np.integer) and info == {}
    obs, r, term, trunc, info = env.step(3)
    assert (obs, r, term, trunc, info) == (0, 1.0, True, False, {"correct": True})
    env.reset()
    obs, r, term, trunc, info = env.step(np.int64(4))
    assert (r, term, trunc, info) == (0.0, True, False, {"correct": False})

    m = MultiContextBanditEnv(n_contexts=4, n_actions=3, correct_actions=[2, 0, 1, 2])
    for ctx in range(4):
        obs, _ = m.reset(options={"context": ctx})
        assert obs == ctx and m.context == ctx and m.correct_action == m.correct_actions[ctx]
        obs, r, term, trunc, info = m.step(m.correct_actions[ctx])
        assert (obs, r, term, trunc, info["correct"]) == (ctx, 1.0, True, False, True)
        m.reset(options={"context": ctx})
        _, r, _, _, info = m.step((m.correct_actions[ctx] + 1) % 3)
        assert r == 0.0 and info["correct"] is False


def test_seed_determinism_of_contexts():
    def contexts(seed, n=30):
        env = MultiContextBanditEnv(n_contexts=100)
        out = [env.reset(seed=seed)[0]]
        for _ in range(n - 1):
            env.step(0)
            out.append(env.reset()[0])
        return out

    assert contexts(7) == contexts(7)
    assert contexts(7) != contexts(8)
    # Uniform over contexts: 30 draws from 100 contexts hit many distinct ones.
    assert len(set(contexts(7))) > 15


def test_reset_options_context_replays():
    env = MultiContextBanditEnv(n_contexts=10, n_actions=4)
    env.reset(seed=0)
    for c in [0, 9, 4, 4, np.int64(2)]:
        obs, info = env.reset(options={"context": c})
        assert obs == c and info == {}
    venv = MultiContextBanditVectorEnv(num_envs=3, n_contexts=10, n_actions=4)
    obs, _ = venv.reset(seed=0, options={"context": np.array([1, 9, 1])})
    assert obs.tolist() == [1, 9, 1]
    obs, _ = venv.reset(options={"context": 5})  # an int broadcasts to every sub-env
    assert obs.tolist() == [5, 5, 5]


def test_correct_action_not_revealed_at_reset():
    # Two instances that differ only in the hidden task must reset identically.
    for seed in range(5):
        a = SymmetricBanditEnv(n_actions=10, correct_action=1).reset(seed=seed)
        b = SymmetricBanditEnv(n_actions=10, correct_action=8).reset(seed=seed)
        assert data_equivalence(a, b, exact=True) and a[1] == {}
        a = MultiContextBanditEnv(n_contexts=7, n_actions=5, correct_actions=[0] * 7).reset(
            seed=seed
        )
        b = MultiContextBanditEnv(n_contexts=7, n_actions=5, correct_actions=[4] * 7).reset(
            seed=seed
        )
        assert data_equivalence(a, b, exact=True) and a[1] == {}
    va = gym.make_vec(MULTI, num_envs=3, n_contexts=7, n_actions=5, correct_actions=[0] * 7)
    vb = gym.make_vec(MULTI, num_envs=3, n_contexts=7, n_actions=5, correct_actions=[4] * 7)
    assert data_equivalence(va.reset(seed=0), vb.reset(seed=0), exact=True)


# --------------------------------------------------------------------------- checkers


@pytest.mark.parametrize("env_id", IDS)
def test_gym_make_and_env_checkers(env_id):
    env = gym.make(env_id)
    assert isinstance(env.unwrapped, (SymmetricBanditEnv, MultiContextBanditEnv))
    assert env.spec.max_episode_steps is None  # a 1-step env needs no TimeLimit
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any checker warning fails the test
        check_env(env.unwrapped)
        sb3_check_env(env.unwrapped)
        sb3_check_env(gym.make(env_id, **SMALL[env_id]))


def test_render_ansi():
    env = gym.make(MULTI, render_mode="ansi", n_contexts=5)
    env.reset(seed=0)
    env.step(1)
    text = env.render()
    assert isinstance(text, str) and "action 1" in text
    with pytest.raises(ValueError, match="'human'"):
        MultiContextBanditEnv(render_mode="human")


# --------------------------------------------------------------------------- vector envs


@pytest.mark.parametrize("env_id", IDS)
def test_make_vec_returns_native_class_with_same_step_autoreset(env_id):
    venv = gym.make_vec(env_id, num_envs=5, **SMALL[env_id])
    assert type(venv) is VECTOR_CLASSES[env_id]
    assert venv.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    assert venv.single_action_space.n == SMALL[env_id]["n_actions"]  # kwargs reached the class
    venv.reset(seed=0)
    _, _, term, trunc, info = venv.step(np.zeros(5, dtype=np.int64))
    assert term.all() and not trunc.any()
    assert info["_final_obs"].all() and info["_final_info"].all()
    assert info["final_obs"].dtype == object and info["final_info"]["correct"].dtype == np.bool_


@pytest.mark.parametrize("env_id", IDS)
def test_vector_env_equals_n_single_envs(env_id):
    n, seed, steps = 4, 11, 25
    kwargs = SMALL[env_id]
    venv = gym.make_vec(env_id, num_envs=n, **kwargs)
    singles = [gym.make(env_id, **kwargs) for _ in range(n)]
    correct = singles[0].unwrapped.correct_actions
    assert np.array_equal(venv.correct_actions, correct)

    obs, _ = venv.reset(seed=seed)
    single_obs = [e.reset(seed=seed + i)[0] for i, e in enumerate(singles)]
    assert obs.tolist() == single_obs
    for i, e in enumerate(singles):
        assert venv.np_randoms[i].bit_generator.state == e.unwrapped.np_random.bit_generator.state

    act_rng = np.random.default_rng(0)
    total_reward = 0.0
    for t in range(steps):
        # Half of the time play the correct action so that both rewards occur.
        actions = act_rng.integers(kwargs["n_actions"], size=n)
        if t % 2:
            actions = correct[obs].copy()
        obs, rew, term, trunc, info = venv.step(actions)
        exp_final, exp_rew, exp_next = [], [], []
        for e, a in zip(singles, actions):
            o, r, te, tr, inf = e.step(a)
            assert te and not tr
            exp_final.append(o)
            exp_rew.append(r)
            exp_next.append(e.reset()[0])
            assert inf["correct"] == (r == 1.0)
        assert list(info["final_obs"]) == exp_final
        assert rew.dtype == np.float64 and rew.tolist() == exp_rew
        assert obs.tolist() == exp_next
        assert info["final_info"]["correct"].tolist() == [r == 1.0 for r in exp_rew]
        total_reward += rew.sum()
        if t == 10:  # replaying contexts keeps the two in lock step
            ctx = np.arange(n) % singles[0].observation_space.n
            obs, _ = venv.reset(options={"context": ctx})
            assert obs.tolist() == [
                e.reset(options={"context": c})[0] for e, c in zip(singles, ctx)
            ]
    assert 0 < total_reward < n * steps


@pytest.mark.parametrize("env_id", IDS)
def test_vector_env_equals_sync_vector_env_same_step(env_id):
    n = 3
    kwargs = SMALL[env_id]
    native = gym.make_vec(env_id, num_envs=n, **kwargs)
    sync = gym.make_vec(
        env_id,
        num_envs=n,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
        **kwargs,
    )
    assert data_equivalence(native.reset(seed=4), sync.reset(seed=4), exact=True)
    act_rng = np.random.default_rng(1)
    for _ in range(10):
        actions = act_rng.integers(kwargs["n_actions"], size=n)
        assert data_equivalence(native.step(actions), sync.step(actions), exact=True)


def test_vector_reset_seed_list_and_none():
    venv = MultiContextBanditVectorEnv(num_envs=3, n_contexts=50)
    obs_list, _ = venv.reset(seed=[5, 6, 7])
    obs_int, _ = venv.reset(seed=5)
    assert obs_list.tolist() == obs_int.tolist()
    # seed=None keeps the generators going (same as a single env's reset())
    nxt, _ = venv.reset()
    single = MultiContextBanditEnv(n_contexts=50)
    single.reset(seed=6)
    assert nxt[1] == single.reset()[0]


# --------------------------------------------------------------------------- scoring


def test_score_candidates_single_matches_step_and_changes_no_state():
    env = gym.make(MULTI, n_contexts=8, n_actions=5)
    twin = gym.make(MULTI, n_contexts=8, n_actions=5)
    assert supports_candidate_scoring(env) and isinstance(env.unwrapped, CandidateScoringEnv)
    obs, _ = env.reset(seed=3)
    twin.reset(seed=3)
    for t in range(6):
        rng_before = _rng_state(env.unwrapped.np_random)
        scores = score_candidates(env, np.arange(5))  # goes through the wrappers
        scores_again = env.unwrapped.score_candidates([4, 4, 0])
        assert scores.dtype == np.float64 and scores.shape == (5,)
        assert scores.sum() == 1.0 and np.argmax(scores) == env.unwrapped.correct_action
        assert scores_again.tolist() == [scores[4], scores[4], scores[0]]
        assert env.unwrapped.np_random.bit_generator.state == rng_before
        assert env.unwrapped.context == obs
        a = int(np.argmax(scores)) if t % 2 else (int(np.argmax(scores)) + 1) % 5
        _, r, _, _, _ = env.step(a)
        _, r_twin, _, _, _ = twin.step(a)
        assert r == scores[a] == r_twin
        obs, _ = env.reset()
        assert obs == twin.reset()[0]  # the next reset is unaffected by scoring


@pytest.mark.parametrize("env_id", IDS)
def test_score_candidates_vector_matches_step_and_changes_no_state(env_id):
    n, kwargs = 4, SMALL[env_id]
    venv = gym.make_vec(env_id, num_envs=n, **kwargs)
    twin = gym.make_vec(env_id, num_envs=n, **kwargs)
    assert supports_candidate_scoring(venv)
    obs, _ = venv.reset(seed=9)
    twin.reset(seed=9)
    k_all = np.tile(np.arange(kwargs["n_actions"]), (n, 1))
    for t in range(6):
        states = [_rng_state(g) for g in venv.np_randoms]
        scores = venv.score_candidates(k_all)
        assert scores.shape == (n, kwargs["n_actions"]) and scores.dtype == np.float64
        assert np.array_equal(scores.argmax(axis=1), venv.correct_actions[obs])
        assert (scores.sum(axis=1) == 1.0).all()
        assert [g.bit_generator.state for g in venv.np_randoms] == states
        assert np.array_equal(venv.contexts, obs)
        actions = (np.arange(n) + t) % kwargs["n_actions"]
        obs, rew, _, _, _ = venv.step(actions)
        assert np.array_equal(rew, scores[np.arange(n), actions])
        obs_twin, rew_twin, _, _, _ = twin.step(actions)
        assert np.array_equal(obs, obs_twin) and np.array_equal(rew, rew_twin)


def test_supports_candidate_scoring_false_for_plain_env():
    env = gym.make("CartPole-v1")
    assert not supports_candidate_scoring(env)
    with pytest.raises(TypeError, match="candidate-scoring"):
        score_candidates(env, [0])


def test_check_candidate_actions():
    out = check_candidate_actions([[1, 2], [0, 0]], 3, (2,))
    assert out.dtype == np.int64 and out.tolist() == [[1, 2], [0, 0]]
    assert check_candidate_actions(np.array([2], dtype=np.uint8), 3).dtype == np.int64
    with pytest.raises(ValueError, match=re.escape("(3, 2)")):
        check_candidate_actions(np.zeros((3, 2), dtype=int), 3, (2,))
    with pytest.raises(ValueError, match="K >= 1"):
        check_candidate_actions(np.zeros((2, 0), dtype=int), 3, (2,))
    with pytest.raises(ValueError, match="float64"):
        check_candidate_actions([1.0, 2.0], 3)
    with pytest.raises(ValueError, match="bool"):
        check_candidate_actions([True], 3)
    with pytest.raises(ValueError, match=r"candidate action -1 .*\[0, 2\]"):
        check_candidate_actions([0, -1], 3)
    with pytest.raises(ValueError, match=r"candidate action 3 .*\[0, 2\]"):
        check_candidate_actions([[0], [3]], 3, (2,))


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("bad", [100, -1, 1.5, True, "3", np.array([1, 2])])
def test_invalid_action_raises_with_value(bad):
    env = SymmetricBanditEnv(n_actions=100)
    env.reset(seed=0)
    with pytest.raises(ValueError, match=re.escape(repr(bad)[:6])) as exc:
        env.step(bad)
    assert "[0, 99]" in str(exc.value)
    env.step(5)  # the failed step did not end the episode


def test_wrong_candidate_shape_raises():
    env = SymmetricBanditEnv(n_actions=10)
    env.reset(seed=0)
    with pytest.raises(ValueError, match=re.escape("(2, 3)")):
        env.score_candidates(np.zeros((2, 3), dtype=int))
    with pytest.raises(ValueError, match="candidate action 10"):
        env.score_candidates([1, 10])
    venv = gym.make_vec(MULTI, num_envs=4)
    venv.reset(seed=0)
    with pytest.raises(ValueError, match=re.escape("(3, 2)")):
        venv.score_candidates(np.zeros((3, 2), dtype=int))
    with pytest.raises(ValueError, match=re.escape("(4,)")):
        venv.score_candidates(np.zeros(4, dtype=int))


def test_vector_step_validates_actions():
    venv = gym.make_vec(MULTI, num_envs=3, n_actions=10)
    with pytest.raises(ValueError, match="reset"):
        venv.step(np.zeros(3, dtype=int))
    venv.reset(seed=0)
    with pytest.raises(ValueError, match=re.escape("(2,)")):
        venv.step(np.zeros(2, dtype=int))
    with pytest.raises(ValueError, match=r"invalid action 10 for sub-env 1.*\[0, 9\]"):
        venv.step(np.array([0, 10, 0]))
    with pytest.raises(ValueError, match="float64"):
        venv.step(np.array([0.0, 1.0, 2.0]))


def test_out_of_range_context_raises():
    env = MultiContextBanditEnv(n_contexts=10)
    with pytest.raises(ValueError, match=r"invalid context 10 .*\[0, 9\]"):
        env.reset(options={"context": 10})
    with pytest.raises(ValueError, match=r"invalid context -2"):
        env.reset(options={"context": -2})
    with pytest.raises(ValueError, match=r"invalid context 1.0"):
        env.reset(options={"context": 1.0})
    with pytest.raises(ValueError, match=r"unknown reset option.*'ctx'"):
        env.reset(options={"ctx": 1})
    venv = MultiContextBanditVectorEnv(num_envs=2, n_contexts=10)
    with pytest.raises(ValueError, match=r"invalid context 12 for sub-env 1"):
        venv.reset(options={"context": [3, 12]})
    with pytest.raises(ValueError, match=re.escape("(3,)")):
        venv.reset(options={"context": [1, 2, 3]})
    with pytest.raises(ValueError, match=r"invalid context 1 .*\[0, 0\]"):
        SymmetricBanditEnv().reset(options={"context": 1})


@pytest.mark.parametrize("n_actions", [1, 0, -3, 2.0, True])
def test_too_few_actions_raises(n_actions):
    for make in (
        lambda: SymmetricBanditEnv(n_actions=n_actions),
        lambda: MultiContextBanditEnv(n_actions=n_actions),
        lambda: gym.make_vec(SYM, num_envs=2, n_actions=n_actions),
    ):
        with pytest.raises(
            ValueError, match=rf"n_actions must be an integer >= 2, got {n_actions}"
        ):
            make()


def test_bad_task_arguments_raise():
    with pytest.raises(ValueError, match=r"correct_actions must have shape \(5,\).*\(4,\)"):
        MultiContextBanditEnv(n_contexts=5, correct_actions=[0, 1, 2, 3])
    with pytest.raises(ValueError, match=r"correct_actions\[1\] = 10"):
        MultiContextBanditEnv(n_contexts=2, n_actions=10, correct_actions=[0, 10])
    with pytest.raises(ValueError, match=r"correct_actions\[0\] = 7 .*\[0, 6\]"):
        SymmetricBanditEnv(n_actions=7, correct_action=7)
    with pytest.raises(ValueError, match=r"n_contexts must be an integer >= 1, got 0"):
        MultiContextBanditEnv(n_contexts=0)


def test_step_before_reset_and_after_termination():
    for env in (SymmetricBanditEnv(), MultiContextBanditEnv()):
        with pytest.raises(ValueError, match="reset"):
            env.step(0)
        with pytest.raises(ValueError, match="reset"):
            env.score_candidates([0])
        env.reset(seed=0)
        env.step(0)
        with pytest.raises(BanditResetNeeded, match="terminated.*call reset"):
            env.step(0)
        with pytest.raises(gym.error.ResetNeeded):
            env.score_candidates([0])
        env.reset()
        env.step(0)  # fine again after reset
    venv = MultiContextBanditVectorEnv(num_envs=2)
    with pytest.raises(ValueError, match="reset"):
        venv.score_candidates([[0], [0]])


# --------------------------------------------------------------------------- layering


def test_import_tpo_gym_does_not_import_torch():
    code = "import tpo_gym, tpo_gym.bandits, tpo_gym.candidates, sys; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
