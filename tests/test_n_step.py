"""The critic's n-step TD targets: which replayed transitions a window sums, where it stops
(a termination, a truncation, the newest transition), and the target it makes."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from tpo_agents import TPO
from tpo_agents.rollout.critic import QCritic
from tpo_agents.rollout.sampled_critic import SampledActionCritic

SPACE = spaces.Box(-10.0, 10.0, (1,), dtype=np.float32)


def _play(critic, steps):
    """Two sub-envs; ``steps``: per vector step ``(rewards, terminated, truncated)``."""
    for t, (rewards, terminated, truncated) in enumerate(steps):
        obs = np.array([[t], [100 + t]], dtype=np.float32)
        ended = np.asarray(terminated) | np.asarray(truncated)
        critic.add(obs, np.zeros(2, dtype=np.int64), np.asarray(rewards, dtype=np.float32), obs + 0.5,
                   np.asarray(terminated), ended)


def test_a_window_follows_its_sub_env_and_stops_at_an_end_or_the_newest_step():
    critic = QCritic(SPACE, 2, n_step=3, gamma=0.5, novelty=0.0)
    _play(critic, [
        ([1.0, 10.0], [False, False], [False, False]),  # rows 0, 1
        ([2.0, 20.0], [False, True], [False, False]),   # rows 2, 3: sub-env 1 terminates
        ([3.0, 30.0], [False, False], [True, False]),   # rows 4, 5: sub-env 0 is truncated
        ([4.0, 40.0], [False, False], [False, False]),  # rows 6, 7: the newest
    ])
    rows, discounts, boot_row, boot_discount = critic.n_step_window(np.arange(8))
    # Sub-env 0 from row 0: rows 0, 2, 4, then its truncation at row 4 would stop it anyway.
    assert rows[:, 0].tolist() == [0, 2, 4] and discounts[:, 0].tolist() == [1.0, 0.5, 0.25]
    assert boot_row[0] == 4 and boot_discount[0] == 0.125
    # Sub-env 1 from row 1: rows 1, 3, where it terminates: no bootstrap.
    assert discounts[:, 1].tolist() == [1.0, 0.5, 0.0] and boot_discount[1] == 0.0
    # Row 2 (sub-env 0): 2, 4, truncated there: bootstrap from row 4's (terminal) observation.
    assert discounts[:, 2].tolist() == [1.0, 0.5, 0.0] and boot_row[2] == 4 and boot_discount[2] == 0.25
    # Row 4 is truncated: one reward, then its own next observation.
    assert discounts[:, 4].tolist() == [1.0, 0.0, 0.0] and boot_row[4] == 4 and boot_discount[4] == 0.5
    # Row 5 (sub-env 1's new episode): 5, 7, then 7 is the newest: bootstrap from it.
    assert discounts[:, 5].tolist() == [1.0, 0.5, 0.0] and boot_row[5] == 7 and boot_discount[5] == 0.25
    # The newest rows bootstrap from their own next observation.
    assert boot_row[6] == 6 and boot_discount[6] == 0.5
    # The target: the discounted rewards plus the discounted bootstrap value.
    next_value = torch.full((critic.n_critics, 8), 8.0)
    window = critic.n_step_window(np.arange(8))
    y = critic._td_target(np.arange(8), next_value, window)[0]
    expected = [1 + 0.5 * 2 + 0.25 * 3 + 0.125 * 8, 10 + 0.5 * 20, 2 + 0.5 * 3 + 0.25 * 8, 20.0, 3 + 0.5 * 8,
                30 + 0.5 * 40 + 0.25 * 8, 4 + 0.5 * 8, 40 + 0.5 * 8]
    torch.testing.assert_close(y, torch.tensor(expected))


def test_an_overwritten_row_starts_a_new_chain():
    critic = QCritic(SPACE, 2, n_step=4, gamma=1.0, novelty=0.0, buffer_size=6)
    _play(critic, [([1.0, 1.0], [False, False], [False, False])] * 4)  # 8 transitions into 6 rows
    # Rows 0, 1 now hold the newest step (the 4th); rows 2, 3 the oldest kept (the 2nd).
    rows, discounts, boot_row, _ = critic.n_step_window(np.array([2, 0]))
    assert rows[:, 0].tolist() == [2, 4, 0, 0] and discounts[:, 0].tolist() == [1.0, 1.0, 1.0, 0.0]
    assert rows[:, 1].tolist() == [0, 0, 0, 0] and boot_row[1] == 0  # the newest: nothing after it


def test_one_step_is_the_td_target_it_always_was():
    critic = QCritic(SPACE, 2, n_step=1, novelty=0.0)
    _play(critic, [([1.0, 2.0], [False, True], [False, False]), ([3.0, 4.0], [False, False], [False, False])])
    assert critic.n_step_window(np.arange(4)) is None
    next_value = torch.ones(critic.n_critics, 4)
    y = critic._td_target(np.arange(4), next_value)[0]
    torch.testing.assert_close(y, torch.tensor([1 + critic.gamma, 2.0, 3 + critic.gamma, 4 + critic.gamma]))
    with pytest.raises(ValueError, match="n_step must be an integer >= 1; got 0"):
        QCritic(SPACE, 2, n_step=0)


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_agents_learn_with_n_step_targets_and_keep_them_when_saved(env_id, tmp_path):
    model = TPO("MlpPolicy", env_id, n_envs=2, batch_size=16, seed=0, critic_kwargs={"n_step": 3, "batch_size": 32})
    model.learn(400)
    critic = model.critic
    assert isinstance(critic, SampledActionCritic if env_id == "Pendulum-v1" else QCritic) and critic.n_step == 3
    rows, discounts, _, _ = critic.n_step_window(np.arange(critic._n))
    # Every link goes n_envs rows ahead within the written replay (one vector step later).
    linked = discounts[1] > 0
    assert linked.any() and ((rows[1] - rows[0])[linked] == 2).all()
    model.save(tmp_path / "m.zip")
    loaded = TPO.load(tmp_path / "m.zip", env=model.get_env())
    assert loaded.critic.n_step == 3
    assert np.array_equal(loaded.critic._data["successor"][: critic._n], critic._data["successor"][: critic._n])
    loaded.learn(100, reset_num_timesteps=False)
