"""The critic's novelty bonus (random network distillation): its statistics, its scale, what
it adds to the TD target, and that it travels with a saved agent."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from gymnasium import spaces

from tpo_agents import TPO, MlpPolicy
from tpo_agents.policies import GaussianMlpPolicy
from tpo_agents.rollout.critic import DEFAULT_N_STEP, NOVELTY_ROWS_PER_STEP, QCritic
from tpo_agents.rollout.novelty import RandomNetworkNovelty
from tpo_agents.rollout.sampled_critic import SampledActionCritic


def test_running_statistics_are_those_of_every_observation_seen():
    rng = np.random.default_rng(0)
    batches = [rng.normal(loc=[3.0, -0.02], scale=[2.0, 0.01], size=(n, 2)).astype(np.float32) for n in (5, 64, 1, 30)]
    model = RandomNetworkNovelty(2, seed=0)
    for b in batches:
        model.observe(torch.as_tensor(b))
    every = np.concatenate(batches)
    assert model.count == len(every)
    np.testing.assert_allclose(model.mean.numpy(), every.mean(0), rtol=1e-5)
    np.testing.assert_allclose((model.m2 / model.count).numpy(), every.var(0), rtol=1e-4)


def test_the_predictors_foreach_adam_takes_the_default_loops_steps_bitwise():
    rng = np.random.default_rng(0)
    batches = [torch.as_tensor(rng.normal(size=(256, 2)), dtype=torch.float32) for _ in range(50)]
    fast, loop = RandomNetworkNovelty(2, seed=0), RandomNetworkNovelty(2, seed=0)
    assert fast.optimizer.defaults["foreach"] is True
    loop.optimizer = torch.optim.Adam(loop.predictor.parameters(), lr=1e-3, foreach=False)
    for model in (fast, loop):
        model.observe(torch.cat(batches))
        for b in batches:
            model.train(b)
    for a, b in zip(fast.predictor.parameters(), loop.predictor.parameters(), strict=True):
        assert torch.equal(a, b)


def test_what_the_predictor_trained_on_is_less_novel_than_what_it_never_saw():
    rng = np.random.default_rng(0)
    seen = torch.as_tensor(rng.normal(0.0, 0.1, (256, 2)), dtype=torch.float32)
    unseen = seen + torch.tensor([1.5, -1.5])  # 15 standard deviations away in each input
    model = RandomNetworkNovelty(2, seed=0)
    model.observe(torch.cat([seen, unseen]))  # the standardisation knows both; the predictor one
    first = model.bonus(seen)
    assert float(first.pow(2).mean()) == pytest.approx(1.0, rel=1e-5)  # the first batch sets the scale
    losses = [model.train(seen) for _ in range(300)]
    assert losses[-1] < 0.1 * losses[0]
    assert model.bonus(unseen).mean() > 10 * model.bonus(seen).mean()


def test_the_networks_come_from_the_seed_and_leave_the_global_generator_alone():
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    a, b = RandomNetworkNovelty(3, seed=7), RandomNetworkNovelty(3, seed=7)
    assert torch.equal(torch.random.get_rng_state(), before)
    x = torch.randn(4, 3)
    assert torch.equal(a.fixed(x), b.fixed(x)) and torch.equal(a.predictor(x), b.predictor(x))
    assert not torch.equal(a.fixed(x), RandomNetworkNovelty(3, seed=8).fixed(x))


def _fed_critic(cls, novelty, n=64, novelty_stop="never", **kwargs):
    # The random rewards below are a signal at once: these critics keep the bonus on.
    kwargs["novelty_stop"] = novelty_stop
    obs_space = spaces.Box(-1.0, 1.0, (3,), dtype=np.float32)
    rng = np.random.default_rng(0)
    if cls is QCritic:
        critic, actions = QCritic(obs_space, 3, novelty=novelty, batch_size=32, seed=0, **kwargs), rng.integers(0, 3, n)
    else:
        act_space = spaces.Box(-1.0, 1.0, (2,), dtype=np.float32)
        critic = SampledActionCritic(obs_space, act_space, novelty=novelty, batch_size=32, seed=0, **kwargs)
        actions = rng.uniform(-1, 1, (n, 2)).astype(np.float32)
    obs, nxt = (rng.uniform(-1, 1, (n, 3)).astype(np.float32) for _ in range(2))
    critic.add(obs, actions, rng.normal(size=n).astype(np.float32), nxt, rng.random(n) < 0.2)
    return critic


@pytest.mark.parametrize("cls", [QCritic, SampledActionCritic])
def test_the_td_target_adds_the_weighted_novelty_of_the_next_state(cls):
    critic = _fed_critic(cls, novelty=0.5)
    i = np.arange(32)
    bonus = torch.linspace(0.0, 3.0, 32)
    critic.novelty_model.bonus = lambda x: bonus  # what the target does with it, not its value
    next_value = torch.randn(critic.n_critics, 32)
    r = torch.as_tensor(critic._data["rewards"][i])
    done = torch.as_tensor(critic._data["terminated"][i])
    expected = r + 0.5 * bonus + critic.gamma * (1 - done) * next_value
    torch.testing.assert_close(critic._td_target(i, next_value), expected)
    # Without the option there is no model and the target is the env's alone.
    plain = _fed_critic(cls, novelty=0.0)
    assert plain.novelty_model is None
    torch.testing.assert_close(plain._td_target(i, next_value), r + plain.gamma * (1 - done) * next_value)


def test_an_update_trains_the_predictor_on_its_drawn_rows_a_thousand_and_twenty_four_at_a_time():
    critic = _fed_critic(QCritic, novelty=1.0, n=1500, updates_per_step=1.0)  # 1500 steps of 32 rows
    before = [p.detach().clone() for p in critic.novelty_model.predictor.parameters()]
    trained = []
    train = critic.novelty_model.train
    critic.novelty_model.train = lambda x: trained.append(len(x)) or train(x)
    critic.update(MlpPolicy(critic.observation_space, spaces.Discrete(3), lambda _: 1e-3))
    assert trained == [NOVELTY_ROWS_PER_STEP] * 46 + [1500 * 32 - 46 * NOVELTY_ROWS_PER_STEP]
    after = list(critic.novelty_model.predictor.parameters())
    assert all(not torch.equal(a, b) for a, b in zip(after, before))
    assert critic.novelty_model.count == 1500


@pytest.mark.parametrize("cls", [QCritic, SampledActionCritic])
@pytest.mark.parametrize("n_step", [1, 3])
def test_an_updates_td_targets_add_the_bonus_scored_before_its_predictor_steps(cls, n_step):
    critic = _fed_critic(cls, novelty=0.5, n=200, updates_per_step=0.5, n_step=n_step)
    scored = []  # one scoring per update, of each needed row once; the bonus of x is x's first input
    critic.novelty_model.bonus = lambda x, batches=1: scored.append((len(x), batches)) or x[:, 0] + 10.0
    trained = []
    critic.novelty_model.train = lambda x: trained.append(scored[:]) or 0.0
    seen = []
    novelty_of = critic._novelty_of
    critic._novelty_of = lambda rows: seen.append((np.array(rows), novelty_of(rows))) or seen[-1][1]
    policy = critic_policy(cls, critic)
    critic.update(policy)
    assert len(scored) == 1 and trained and all(t == scored for t in trained)
    needed = np.unique(np.concatenate([rows for rows, _ in seen]))
    assert scored == [(len(needed), 100)] and len(seen) == 100  # the 100 steps count 100 batches
    for rows, bonus in seen:
        torch.testing.assert_close(bonus, torch.as_tensor(critic._data["next_obs"][rows, 0]) + 10.0)
    assert critic._novelty_table is None  # outside an update the bonus is scored when asked


def critic_policy(cls, critic):
    """A fresh policy for ``critic``'s observation space and its kind of actions."""
    if cls is QCritic:
        return MlpPolicy(critic.observation_space, spaces.Discrete(3), lambda _: 1e-3)
    return GaussianMlpPolicy(critic.observation_space, spaces.Box(-1.0, 1.0, (2,), dtype=np.float32), lambda _: 1e-3)


