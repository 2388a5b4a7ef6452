"""SB3 conformance: what SB3's own test suite checks of an algorithm, for TPO, GRPO and DG.

Written from the areas of stable-baselines3's tests/ folder (save/load, callbacks, predict,
spaces, logger, vec envs, env checker, seeding), with our agents where it names PPO/A2C.
Budgets are tiny: these tests check the API contract, not learning.
"""

from __future__ import annotations

import json
import os

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from stable_baselines3.common.callbacks import (
    CallbackList,
    CheckpointCallback,
    EvalCallback,
    EveryNTimesteps,
    LogEveryNTimesteps,
    ProgressBarCallback,
    StopTrainingOnMaxEpisodes,
    StopTrainingOnNoModelImprovement,
    StopTrainingOnRewardThreshold,
)
from stable_baselines3.common.env_checker import check_env
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.envs import (
    FakeImageEnv,
    IdentityEnv,
    IdentityEnvBox,
    IdentityEnvMultiBinary,
    IdentityEnvMultiDiscrete,
    SimpleMultiObsEnv,
)
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.logger import configure
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.utils import set_random_seed
from stable_baselines3.common.vec_env import (
    DummyVecEnv,
    SubprocVecEnv,
    VecFrameStack,
    VecMonitor,
    VecNormalize,
    VecTransposeImage,
)

import tpo_gym  # noqa: F401  (registers the ids)
from tpo_agents import DG, GRPO, TPO

AGENTS = [TPO, GRPO, DG]
SMALL = dict(batch_size=4, n_candidates=2, seed=0)


pytestmark = pytest.mark.usefixtures("one_thread")  # one torch thread (conftest), restored after


def cartpole(n_envs: int = 2, **kwargs):
    return make_vec_env("CartPole-v1", n_envs=n_envs, seed=0, **kwargs)


class SuccessEnv(gym.Env):
    """Two actions; an episode of three steps succeeds when the last action is 1."""

    observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        done = self.t >= 3
        info = {"is_success": bool(action == 1)} if done else {}
        return np.full(2, self.t / 3, np.float32), float(action), done, False, info


# ------------------------------------------------------------------ save / load
SPACE_ENVS = {
    "discrete": lambda: IdentityEnv(4),
    "box": lambda: IdentityEnvBox(eps=0.5),
    "multidiscrete": lambda: IdentityEnvMultiDiscrete(2),
    "multibinary": lambda: IdentityEnvMultiBinary(2),
    "dict-obs": lambda: SimpleMultiObsEnv(random_start=False),
    "image-obs": lambda: FakeImageEnv(screen_height=36, screen_width=36, n_channels=1, discrete=True),
}
POLICY_OF = {"dict-obs": "MultiInputPolicy", "image-obs": "CnnPolicy"}


def _obs_batch(env, n: int = 3):
    obs = [env.observation_space.sample() for _ in range(n)]
    if isinstance(env.observation_space, spaces.Dict):
        return {k: np.stack([o[k] for o in obs]) for k in env.observation_space.spaces}
    return np.stack(obs)


@pytest.mark.parametrize("algo", AGENTS)
@pytest.mark.parametrize("space", sorted(SPACE_ENVS))
def test_save_load_every_space_exact_predict(tmp_path, algo, space):
    env = SPACE_ENVS[space]()
    env.observation_space.seed(0)
    model = algo(POLICY_OF.get(space, "MlpPolicy"), env, **SMALL)
    model.learn(32)
    obs = _obs_batch(env)
    before, _ = model.predict(obs, deterministic=True)
    assert before.shape[0] == 3
    params = model.get_parameters()
    model.save(tmp_path / "model")

    for with_env in (True, False):
        loaded = algo.load(tmp_path / "model", env=SPACE_ENVS[space]() if with_env else None)
        after, _ = loaded.predict(obs, deterministic=True)
        np.testing.assert_array_equal(before, after)
        assert (loaded.get_env() is not None) == with_env
    # get/set_parameters round trip: a fresh model takes the trained weights exactly.
    fresh = algo(POLICY_OF.get(space, "MlpPolicy"), SPACE_ENVS[space](), **{**SMALL, "seed": 1})
    fresh.set_parameters(params, exact_match=True)
    np.testing.assert_array_equal(fresh.predict(obs, deterministic=True)[0], before)
    # A loaded model continues training.
    loaded = algo.load(tmp_path / "model", env=SPACE_ENVS[space]())
    loaded.learn(16, reset_num_timesteps=False)
    assert loaded.num_timesteps > model.num_timesteps


