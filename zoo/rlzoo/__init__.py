"""The bridge to rl-zoo3: our algorithms in its registries, and its experiment manager
taught our defaults.

:func:`register` adds ``tpo``, ``grpo``, ``dg``, ``pg`` and ``cfppo`` (critic-free PPO)
to ``rl_zoo3.utils.ALGOS`` (the one dict every rl-zoo3 module imports by name, so its
argument parsers accept them once this runs before they parse) and our Optuna samplers to
``rl_zoo3.hyperparams_opt.HYPERPARAMS_SAMPLER`` / ``HYPERPARAMS_CONVERTER``, and imports
:mod:`tpo_gym` so our env ids exist.

:class:`ZooExperimentManager` is rl-zoo3's ``ExperimentManager`` with:

* our hyperparameter folder as the default config (``zoo/rlzoo/hyperparams/<algo>.yml``,
  falling back to rl-zoo3's own files for algorithms we have no file for);
* every section checked before use (:func:`zoo.rlzoo.hyperparams.check_section`): a clear
  error naming the file, the section and the key;
* :class:`~zoo.rlzoo.vec_env.NativeVecEnv` as the vec env class for envs with a native vector
  env (``--vec-env auto``, the default; ``native``, ``dummy``, ``subproc`` choose);
* for our algorithms, ``n_envs`` (when the section does not set it) sized as the agent
  sizes its own env: ``batch_size`` sub-envs on native envs (``batch_size * K`` for K
  rollouts per prompt), K otherwise; under ``-optimize`` it is re-derived for each
  trial's sampled ``batch_size`` / K;
* ``learning_rate`` kept a number or a ``lin_<x>`` schedule, ``clip_range`` a number
  (our agents take a float clip, not a schedule);
* under ``-optimize``, ``--timeout`` (:attr:`ZooExperimentManager.time_limit`): no new trial
  starts after it and rl-zoo3's report is written as after ``--n-trials``.

:func:`installed` puts the subclass where ``rl_zoo3.train.train`` and
``rl_zoo3.enjoy.enjoy`` look it up (their module global ``ExperimentManager``) for the
duration of a call, so their own code runs unchanged.
"""

from __future__ import annotations

import contextlib
import difflib
import io
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import gymnasium as gym
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

from tpo_gym.extras import needs_extra

# Every module of zoo.rlzoo imports this package first: the one place that says which
# extra a core install lacks (rl-zoo3, optuna, pyyaml), instead of "No module named 'yaml'".
with needs_extra("zoo", "zoo.rlzoo (python -m zoo.train, zoo.enjoy)"):
    from rl_zoo3.exp_manager import ExperimentManager
    from rl_zoo3.utils import SimpleLinearSchedule

    from zoo.rlzoo.hyperparams import (
        HyperparamsError,
        check_section,
        default_config,
        evaluate_policy_kwargs,
        load_file,
        select_section,
    )
    from zoo.rlzoo.samplers import SAMPLERS, convert_params
    from zoo.rlzoo.vec_env import NativeVecEnv, is_native

VEC_ENV_CHOICES = ("auto", "native", "dummy", "subproc")
"""``--vec-env`` of zoo.rlzoo.train: ``auto`` is ``native`` for envs with a native vector env,
else rl-zoo3's ``dummy``."""


def our_algorithms() -> dict[str, type]:
    """rl-zoo3 algorithm key -> our agent class."""
    from tpo_agents import DG, GRPO, PG, TPO, CriticFreePPO

    return {"tpo": TPO, "grpo": GRPO, "dg": DG, "pg": PG, "cfppo": CriticFreePPO}


def register() -> None:
    """Register our algorithms, samplers and env ids with rl-zoo3 (idempotent)."""
    import rl_zoo3.hyperparams_opt as opt
    import rl_zoo3.utils

    import tpo_gym  # noqa: F401  (registers the env ids)

    rl_zoo3.utils.ALGOS.update(our_algorithms())
    opt.HYPERPARAMS_SAMPLER.update(SAMPLERS)
    opt.HYPERPARAMS_CONVERTER.update({algo: convert_params for algo in SAMPLERS})