def test_bad_novelty_settings_are_refused_naming_the_value():
    obs_space = spaces.Box(-1.0, 1.0, (3,), dtype=np.float32)
    with pytest.raises(ValueError, match="novelty"):
        QCritic(obs_space, 3, novelty=-1.0)
    image = spaces.Dict({"pos": spaces.Box(-1.0, 1.0, (2,), dtype=np.float32), "flag": spaces.Discrete(2)})
    with pytest.raises(ValueError, match="novelty=0.5 needs flat observations"):
        QCritic(image, 3, novelty=0.5)


def test_by_default_the_bonus_is_on_for_flat_observations_until_a_signal_and_off_for_encoded_ones():
    flat = spaces.Box(-1.0, 1.0, (3,), dtype=np.float32)
    dict_space = spaces.Dict({"pos": spaces.Box(-1.0, 1.0, (2,), dtype=np.float32), "flag": spaces.Discrete(2)})
    image = spaces.Box(0, 255, (3, 36, 36), dtype=np.uint8)  # channel-first, as VecTransposeImage gives
    for critic in (QCritic(flat, 3), SampledActionCritic(flat, spaces.Box(-1.0, 1.0, (2,), dtype=np.float32))):
        assert (critic.novelty, critic.novelty_stop) == (1.0, "signal") and critic.novelty_active
    for space in (dict_space, image):  # encoded observations: no bonus, and no error
        critic = QCritic(space, 3)
        assert critic.novelty == 0.0 and critic.novelty_model is None and not critic.novelty_active
    assert QCritic(flat, 3, novelty=0.0).novelty_model is None
    # The agent says what its critic will be before building it, and builds that critic.
    for env, kwargs, want in (
        ("MountainCar-v0", None,
         {"bootstrap": "own", "novelty": 1.0, "novelty_stop": "signal", "n_step": DEFAULT_N_STEP, "n_critics": 2,
          "batch_size": 256, "updates_per_step": 0.25, "novelty_training": "per_update"}),
        ("MountainCar-v0", {"novelty": 0.0, "n_critics": 3},
         {"bootstrap": "own", "novelty": 0.0, "novelty_stop": "signal", "n_step": DEFAULT_N_STEP, "n_critics": 3,
          "batch_size": 256, "updates_per_step": 0.25}),
        ("Pendulum-v1", {"novelty": 2.0, "novelty_stop": "never", "n_step": 3},
         {"bootstrap": "own", "novelty": 2.0, "novelty_stop": "never", "n_step": 3, "n_critics": 4,
          "batch_size": 128, "updates_per_step": 0.2, "n_target_actions": 2, "novelty_training": "per_update"}),
        ("Pendulum-v1", {"batch_size": 64, "n_target_actions": 3},
         {"bootstrap": "own", "novelty": 1.0, "novelty_stop": "signal", "n_step": DEFAULT_N_STEP, "n_critics": 4,
          "batch_size": 64, "updates_per_step": 0.2, "n_target_actions": 3, "novelty_training": "per_update"}),
    ):  # Discrete actions: two critics, 0.25 steps of 256 rows; sampled ones: four, 0.2 steps of 128
        model = TPO("MlpPolicy", env, critic_kwargs=kwargs, batch_size=8, seed=0)
        assert model.resolved_critic_settings() == want
        critic = model.learn(16).critic
        built = {"bootstrap": critic.bootstrap, "novelty": critic.novelty, "novelty_stop": critic.novelty_stop,
                 "n_step": critic.n_step, "n_critics": critic.q.n_critics, "batch_size": critic.batch_size,
                 "updates_per_step": critic.updates_per_step}
        if hasattr(critic, "n_target_actions"):
            built["n_target_actions"] = critic.n_target_actions
        if critic.novelty_model is not None:
            built["novelty_training"] = "per_update"  # the only way it trains
        assert built == want