@pytest.mark.parametrize("algo", AGENTS)
def test_load_onto_a_device_and_set_parameters_refuses_a_wrong_key(tmp_path, algo):
    model = algo("MlpPolicy", cartpole(), **SMALL)
    model.save(tmp_path / "m.zip")
    loaded = algo.load(tmp_path / "m.zip", device="cpu")
    assert loaded.device.type == "cpu"
    params = model.get_parameters()
    params["policy"]["no.such.weight"] = torch.zeros(1)
    with pytest.raises(RuntimeError, match="no.such.weight"):  # torch's load_state_dict, as in SB3
        model.set_parameters(params, exact_match=True)


# -------------------------------------------------------------------- callbacks
@pytest.mark.parametrize("algo", AGENTS)
def test_every_sb3_callback_runs(tmp_path, algo):
    eval_env = cartpole(1)
    callbacks = CallbackList([
        CheckpointCallback(save_freq=50, save_path=str(tmp_path / "ckpt"), name_prefix="m"),
        EvalCallback(
            eval_env,
            n_eval_episodes=2,
            eval_freq=50,
            log_path=str(tmp_path / "eval"),
            best_model_save_path=str(tmp_path / "best"),
            callback_on_new_best=StopTrainingOnRewardThreshold(reward_threshold=1e9),
            callback_after_eval=StopTrainingOnNoModelImprovement(max_no_improvement_evals=100),
            warn=False,
        ),
        EveryNTimesteps(n_steps=40, callback=CheckpointCallback(save_freq=1, save_path=str(tmp_path / "every"))),
        LogEveryNTimesteps(n_steps=50),
        StopTrainingOnMaxEpisodes(max_episodes=1000),
        ProgressBarCallback(),
    ])
    model = algo("MlpPolicy", cartpole(), **SMALL)
    model.learn(200, callback=callbacks)
    assert callbacks.callbacks[0].n_calls > 0
    assert os.listdir(tmp_path / "ckpt") and os.listdir(tmp_path / "every")
    assert (tmp_path / "eval" / "evaluations.npz").exists()
    assert (tmp_path / "best" / "best_model.zip").exists()


@pytest.mark.parametrize("algo", AGENTS)
def test_n_calls_counts_every_env_step_call(algo):
    from stable_baselines3.common.callbacks import BaseCallback

    class Count(BaseCallback):
        def _on_step(self) -> bool:
            return True

    count = Count()
    model = algo("MlpPolicy", cartpole(), **SMALL)
    model.learn(100, callback=count)
    # SB3: one _on_step per vec-env step, each advancing num_timesteps by n_envs.
    assert count.n_calls * model.n_envs == model.num_timesteps


@pytest.mark.parametrize("algo", AGENTS)
def test_stop_training_on_no_model_improvement_stops(algo):
    stop = StopTrainingOnNoModelImprovement(max_no_improvement_evals=1, min_evals=1)
    evals = EvalCallback(cartpole(1), eval_freq=20, n_eval_episodes=1, callback_after_eval=stop, warn=False)
    model = algo("MlpPolicy", cartpole(), **SMALL)
    model.learn(100_000, callback=evals)
    assert model.num_timesteps < 100_000


@pytest.mark.parametrize("algo", AGENTS)
def test_eval_callback_syncs_vec_normalize(algo):
    train = VecNormalize(cartpole(), norm_reward=False)
    evaluate = VecNormalize(cartpole(1), norm_reward=False, training=False)
    from stable_baselines3.common.callbacks import BaseCallback

    seen = []

    class AtEval(BaseCallback):  # runs right after each evaluation
        def _on_step(self) -> bool:
            seen.append((evaluate.obs_rms.mean.copy(), model.get_vec_normalize_env().obs_rms.mean.copy()))
            return True

    model = algo("MlpPolicy", train, **SMALL)
    assert model.get_vec_normalize_env() is train
    model.learn(120, callback=EvalCallback(evaluate, eval_freq=40, n_eval_episodes=1, callback_after_eval=AtEval(), warn=False))
    assert seen
    for at_eval, at_train in seen:  # the eval env got the training statistics
        np.testing.assert_array_equal(at_eval, at_train)
    assert not np.array_equal(seen[-1][1], np.zeros_like(seen[-1][1]))


