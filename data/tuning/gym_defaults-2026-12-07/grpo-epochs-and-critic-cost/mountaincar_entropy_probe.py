"""Probe (issue 30, 2026-12-07): MountainCar-v0 seed 100, 200,000 steps, defaults; counts the training
episodes that reach the goal and records the policy's mean entropy and mean action probabilities over
512 uniformly drawn states every 20,000 steps. Run from the repository root:
`OMP_NUM_THREADS=1 python data/tuning/gym_defaults-2026-12-07/grpo-epochs-and-critic-cost/mountaincar_entropy_probe.py grpo`."""
import json
import sys

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3.common.callbacks import BaseCallback

from tpo_agents import GRPO, TPO

torch.set_num_threads(1)


class Track(BaseCallback):
    def __init__(self):
        super().__init__()
        self.goals = []
        self.ent = []
    def _on_step(self):
        for info in self.locals.get("infos", []):
            ep = info.get("episode")
            if ep is not None and ep["l"] < 200:
                self.goals.append(self.num_timesteps)
        if self.num_timesteps % 20000 < self.training_env.num_envs:
            obs = torch.as_tensor(np.random.default_rng(0).uniform([-1.2, -0.07], [0.6, 0.07], (512, 2)), dtype=torch.float32)
            with torch.no_grad():
                lp = self.model.policy.action_log_probs(obs)
            self.ent.append((self.num_timesteps, round(float(-(lp.exp() * lp).sum(-1).mean()), 3), [round(float(x), 3) for x in lp.exp().mean(0)]))
        return True

algo = {"tpo": TPO, "grpo": GRPO}[sys.argv[1]]
m = algo("MlpPolicy", gym.make("MountainCar-v0"), seed=100)
cb = Track()
m.learn(200_000, callback=cb)
print(json.dumps({"algo": sys.argv[1], "n_goal_episodes": len(cb.goals), "first_goals": cb.goals[:10], "last_goals": cb.goals[-5:], "entropy": cb.ent}))