class UsageError(ValueError):
    """A bad command line (unknown algorithm or env id, ...)."""


def check_algo(algo: str) -> type:
    """The class registered under ``algo`` in rl-zoo3's ``ALGOS``."""
    from rl_zoo3.utils import ALGOS

    if algo not in ALGOS:
        raise UsageError(f"unknown algorithm {algo!r}; expected one of {sorted(ALGOS)}")
    return ALGOS[algo]


def check_env_id(env_id: str) -> None:
    """Raise :class:`UsageError` (with the closest registered id) if ``env_id`` is unknown."""
    if env_id not in gym.registry:
        close = difflib.get_close_matches(env_id, list(gym.registry), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise UsageError(f"unknown env id {env_id!r} (not in gymnasium's registry){hint}")


def resolve_vec_env(choice: str, env_id: str) -> str:
    """``native``, ``dummy`` or ``subproc`` for ``--vec-env choice`` on ``env_id``."""
    if choice not in VEC_ENV_CHOICES:
        raise UsageError(f"--vec-env must be one of {VEC_ENV_CHOICES}; got {choice!r}")
    if choice == "auto":
        return "native" if is_native(env_id) else "dummy"
    if choice == "native" and not is_native(env_id):
        raise UsageError(f"--vec-env native: {env_id} has no native vector env; use dummy or subproc")
    return choice


@dataclass(frozen=True)
class AgentLayout:
    """How an agent lays out its env: sub-envs, group mode, token (autoregressive) policy."""

    n_envs: int
    group_mode: str
    autoregressive: bool
    n_candidates: int

    @property
    def needs_native(self) -> bool:
        """Token sequence groups replay each prompt in a block of K sub-envs through the
        native vector env's ``reset(options={"context": prompts})``; SB3's DummyVecEnv /
        SubprocVecEnv cannot pass one prompt per sub-env that way."""
        return self.autoregressive and self.group_mode == "sequence" and self.n_candidates > 1


def agent_layout(algo_cls: type, env_id: str, env_kwargs: dict[str, Any], hyperparams: dict[str, Any]) -> AgentLayout:
    """The layout ``algo_cls`` chooses for itself on ``env_id`` with these hyperparameters
    (it constructs the agent without its policy and reads ``n_envs`` and the group mode)."""
    env = gym.make(env_id, **env_kwargs)
    try:
        model = algo_cls(env=env, _init_setup_model=False, **hyperparams)
    finally:
        env.close()
    try:
        return AgentLayout(
            n_envs=int(model.n_envs),
            group_mode=model.resolve_group_mode(),
            autoregressive=bool(getattr(model.policy_class, "autoregressive", False)),
            n_candidates=int(model.n_candidates),
        )
    finally:
        model.env.close()


class ZooExperimentManager(ExperimentManager):
    """rl-zoo3's ``ExperimentManager`` with our defaults (see the module docstring)."""

    vec_env_choice: ClassVar[str] = "auto"
    """``--vec-env`` as given to zoo.rlzoo.train (rl-zoo3's own parser knows dummy/subproc only)."""
    time_limit: ClassVar[float | None] = None
    """``--timeout`` of zoo.rlzoo.train: seconds after which a study starts no new trial."""
    last: ClassVar[ZooExperimentManager | None] = None
    """The latest instance (its ``save_path`` is the run folder)."""

    def __init__(self, *args: Any, config: str | None = None, **kwargs: Any):
        # rl-zoo3's vec_env_type (from its --vec-env, whose choices zoo.rlzoo.train widens)
        # knows dummy/subproc only; the class is chosen below from ``vec_env_choice``.
        kwargs["vec_env_type"] = "dummy"
        super().__init__(*args, config=config, **kwargs)
        if config is None:
            ours = default_config(self.algo)
            if ours is not None:
                self.config = str(ours)
        self.ours = self.algo in our_algorithms()
        self.derive_n_envs = False
        kind = resolve_vec_env(self.vec_env_choice, self.env_name.gym_id)
        self.vec_env_class = {"native": NativeVecEnv, "dummy": DummyVecEnv, "subproc": SubprocVecEnv}[kind]
        self.args.vec_env = kind  # recorded in args.yml
        ZooExperimentManager.last = self

    # ----------------------------------------------------------- hyperparameters
    def read_hyperparameters(self) -> tuple[dict[str, Any], dict[str, Any]]:
        if self.config.endswith((".yml", ".yaml")):
            from rl_zoo3.utils import ALGOS

            data = load_file(self.config)
            name = select_section(self.config, data, self.env_name.gym_id)
            where = f"{self.config} [{name}]"
            check_section(ALGOS[self.algo], data[name], where)
            if self.custom_hyperparams:
                merged = {**data[name], **self.custom_hyperparams}
                check_section(ALGOS[self.algo], merged, f"-params {sorted(self.custom_hyperparams)} over {where}")
        return super().read_hyperparameters()

    def _preprocess_schedules(self, hyperparams: dict[str, Any]) -> dict[str, Any]:  # type: ignore[override]
        if not self.ours:
            return super()._preprocess_schedules(hyperparams)
        clip = hyperparams.get("clip_range")
        if clip is not None and (isinstance(clip, bool) or not isinstance(clip, int | float)):
            raise HyperparamsError(f"{self.config}: clip_range of {self.algo} must be a number; got {clip!r}")
        lr = hyperparams.get("learning_rate")
        if isinstance(lr, str):
            kind, _, value = lr.partition("_")
            try:
                initial = float(value)
            except ValueError:
                initial = None
            if kind != "lin" or initial is None:
                raise HyperparamsError(
                    f"{self.config}: learning_rate {lr!r} must be a number or 'lin_<initial value>'"
                )
            hyperparams["learning_rate"] = SimpleLinearSchedule(initial)
        elif lr is not None and (isinstance(lr, bool) or not isinstance(lr, int | float)):
            raise HyperparamsError(f"{self.config}: learning_rate must be a number; got {lr!r}")
        return hyperparams

    def _preprocess_hyperparams(self, hyperparams: dict[str, Any]):
        if "policy_kwargs" in hyperparams:
            hyperparams["policy_kwargs"] = evaluate_policy_kwargs(hyperparams["policy_kwargs"], self.config)
        explicit_n_envs = "n_envs" in hyperparams
        derive = self.ours and not explicit_n_envs
        # rl-zoo3 prints "Using 1 environments" (its default) before we size n_envs like the
        # agent does: hold its output back and drop that line, so one true line is printed.
        held = io.StringIO() if derive and self.verbose > 0 else None
        try:
            with contextlib.redirect_stdout(held) if held is not None else contextlib.nullcontext():
                result = super()._preprocess_hyperparams(hyperparams)
        finally:
            if held is not None:
                lines = held.getvalue().splitlines(keepends=True)
                if lines and lines[0] == f"Using {self.n_envs} environments\n":
                    del lines[0]
                sys.stdout.write("".join(lines))
        if self.ours:
            layout = self._layout(result[0])
            if layout.needs_native and self.vec_env_class is not NativeVecEnv:
                raise UsageError(
                    f"{self.algo} on {self.env_name.gym_id} forms groups of K = {layout.n_candidates} "
                    "completions per prompt, replayed through the native vector env; use "
                    "--vec-env native (or auto, the default) instead of "
                    f"{self.vec_env_class.__name__}"
                )
            if explicit_n_envs and layout.group_mode == "sequence" and self.n_envs % layout.n_candidates:
                raise HyperparamsError(
                    f"{self.config}: n_envs = {self.n_envs} must be a multiple of n_candidates = "
                    f"{layout.n_candidates} ({self.algo} plays K rollouts per context on "
                    f"{self.env_name.gym_id}); leave n_envs out to size it like the agent does"
                )
            if not explicit_n_envs:
                self.derive_n_envs = True
                self.n_envs = layout.n_envs
                if self.verbose > 0:
                    print(f"Using {self.n_envs} environments (the agent's own batch layout)")
        return result

    def _layout(self, hyperparams: dict[str, Any]) -> AgentLayout:
        from rl_zoo3.utils import ALGOS

        return agent_layout(ALGOS[self.algo], self.env_name.gym_id, self.env_kwargs, hyperparams)

    # ---------------------------------------------------------------- optimize
    def objective(self, trial) -> float:
        if self.derive_n_envs:
            from rl_zoo3.hyperparams_opt import HYPERPARAMS_SAMPLER

            # Optuna returns the same value when a trial suggests a name again, so this
            # sees exactly the parameters rl-zoo3's objective is about to sample.
            extra = {"using_her_replay_buffer": False, "her_kwargs": {}}
            sampled = HYPERPARAMS_SAMPLER[self.algo](trial, self.n_actions, self.n_envs, extra)
            self.n_envs = self._layout({**self._hyperparams, **sampled}).n_envs
        try:
            return super().objective(trial)
        finally:  # Optuna's own timeout semantics: the running trial finishes, no new one starts
            if self.time_limit is not None and time.monotonic() - self._study_start >= self.time_limit:
                print(f"zoo.train: --timeout {self.time_limit:g} s reached: no new trial starts")
                trial.study.stop()

    def hyperparameters_optimization(self) -> None:
        """rl-zoo3's study (its report is written when ``--n-trials`` are done, at
        ``--timeout`` or on Ctrl-C / SIGTERM), or one line when no trial completed."""
        self._study_start = time.monotonic()
        try:
            super().hyperparameters_optimization()
        except ValueError as err:  # Optuna's study.best_trial with no complete trial
            if "No trials are completed yet" not in str(err):
                raise
            print("zoo.train: the study stopped before any trial completed: no report written")


@contextlib.contextmanager
def installed(
    vec_env: str = "auto", enjoy_env_id: str | None = None, time_limit: float | None = None
) -> Iterator[type[ZooExperimentManager]]:
    """Within the block, ``rl_zoo3.train.train`` and ``rl_zoo3.enjoy.enjoy`` use
    :class:`ZooExperimentManager` (with ``--vec-env vec_env`` and ``--timeout time_limit``);
    for enjoy, the test env of ``enjoy_env_id`` is built with the same vec env choice."""
    register()
    import rl_zoo3.enjoy
    import rl_zoo3.train

    saved = (
        rl_zoo3.train.ExperimentManager,
        rl_zoo3.enjoy.ExperimentManager,
        ZooExperimentManager.vec_env_choice,
        ZooExperimentManager.default_vec_env_cls,
        ZooExperimentManager.time_limit,
    )
    ZooExperimentManager.vec_env_choice = vec_env
    ZooExperimentManager.time_limit = time_limit
    if enjoy_env_id is not None:
        kind = resolve_vec_env(vec_env, enjoy_env_id)
        ZooExperimentManager.default_vec_env_cls = {"native": NativeVecEnv, "dummy": None, "subproc": SubprocVecEnv}[kind]
    rl_zoo3.train.ExperimentManager = ZooExperimentManager
    rl_zoo3.enjoy.ExperimentManager = ZooExperimentManager
    try:
        yield ZooExperimentManager
    finally:
        (
            rl_zoo3.train.ExperimentManager,
            rl_zoo3.enjoy.ExperimentManager,
            ZooExperimentManager.vec_env_choice,
            ZooExperimentManager.default_vec_env_cls,
            ZooExperimentManager.time_limit,
        ) = saved
