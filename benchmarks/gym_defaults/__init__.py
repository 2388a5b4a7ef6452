"""Gym defaults benchmark: TPO and GRPO with default hyperparameters against tuned PPO.

What is compared
    ``tpo_agents.TPO("MlpPolicy", env, seed=s)`` and ``tpo_agents.GRPO("MlpPolicy", env,
    seed=s)`` with no other argument (their defaults pick the group mode from the env:
    a learned critic on discrete actions, branch groups on Box actions) against
    Stable-Baselines3's ``PPO`` with rl-zoo3's tuned hyperparameters for the env (method
    ``ppo_zoo``), read at run time from the installed rl-zoo3's ``hyperparams/ppo.yml``
    and converted the way rl-zoo3 does: ``n_envs`` sub-envs (``make_vec_env``),
    ``normalize`` -> ``VecNormalize`` (gamma from the entry), ``lin_X`` -> a linear
    schedule from X to 0, ``policy_kwargs`` strings evaluated with ``nn`` in scope. Keys
    that are no PPO argument (``n_timesteps``, ``policy``, ``frame_stack``, ...) are
    dropped and listed. Envs without an entry (FrozenLake, IdentityEnv) get SB3's PPO
    defaults, and the result says so per env. The exact hyperparameters of every run are
    in the JSON config. Envs: CartPole-v1, Acrobot-v1, MountainCar-v0, LunarLander-v3
    (skipped, with the reason, when Box2D is not installed), FrozenLake-v1 (slippery and
    not), SB3's ``IdentityEnv(10)`` and Pendulum-v1, each with its own budget and
    "solved" threshold (``ENVS``).

How it is measured
    Every method trains on an env for the same number of env steps (each step of each
    sub-env counts once, SB3's ``num_timesteps``). The greedy policy is evaluated
    (``evaluate_policy``, ``deterministic=True``, ``--n-eval-episodes`` episodes) on a
    separate, separately seeded eval env at steps 0, M, 2M, ..., N with M =
    ``--eval-every-fraction`` x N, and training stops at N, so all methods share one step
    axis (``benchmarks.harness``'s callback). With ``VecNormalize`` the eval env
    normalizes observations with the training env's statistics, copied before each
    evaluation, and leaves rewards raw. Runs (env x method x seed) go through
    ``zoo.jobs.sweep``: separate processes with one torch thread each, at most ``--workers``
    at a time (1: in this process), each finished run cached under the cache root CACHE
    (``--cache``, default ``OUT/cache``) as ``CACHE/gym_defaults/<env>__<method>__seed<s>.json``
    with its config (``spec``). A rerun reuses cached runs, retries failed ones, and refuses
    a cache file whose config differs from the one asked for; ``--cached-only`` reports on
    the cache alone.

Run it with::

    python -m benchmarks.gym_defaults                          # every env, 5 seeds, 2 workers
    python -m benchmarks.gym_defaults --envs CartPole-v1 Acrobot-v1 --seeds 3
    python -m benchmarks.gym_defaults --timesteps-scale 0.1 --out /tmp/quick   # a quick look
    python -m benchmarks.gym_defaults --cached-only            # report on what is cached

The committed page (``docs/results/gym_defaults.*``) is rebuilt from the committed run
records (``data/cache/gym_defaults/``) with::

    python -m benchmarks.gym_defaults --out docs/results --cache data/cache --cached-only

and extended by training into that cache (the same command without ``--cached-only``).

It writes ``OUT/gym_defaults.json`` (config with every run's hyperparameters; per env
and method: step axis, per-seed returns, mean and standard error, final return, mean of
the last 5 evaluations, first step where the seed-mean return reaches the threshold,
seeds reaching it, wall seconds per run; whether TPO and GRPO match PPO-zoo; skipped
envs, failed and missing runs), ``OUT/gym_defaults.png`` (one panel per env, mean return
+- s.e. against env steps) and ``OUT/gym_defaults.md`` (protocol, table, the
"TPO with defaults matches PPO-zoo on N of M envs" line, skipped envs). ``OUT`` defaults
to ``results`` (a scratch folder).

The package: :mod:`~benchmarks.gym_defaults.config` (envs, budgets, methods, rl-zoo3's PPO
hyperparameters), :mod:`~benchmarks.gym_defaults.runner` (one run, the cache, the sweep),
:mod:`~benchmarks.gym_defaults.report` (summaries, JSON/MD/PNG) and
:mod:`~benchmarks.gym_defaults.cli` (the command line; ``__main__`` runs it) and
:mod:`~benchmarks.gym_defaults.tune` (a candidate default's constructor arguments on tuning
seeds, 100 and up, before the table's seeds see it).
"""