def test_an_agent_with_a_novelty_bonus_learns_saves_and_loads_it(tmp_path):
    model = TPO("MlpPolicy", "MountainCar-v0", seed=0).learn(600)  # the default bonus; no goal yet
    nov = model.critic.novelty_model
    assert model.critic.novelty == 1.0 and not model.critic.signal_seen and nov.count == model.critic.n_seen >= 600
    assert model.critic.novelty_scored
    model.save(tmp_path / "m.zip")
    loaded = TPO.load(tmp_path / "m.zip")
    x = torch.tensor([[-0.5, 0.0], [0.4, 0.05]])
    lnov = loaded.critic.novelty_model
    assert lnov.count == nov.count and torch.equal(lnov.mean, nov.mean)
    assert torch.equal(lnov.predictor(x), nov.predictor(x)) and torch.equal(lnov.fixed(x), nov.fixed(x))
    # A critic pickled before the option reads as one without it.
    state = QCritic(spaces.Box(-1.0, 1.0, (3,), dtype=np.float32), 3).__getstate__()
    del state["novelty"], state["novelty_model"], state["novelty_stop"], state["signal_seen"]
    old = QCritic.__new__(QCritic)
    old.__setstate__(state)
    assert old.novelty == 0.0 and old.novelty_model is None and not old.novelty_active
    assert pickle.loads(pickle.dumps(old)).novelty_model is None