# ---------------------------------------------------------------------- predict
@pytest.mark.parametrize("algo", AGENTS)
def test_predict_single_vectorized_state_and_episode_start(algo):
    env = gym.make("CartPole-v1")
    model = algo("MlpPolicy", env, **SMALL)
    obs, _ = env.reset(seed=0)
    action, state = model.predict(obs, deterministic=True)
    assert env.action_space.contains(int(action)) and state is None
    batch = np.stack([obs, obs, obs])
    actions, _ = model.predict(batch, state=None, episode_start=np.ones(3, bool), deterministic=True)
    assert actions.shape == (3,) and len(set(actions.tolist())) == 1
    with pytest.raises(ValueError):
        model.predict(np.zeros(7, np.float32))  # wrong observation shape
    stochastic = {int(model.predict(obs, deterministic=False)[0]) for _ in range(50)}
    assert stochastic <= {0, 1}


@pytest.mark.parametrize("algo", AGENTS)
def test_predict_dict_observations(algo):
    env = SimpleMultiObsEnv(random_start=False)
    model = algo("MultiInputPolicy", env, **SMALL)
    obs, _ = env.reset(seed=0)
    action, _ = model.predict(obs, deterministic=True)
    assert env.action_space.contains(int(action))
    actions, _ = model.predict(_obs_batch(env), deterministic=True)
    assert actions.shape == (3,)


# ----------------------------------------------------------------------- spaces
OBS_SPACES = {
    "box": spaces.Box(-1.0, 1.0, (3,), np.float32),
    "discrete": spaces.Discrete(4),
    "multidiscrete": spaces.MultiDiscrete([2, 3]),
    "multibinary": spaces.MultiBinary(3),
    "dict": spaces.Dict({"a": spaces.Box(-1.0, 1.0, (2,), np.float32), "b": spaces.Discrete(3)}),
}


class SpaceEnv(gym.Env):
    """Random observations of a given space, reward 1 for action 0, episodes of 5 steps."""

    def __init__(self, observation_space, action_space=None):
        self.observation_space = observation_space
        self.action_space = spaces.Discrete(2) if action_space is None else action_space

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.observation_space.seed(seed)
        self.t = 0
        return self.observation_space.sample(), {}

    def step(self, action):
        self.t += 1
        reward = float(np.all(np.asarray(action) == 0))
        return self.observation_space.sample(), reward, self.t >= 5, False, {}


@pytest.mark.parametrize("algo", AGENTS)
@pytest.mark.parametrize("name", sorted(OBS_SPACES))
def test_every_observation_space(algo, name):
    env = SpaceEnv(OBS_SPACES[name])
    check_env(env, warn=False)
    model = algo("MultiInputPolicy" if name == "dict" else "MlpPolicy", env, **SMALL)
    model.learn(40)
    obs, _ = env.reset(seed=1)
    assert env.action_space.contains(int(model.predict(obs, deterministic=True)[0]))


ACTION_SPACES = {
    "discrete": spaces.Discrete(3),
    "box": spaces.Box(-1.0, 1.0, (2,), np.float32),
    "multidiscrete": spaces.MultiDiscrete([2, 3]),
    "multibinary": spaces.MultiBinary(3),
}


@pytest.mark.parametrize("algo", AGENTS)
@pytest.mark.parametrize("name", sorted(ACTION_SPACES))
def test_every_action_space(algo, name):
    space = ACTION_SPACES[name]
    env = SpaceEnv(spaces.Box(-1.0, 1.0, (3,), np.float32), space)
    model = algo("MlpPolicy", env, **SMALL)
    model.learn(40)
    obs, _ = env.reset(seed=1)
    action, _ = model.predict(obs, deterministic=True)
    assert space.contains(np.asarray(action, dtype=space.dtype).reshape(space.shape))


