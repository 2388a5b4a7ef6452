"""Dict and image observations (issue 29, items 4-5): ``MultiInputPolicy`` and ``CnnPolicy``
as in SB3, for every agent, through every rollout that stores observations (the critic's
replay included), with SB3's ``VecTransposeImage`` around channel-last image envs."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from stable_baselines3.common.envs import FakeImageEnv, SimpleMultiObsEnv
from stable_baselines3.common.torch_layers import CombinedExtractor, FlattenExtractor, NatureCNN
from stable_baselines3.common.vec_env import VecTransposeImage, is_vecenv_wrapped

from tpo_agents import DG, GRPO, PG, TPO
from tpo_agents.policies import CnnPolicy, GaussianMlpPolicy, MlpPolicy, MultiInputPolicy

ALGOS = [TPO, GRPO, DG, PG]
SMALL = dict(batch_size=8, n_candidates=4, seed=0)
CRITIC = dict(critic_kwargs=dict(batch_size=16, net_arch=(16,)))  # the critic trains within a tiny budget


class CueBandit(gym.Env):
    """One-step bandit with a ``Dict`` observation: reward 1 for the action named by the
    ``Discrete`` key ``cue``; the ``Box`` key is noise. A policy blind to ``cue`` gets 1/3."""

    def __init__(self):
        self.observation_space = spaces.Dict(
            {"cue": spaces.Discrete(3), "noise": spaces.Box(-1.0, 1.0, (2,), np.float32)}
        )
        self.action_space = spaces.Discrete(3)
        self._cue = 0

    def _obs(self):
        self._cue = int(self.np_random.integers(3))
        return {"cue": self._cue, "noise": self.np_random.uniform(-1, 1, 2).astype(np.float32)}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._obs(), {}

    def step(self, action):
        reward = float(int(action) == self._cue)
        return self._obs(), reward, True, False, {}


def image_env(channel_last: bool = True, discrete: bool = True) -> FakeImageEnv:
    env = FakeImageEnv(screen_height=36, screen_width=36, n_channels=3, discrete=discrete, channel_first=not channel_last)
    env.observation_space.seed(0)  # its frames are samples of the space: the same run twice
    return env


def dict_batch(n: int = 5) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"cue": rng.integers(0, 3, n), "noise": rng.uniform(-1, 1, (n, 2)).astype(np.float32)}


def critic_kwargs(algo) -> dict:
    return CRITIC if algo in (TPO, GRPO) else {}


def check_predict_save_load(model, single, batch, tmp_path, algo, n_batch: int):
    """Single and batched deterministic predictions, then the same after a save/load."""
    action, _ = model.predict(single, deterministic=True)
    assert np.shape(action) == model.action_space.shape
    actions, _ = model.predict(batch, deterministic=True)
    assert actions.shape == (n_batch, *model.action_space.shape)
    assert all(model.action_space.contains(a) for a in actions)
    model.save(tmp_path / "model")
    loaded = algo.load(tmp_path / "model")
    assert type(loaded.policy) is type(model.policy)
    for (name, a), (_, b) in zip(model.policy.state_dict().items(), loaded.policy.state_dict().items()):
        assert torch.equal(a, b), name
    again, _ = loaded.predict(batch, deterministic=True)
    np.testing.assert_array_equal(actions, again)
    np.testing.assert_array_equal(action, loaded.predict(single, deterministic=True)[0])
    return loaded


@pytest.mark.parametrize("algo", ALGOS, ids=lambda a: a.__name__)
def test_multi_input_policy_trains_predicts_saves_and_loads_on_dict_observations(tmp_path, algo):
    env = CueBandit()
    model = algo("MultiInputPolicy", env, **SMALL, **critic_kwargs(algo))
    assert type(model.policy) is MultiInputPolicy
    assert isinstance(model.policy.features_extractor, CombinedExtractor)
    start = [p.detach().clone() for p in model.policy.parameters()]
    model.learn(64)
    assert model.num_timesteps >= 64
    assert any(not torch.equal(a, p) for a, p in zip(start, model.policy.parameters()))  # it trained
    batch = model.last_batch
    assert isinstance(batch.states, dict) and set(batch.states) == {"cue", "noise"}
    if algo in (TPO, GRPO):  # critic groups: the learned critic reads the dict too
        assert model.resolve_group_mode() == "critic"
        assert isinstance(model.critic.features_extractor, CombinedExtractor)
        assert model.critic.n_seen >= 64 and model.critic.scores(dict_batch(4)).shape == (4, 3)
    single, _ = env.reset(seed=1)
    check_predict_save_load(model, single, dict_batch(), tmp_path, algo, 5)


@pytest.mark.parametrize("algo", ALGOS, ids=lambda a: a.__name__)
@pytest.mark.parametrize("channel_last", [True, False], ids=["channel_last", "channel_first"])
def test_cnn_policy_trains_predicts_saves_and_loads_on_images(tmp_path, algo, channel_last):
    env = image_env(channel_last)
    model = algo("CnnPolicy", env, **SMALL, **critic_kwargs(algo))
    assert type(model.policy) is CnnPolicy
    assert isinstance(model.policy.features_extractor, NatureCNN)
    assert model.policy.net_arch == []  # SB3's default after NatureCNN
    # Channel-last images are transposed as SB3's _wrap_env does; channel-first ones are not.
    assert is_vecenv_wrapped(model.get_env(), VecTransposeImage) == channel_last
    assert model.observation_space.shape == (3, 36, 36)
    model.learn(40)
    assert model.last_batch.states.shape[1:] == (3, 36, 36)
    if algo in (TPO, GRPO):
        assert isinstance(model.critic.features_extractor, NatureCNN)
    single, _ = env.reset(seed=1)  # as the env gives it: channel-last when it is
    batch = np.stack([env.observation_space.sample() for _ in range(3)])
    loaded = check_predict_save_load(model, single, batch, tmp_path, algo, 3)
    loaded.set_env(image_env(channel_last))
    assert is_vecenv_wrapped(loaded.get_env(), VecTransposeImage) == channel_last


@pytest.mark.parametrize("algo", [TPO, DG], ids=lambda a: a.__name__)
def test_multi_input_policy_reads_image_keys_with_a_cnn(tmp_path, algo):
    env = SimpleMultiObsEnv(random_start=True)  # {"vec": Box(5), "img": channel-last 64x64x1}
    model = algo("MultiInputPolicy", env, **SMALL, **critic_kwargs(algo))
    assert is_vecenv_wrapped(model.get_env(), VecTransposeImage)
    assert model.observation_space["img"].shape == (1, 64, 64)
    assert isinstance(model.policy.features_extractor.extractors["img"], NatureCNN)
    model.learn(32)
    if algo is TPO:
        assert isinstance(model.critic.features_extractor.extractors["img"], NatureCNN)
    single, _ = env.reset(seed=0)
    batch = {k: np.stack([v] * 3) for k, v in single.items()}
    check_predict_save_load(model, single, batch, tmp_path, algo, 3)


@pytest.mark.parametrize("mode", ["sequence", "branch", "all_actions"])
@pytest.mark.parametrize("obs", ["dict", "image"])
def test_every_group_mode_takes_dict_and_channel_last_image_observations(mode, obs):
    # sequence groups reset sub-envs one at a time (their raw images are transposed like the
    # vector env's); branch groups play copies of the sub-envs under VecTransposeImage.
    env, policy = (CueBandit(), "MultiInputPolicy") if obs == "dict" else (image_env(), "CnnPolicy")
    model = TPO(policy, env, group_mode=mode, batch_size=4, n_candidates=2, seed=0, branch_kwargs={"horizon": 2})
    model.learn(24)
    states = model.last_batch.states
    if obs == "image":
        assert states.shape[1:] == (3, 36, 36)
    else:
        assert states["noise"].shape[1:] == (2,)


def test_box_actions_on_images_use_the_gaussian_policy_with_a_cnn(tmp_path):
    env = image_env(discrete=False)  # Box(5) actions: branch groups
    model = TPO("CnnPolicy", env, batch_size=4, n_candidates=2, seed=0, branch_kwargs={"horizon": 2})
    assert type(model.policy) is GaussianMlpPolicy
    assert isinstance(model.policy.features_extractor, NatureCNN) and model.policy.net_arch == []
    model.learn(16)
    single, _ = env.reset(seed=0)
    check_predict_save_load(model, single, np.stack([single] * 2), tmp_path, TPO, 2)


def test_policy_kwargs_take_sb3s_common_keys(tmp_path):
    class TinyCNN(NatureCNN):
        pass

    model = TPO(
        "CnnPolicy",
        image_env(),
        **SMALL,
        policy_kwargs=dict(
            net_arch=dict(pi=[16], vf=[8]),  # SB3's actor-critic form: the pi sizes
            activation_fn=torch.nn.ReLU,
            features_extractor_class=TinyCNN,
            features_extractor_kwargs=dict(features_dim=32),
            normalize_images=False,
            optimizer_class=torch.optim.SGD,
            optimizer_kwargs=dict(momentum=0.5),
        ),
    )
    policy = model.policy
    assert isinstance(policy.features_extractor, TinyCNN) and policy.features_extractor.features_dim == 32
    assert policy.net_arch == [16] and isinstance(policy.action_net[1], torch.nn.ReLU)
    assert policy.normalize_images is False
    assert isinstance(policy.optimizer, torch.optim.SGD) and policy.optimizer.param_groups[0]["momentum"] == 0.5
    model.save(tmp_path / "m")
    loaded = TPO.load(tmp_path / "m")
    assert isinstance(loaded.policy.features_extractor, TinyCNN) and loaded.policy.net_arch == [16]
    # MultiInputPolicy: CombinedExtractor's options; MlpPolicy: an explicit extractor.
    multi = TPO("MultiInputPolicy", SimpleMultiObsEnv(), **SMALL, policy_kwargs=dict(features_extractor_kwargs=dict(cnn_output_dim=16)))
    assert multi.policy.features_extractor.features_dim == 16 + 5 and multi.policy.net_arch == [64, 64]
    # (the "MlpPolicy" alias on a Dict space is refused, as in SB3; the class is taken)
    mlp = TPO(MlpPolicy, CueBandit(), **SMALL, policy_kwargs=dict(features_extractor_class=CombinedExtractor))
    assert type(mlp.policy) is MlpPolicy and isinstance(mlp.policy.features_extractor, CombinedExtractor)
    mlp.learn(16)
    assert isinstance(TPO("MlpPolicy", "CartPole-v1", **SMALL).policy.features_extractor, FlattenExtractor)


def test_mlp_policy_on_dict_observations_points_to_multi_input_policy():
    with pytest.raises(ValueError, match="MultiInputPolicy"):
        TPO("MlpPolicy", CueBandit(), **SMALL)


def test_tpo_learns_the_action_a_dict_key_names():
    # A policy (or critic) that ignored the observation could not beat 1/3.
    model = TPO("MultiInputPolicy", CueBandit(), batch_size=32, seed=0, critic_kwargs=dict(batch_size=64))
    model.learn(800)
    env = CueBandit()
    obs, _ = env.reset(seed=123)
    total = 0.0
    for _ in range(200):
        action, _ = model.predict(obs, deterministic=True)
        obs, reward, *_ = env.step(action)
        total += reward
    assert total / 200 > 0.9


def test_an_image_run_resumes_bitwise_through_vec_transpose_image(tmp_path):
    # The DummyVecEnv under VecTransposeImage is snapshotted into the checkpoint.
    kwargs = dict(**SMALL, **CRITIC)
    straight = TPO("CnnPolicy", image_env(), **kwargs).learn(48)
    first = TPO("CnnPolicy", image_env(), **kwargs).learn(24)
    first.save(tmp_path / "ckpt")
    resumed = TPO.load(tmp_path / "ckpt", env=image_env(), force_reset=False)
    resumed.learn(24, reset_num_timesteps=False)
    for a, b in zip(straight.policy.parameters(), resumed.policy.parameters()):
        assert torch.equal(a, b)
    for a, b in zip(straight.critic.features_extractor.parameters(), resumed.critic.features_extractor.parameters()):
        assert torch.equal(a, b)


class TupleCueEnv(gym.Env):
    """One step, a ``Tuple`` observation (as Blackjack's); reward 1 for the cued action."""

    observation_space = spaces.Tuple((spaces.Discrete(3), spaces.Discrete(2)))
    action_space = spaces.Discrete(3)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._cue = int(self.np_random.integers(3))
        return (self._cue, 0), {}

    def step(self, action):
        return (self._cue, 1), float(action == self._cue), True, False, {}


@pytest.mark.parametrize("algo", ALGOS)
def test_an_unsupported_observation_space_is_refused_at_construction_with_a_way_out(algo):
    # SB3's PPO refuses a Tuple observation when it builds its buffer; ours would have failed
    # inside learn(). The error names the space and the wrapper that makes it readable.
    with pytest.raises(ValueError, match=r"Tuple\(Discrete\(3\), Discrete\(2\)\).*FlattenObservation"):
        algo("MlpPolicy", TupleCueEnv(), **SMALL)
    with pytest.raises(ValueError, match="not supported"):
        algo("MultiInputPolicy", gym.make("Blackjack-v1"), **SMALL)
    flat = algo("MlpPolicy", gym.wrappers.FlattenObservation(TupleCueEnv()), **SMALL)
    flat.learn(64)
    assert flat.num_timesteps >= 64