def _add(critic, rewards, terminated):
    n = len(rewards)
    obs = np.zeros((n, 3), dtype=np.float32)
    critic.add(obs, np.zeros(n, dtype=np.int64), np.asarray(rewards, dtype=np.float32), obs + 0.1, np.asarray(terminated))


def test_the_env_signals_with_a_reward_unlike_the_first_or_an_end_of_a_nonzero_stream():
    space = spaces.Box(-1.0, 1.0, (3,), dtype=np.float32)
    for rewards, terminated, seen in (([-1.0, -1.0], [False, False], False), ([-1.0, 0.0], [False, False], True),
                                      ([-1.0, -1.0], [False, True], True)):
        critic = QCritic(space, 3, novelty=1.0, novelty_stop="signal")
        _add(critic, [-1.0, -1.0], [False, False])  # the first reward seen is -1
        _add(critic, rewards, terminated)
        assert critic.signal_seen is seen and critic.novelty_active is (not seen)
        if not seen:
            _add(critic, [-1.0], [True])
            assert critic.signal_seen and not critic.novelty_active
    # Where the first reward is 0 an end is no news (FrozenLake's holes end at the 0 that
    # wandering earns): only a reward unlike it is.
    for rewards, terminated, seen in (([0.0, 0.0], [True, True], False), ([0.0, 1.0], [True, True], True)):
        critic = QCritic(space, 3, novelty=1.0, novelty_stop="signal")
        _add(critic, [0.0], [False])
        _add(critic, rewards, terminated)
        assert critic.signal_seen is seen and critic.novelty_active is (not seen)
    never = QCritic(space, 3, novelty=1.0, novelty_stop="never")  # a signal changes nothing
    _add(never, [0.0, 1.0], [True, False])
    assert never.signal_seen and never.novelty_active
    with pytest.raises(ValueError, match="novelty_stop must be one of .*'never', 'signal', 'fade'.*got 'goal'"):
        QCritic(space, 3, novelty=1.0, novelty_stop="goal")



