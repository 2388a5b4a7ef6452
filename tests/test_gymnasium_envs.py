"""Envs nobody here wrote: every env Gymnasium ships in classic_control and toy_text (Box2D's
too, with the ``box2d`` extra), by id, for TPO, GRPO and DG with default hyperparameters.

Each builds from its id, trains a few hundred steps, predicts and round-trips through
save/load. An observation space SB3's policies cannot read (Blackjack's ``Tuple``) must be
refused at construction with the wrapper that makes it readable, and train once wrapped.
Budgets are tiny: these tests check that the agents run on envs they were not written for,
not what they learn there (``benchmarks/gym_defaults.py`` measures that).
"""

from __future__ import annotations

import importlib.util

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.wrappers import FlattenObservation

from tpo_agents import DG, GRPO, TPO

AGENTS = [TPO, GRPO, DG]
FAMILIES = ("gymnasium.envs.classic_control", "gymnasium.envs.toy_text", "gymnasium.envs.box2d")
IMAGES = {"CarRacing"}  # pixels at 22 ms a step: the CNN path has its own tests (test_sb3_observations)


def shipped_env_ids() -> list[str]:
    """The newest version of each env Gymnasium registers from ``FAMILIES``, jax ones excluded."""
    newest: dict[str, tuple[int, str]] = {}
    for spec in gym.registry.values():
        entry = spec.entry_point if isinstance(spec.entry_point, str) else ""
        if spec.namespace or spec.version is None or not entry.startswith(FAMILIES) or spec.name in IMAGES:
            continue
        if spec.version >= newest.get(spec.name, (-1, ""))[0]:
            newest[spec.name] = (spec.version, spec.id)
    return sorted(env_id for _, env_id in newest.values())


def needs_box2d(env_id: str):
    entry = gym.spec(env_id).entry_point
    if isinstance(entry, str) and entry.startswith("gymnasium.envs.box2d") and importlib.util.find_spec("Box2D") is None:
        return pytest.mark.skip(reason="needs the box2d extra (pip install -e '.[box2d]')")
    return ()


ENV_IDS = [pytest.param(env_id, marks=needs_box2d(env_id)) for env_id in shipped_env_ids()]


def test_the_list_holds_gymnasiums_classic_control_and_toy_text_envs():
    ids = shipped_env_ids()
    for env_id in ("CartPole-v1", "Acrobot-v1", "MountainCarContinuous-v0", "Pendulum-v1", "Blackjack-v1", "Taxi-v4"):
        assert any(i.split("-v")[0] == env_id.split("-v")[0] for i in ids), (env_id, ids)


@pytest.mark.parametrize("algo", AGENTS, ids=lambda a: a.__name__)
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_defaults_train_predict_and_reload_on_gymnasiums_own_env(algo, env_id, tmp_path):
    env = env_id
    if gym.spec(env_id).max_episode_steps is None:
        # CliffWalking has no time limit: DG's whole-episode returns would take thousands of
        # random steps here (DG's own single-sample design, not what this test checks).
        env = gym.make(env_id, max_episode_steps=100)
    if isinstance(gym.make(env_id).observation_space, gym.spaces.Tuple):
        with pytest.raises(ValueError, match="FlattenObservation"):
            algo("MlpPolicy", env_id)
        env = FlattenObservation(gym.make(env_id))
    model = algo("MlpPolicy", env, batch_size=8, seed=0).learn(200)
    assert model.num_timesteps >= 200
    obs = model.get_env().reset()
    action, _ = model.predict(obs, deterministic=True)
    assert model.action_space.contains(np.asarray(action[0], dtype=model.action_space.dtype))
    model.save(tmp_path / "agent")
    loaded = algo.load(tmp_path / "agent")
    np.testing.assert_array_equal(loaded.predict(obs, deterministic=True)[0], action)