@pytest.mark.parametrize("algo", AGENTS)
def test_one_action_space_trains_without_a_step(algo):
    env = SpaceEnv(spaces.Box(-1.0, 1.0, (3,), np.float32), spaces.Discrete(1))
    model = algo("MlpPolicy", env, **SMALL)
    before = [p.detach().clone() for p in model.policy.parameters()]
    model.learn(40)
    assert int(model.predict(env.reset(seed=0)[0])[0]) == 0
    if algo is TPO:  # one candidate: q = p, the update is exactly zero
        assert all(torch.equal(a, b) for a, b in zip(before, model.policy.parameters()))


# ----------------------------------------------------------------------- logger
@pytest.mark.parametrize("algo", AGENTS)
def test_logger_keys_and_every_output_format(tmp_path, algo):
    model = algo("MlpPolicy", Monitor(SuccessEnv()), **SMALL)
    model.set_logger(configure(str(tmp_path), ["csv", "json", "tensorboard", "log"]))
    model.learn(60)
    rows = [json.loads(line) for line in (tmp_path / "progress.json").read_text().splitlines()]
    keys = set().union(*rows)
    assert {"time/fps", "time/total_timesteps", "time/iterations", "rollout/ep_rew_mean",
            "rollout/ep_len_mean", "rollout/success_rate", "train/loss", "train/n_updates"} <= keys
    header = (tmp_path / "progress.csv").read_text().splitlines()[0].split(",")
    assert {"time/fps", "rollout/success_rate", "train/loss"} <= set(header)
    assert any(name.startswith("events.out.tfevents") for name in os.listdir(tmp_path))
    text = (tmp_path / "log.txt").read_text()  # the human format: sections, then keys
    assert "time/" in text and "fps" in text and "rollout/" in text
    rates = [row["rollout/success_rate"] for row in rows if "rollout/success_rate" in row]
    assert rates and all(0.0 <= r <= 1.0 for r in rates)


# --------------------------------------------------------------------- vec envs
VEC_ENVS = {
    "dummy": lambda: cartpole(2, vec_env_cls=DummyVecEnv),
    "subproc": lambda: cartpole(2, vec_env_cls=SubprocVecEnv),
    "vecnormalize": lambda: VecNormalize(cartpole(2)),
    "framestack": lambda: VecFrameStack(cartpole(2), n_stack=2),
    "vecmonitor": lambda: VecMonitor(DummyVecEnv([lambda: gym.make("CartPole-v1")] * 2)),
}


@pytest.mark.parametrize("algo", AGENTS)
@pytest.mark.parametrize("name", sorted(VEC_ENVS))
def test_every_vec_env_wrapper_trains(algo, name):
    vec = VEC_ENVS[name]()
    try:
        model = algo("MlpPolicy", vec, **SMALL)
        model.learn(60)
        assert model.num_timesteps >= 60
        obs = vec.reset()
        actions, _ = model.predict(obs, deterministic=True)
        assert actions.shape == (vec.num_envs,)
        vec.step(actions)  # the user's env still works afterwards
    finally:
        vec.close()


@pytest.mark.parametrize("algo", AGENTS)
def test_channel_last_images_are_transposed(algo):
    env = FakeImageEnv(screen_height=36, screen_width=36, n_channels=3, discrete=True, channel_first=False)
    model = algo("CnnPolicy", env, **SMALL)
    assert isinstance(model.get_env(), VecTransposeImage)
    model.learn(16)
    assert model.observation_space.shape == (3, 36, 36)


# ---------------------------------------------------------------------- seeding
@pytest.mark.parametrize("algo", AGENTS)
def test_same_seed_same_run_and_set_random_seed(algo):
    def run():
        set_random_seed(3)
        model = algo("MlpPolicy", cartpole(), batch_size=4, n_candidates=2, seed=3)
        model.learn(80)
        return torch.cat([p.detach().flatten() for p in model.policy.parameters()])

    assert torch.equal(run(), run())
    other = algo("MlpPolicy", cartpole(), batch_size=4, n_candidates=2, seed=4)
    other.learn(80)
    assert not torch.equal(run(), torch.cat([p.detach().flatten() for p in other.policy.parameters()]))


@pytest.mark.parametrize("algo", AGENTS)
def test_evaluate_policy_on_a_trained_model(algo):
    model = algo("MlpPolicy", cartpole(), **SMALL)
    model.learn(40)
    mean, std = evaluate_policy(model, cartpole(1), n_eval_episodes=2, warn=False)
    assert mean > 0 and std >= 0