def test_a_fading_bonus_halves_every_half_life_after_a_signal_that_came_after_a_scored_bonus():
    space = spaces.Box(-1.0, 1.0, (3,), dtype=np.float32)
    policy = MlpPolicy(space, spaces.Discrete(3), lambda _: 1e-3)
    critic = QCritic(space, 3, novelty=0.5, novelty_stop="fade", novelty_half_life=100, batch_size=8, updates_per_step=1.0)
    _add(critic, [-1.0] * 8, [False] * 8)
    critic.update(policy)  # a critic step with the bonus: it has been scored
    assert critic.novelty_scored and critic.novelty_weight == 0.5
    _add(critic, [-1.0, 0.0], [False, False])  # the signal, at 10 transitions seen
    assert critic.signal_seen and critic._fade_from == 10 and critic.novelty_weight == 0.5
    _add(critic, [-1.0] * 100, [False] * 100)
    assert critic.novelty_weight == pytest.approx(0.25) and critic.novelty_active
    i = np.arange(8)
    bonus = torch.linspace(0.0, 3.0, 8)
    critic.novelty_model.bonus = lambda x: bonus
    next_value = torch.zeros(critic.n_critics, 8)
    r = torch.as_tensor(critic._data["rewards"][i])
    torch.testing.assert_close(critic._td_target(i, next_value), (r + 0.25 * bonus).expand(critic.n_critics, 8))
    _add(critic, [-1.0] * 901, [False] * 901)  # past ten half-lives: off, no bonus and no predictor steps
    assert critic.novelty_weight == 0.0 and not critic.novelty_active
    torch.testing.assert_close(critic._td_target(i, next_value), r.expand(critic.n_critics, 8))
    # A signal before any bonus was scored (no critic step yet) stops it at once, as "signal" does.
    early = QCritic(space, 3, novelty=0.5, novelty_stop="fade", novelty_half_life=100)
    _add(early, [-1.0, -1.0], [False, True])
    assert early.signal_seen and early._fade_from is None and early.novelty_weight == 0.0
    with pytest.raises(ValueError, match="novelty_half_life must be a finite number > 0; got 0"):
        QCritic(space, 3, novelty_stop="fade", novelty_half_life=0)
    # A critic pickled before the option has no fade and its stop rule's weight.
    state = QCritic(space, 3).__getstate__()
    del state["novelty_half_life"], state["_fade_from"]
    old = QCritic.__new__(QCritic)
    old.__setstate__(state)
    assert old.novelty_weight == 1.0 and old._fade_from is None

@pytest.mark.parametrize("stop", ["signal", "fade"])
def test_a_stopped_bonus_comes_back_once_the_replay_has_forgotten_every_signal(stop):
    # MountainCar, 1M steps, two critics (reported seed 3): the goal was found once, the bonus
    # stopped, the near-uniform policy rarely reached the goal again, the 50,000-row replay
    # lost its last goal row and from then on every action scored alike, with no drive left.
    space = spaces.Box(-1.0, 1.0, (3,), dtype=np.float32)
    policy = MlpPolicy(space, spaces.Discrete(3), lambda _: 1e-3)
    critic = QCritic(space, 3, novelty=0.5, novelty_stop=stop, novelty_half_life=1e9, buffer_size=20,
                     batch_size=8, updates_per_step=1.0)  # fmt: skip
    _add(critic, [-1.0] * 8, [False] * 8)
    critic.update(policy)  # the bonus has entered a target
    _add(critic, [-1.0, -1.0, -1.0], [False, True, False])  # the signal: the 10th transition
    assert critic._last_signal_at == 10 and critic._fade_from == 11 and critic.signal_in_replay
    off = 0.0 if stop == "signal" else 0.5  # a fade with an endless half-life keeps the weight
    assert critic.novelty_weight == off
    _add(critic, [-1.0] * 18, [False] * 18)  # 29 seen: the signal's row (10) is still there
    assert critic.signal_in_replay and critic.novelty_weight == pytest.approx(off) and critic._data["terminated"].sum() == 1
    _add(critic, [-1.0], [False])  # 30: it is overwritten, and the bonus is back at full weight
    assert not critic.signal_in_replay and critic._data["terminated"].sum() == 0
    assert critic.novelty_weight == 0.5 and critic.novelty_active
    count = critic.novelty_model.count
    _add(critic, [-1.0] * 2, [False] * 2)
    assert critic.novelty_model.count == count + 2  # the predictor learns the states again
    _add(critic, [-1.0, 0.0], [False, False])  # a signal again (34): stopped, or faded from here
    assert critic._last_signal_at == 34 and critic._fade_from == 34 and critic.novelty_weight == pytest.approx(off)
    # A signal before the bonus entered any target stops it for good, forgotten or not.
    early = QCritic(space, 3, novelty=0.5, novelty_stop=stop, buffer_size=20)
    _add(early, [-1.0, -1.0], [False, True])
    _add(early, [-1.0] * 40, [False] * 40)
    assert not early.signal_in_replay and early._fade_from is None and early.novelty_weight == 0.0
    # A critic pickled before the replay's signals were tracked counts its last one as recent.
    state = critic.__getstate__()
    del state["_last_signal_at"]
    old = QCritic.__new__(QCritic)
    old.__setstate__(state)
    assert old._last_signal_at == old.n_seen == 34 and old.novelty_weight == pytest.approx(off)
    _add(old, [-1.0] * 20, [False] * 20)
    assert old.novelty_weight == 0.5


def test_an_agent_logs_its_bonus_weight(tmp_path):
    from stable_baselines3.common.logger import configure

    model = TPO("MlpPolicy", "MountainCar-v0", seed=0, n_envs=2)
    model.set_logger(configure(str(tmp_path), ["csv"]))
    model.learn(400)
    rows = (tmp_path / "progress.csv").read_text().splitlines()
    column = rows[0].split(",").index("rollout/novelty_weight")
    assert [float(r.split(",")[column]) for r in rows[1:]] == [1.0] * (len(rows) - 1)  # no goal yet
    plain = TPO("MlpPolicy", "CartPole-v1", seed=0, critic_kwargs={"novelty": 0.0})
    plain.set_logger(configure(str(tmp_path / "plain"), ["csv"]))
    plain.learn(200)
    assert "rollout/novelty_weight" not in (tmp_path / "plain" / "progress.csv").read_text()


def test_a_stopped_bonus_leaves_the_target_and_the_predictor_alone():
    critic = _fed_critic(QCritic, novelty=1.0, novelty_stop="signal", updates_per_step=1.0)
    assert critic.signal_seen  # _fed_critic's rewards are normal draws, some of them terminal
    i = np.arange(32)
    next_value = torch.randn(critic.n_critics, 32)
    r = torch.as_tensor(critic._data["rewards"][i])
    done = torch.as_tensor(critic._data["terminated"][i])
    torch.testing.assert_close(critic._td_target(i, next_value), r + critic.gamma * (1 - done) * next_value)
    before = [p.detach().clone() for p in critic.novelty_model.predictor.parameters()]
    critic.update(MlpPolicy(critic.observation_space, spaces.Discrete(3), lambda _: 1e-3))
    assert all(torch.equal(a, b) for a, b in zip(critic.novelty_model.predictor.parameters(), before))
    assert critic.novelty_model.count == 0


def test_a_run_whose_env_signals_before_the_first_critic_step_is_the_run_without_the_bonus():
    # CartPole's random episodes end within a few dozen steps, long before the critic's first
    # batch of 256 transitions: the bonus stopped at the signal never entered a target.
    plain = TPO("MlpPolicy", "CartPole-v1", seed=3, critic_kwargs={"novelty": 0.0}).learn(1500)
    gated = TPO("MlpPolicy", "CartPole-v1", seed=3).learn(1500)  # the default: stopped at the signal
    nov = gated.critic.novelty_model
    assert gated.critic.signal_seen and nov.count < gated.critic.batch_size and not gated.critic.novelty_scored
    for a, b in zip(plain.policy.parameters(), gated.policy.parameters()):
        assert torch.equal(a, b)
    for a, b in zip(plain.critic.q.parameters(), gated.critic.q.parameters()):
        assert torch.equal(a, b)


def test_a_bonus_scored_for_several_batches_weighs_the_past_as_that_many_scorings_would():
    rng = np.random.default_rng(0)
    x = torch.as_tensor(rng.normal(size=(64, 2)), dtype=torch.float32)
    once, each = RandomNetworkNovelty(2, seed=0), RandomNetworkNovelty(2, seed=0)
    for model in (once, each):
        model.observe(x)
        model.bonus(x * 3.0)  # a past of another scale
    once.bonus(x, batches=5)
    for _ in range(5):
        each.bonus(x)
    assert once.bonus_ms == pytest.approx(each.bonus_ms, rel=1e-6)
