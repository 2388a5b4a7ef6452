"""MNIST contextual bandit: see an image, name its class, reward 1 if right (numpy only)."""

from __future__ import annotations

import os
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from tpo_gym.candidates import check_candidate_actions
from tpo_gym.datasets import NUM_CLASSES, image_classification_source, load_image_classification
from tpo_gym.rng import CounterStreams
from tpo_gym.snapshot import StateSnapshot
from tpo_gym.validation import (
    check_action_batch,
    check_index_option,
    check_int,
    check_render_mode,
    check_reset_options,
    check_scalar_action,
    check_vector_seed,
)

__all__ = ["MNISTBanditEnv", "MNISTBanditVectorEnv", "MNISTResetNeeded"]


class MNISTResetNeeded(gym.error.ResetNeeded, ValueError):
    """``step``/``score_candidates`` called before ``reset()`` or after the episode ended.

    Subclasses both :class:`gymnasium.error.ResetNeeded` and :class:`ValueError` (as the
    bandits' ``BanditResetNeeded`` does).
    """


class _ImageSplit:
    """What both MNIST envs hold: one split of an image-classification dataset, loaded by
    the env itself in its constructor."""

    def _load_split(self, dataset: str, split: str, data_dir: Any) -> spaces.Box:
        """Load the split (``dataset``, ``split``, ``data_dir``, ``num_images``,
        ``image_dim`` and the images and labels); returns the observation space of one image.

        ``self.data_dir`` is where the data was really read from (see
        :func:`tpo_gym.datasets.image_classification_source`), not the argument."""
        self.dataset = dataset
        self.split = split
        self._images, self._labels = load_image_classification(dataset, split, data_dir)
        self.data_dir = image_classification_source(dataset, split, data_dir)
        self.num_images, self.image_dim = self._images.shape
        return spaces.Box(0.0, 1.0, (self.image_dim,), np.float32)


def _check_index(index: Any, num_images: int, num_envs: int) -> np.ndarray:
    """``options["index"]``: an int (every sub-env) or an int array ``[num_envs]``."""
    return check_index_option(index, num_images, num_envs, "index", "image index", "image indices")


def _image_side(d: int) -> int:
    side = int(round(np.sqrt(d)))
    return side if side * side == d else 0


def _to_rgb(image: np.ndarray) -> np.ndarray:
    side = _image_side(image.shape[-1])
    gray = (np.clip(image, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)
    gray = gray.reshape(side, side) if side else gray.reshape(1, -1)
    return np.repeat(gray[:, :, None], 3, axis=2)


class MNISTBanditEnv(gym.Env, _ImageSplit):
    """One-step contextual bandit on an image-classification dataset.

    ## Description
    Each episode shows one image from the chosen dataset split; the agent names a class and is
    rewarded 1 if it is the image's label. The label is never shown (not in the observation
    nor in the reset info), so the agent learns only from rewards. This is the MNIST
    contextual bandit of the TPO paper (docs/algorithms.md, section 9.1). Grouped methods can score every
    class for the current image with :meth:`score_candidates` without changing the state.

    ## Action Space
    ``Discrete(10)``: the predicted class.

    ## Observation Space
    ``Box(0, 1, (d,), float32)``: the flattened image, pixel intensities scaled to [0, 1];
    d = 784 (28x28) for ``"mnist"`` and ``"fashion-mnist"``, 64 (8x8) for ``"digits"``.

    ## Rewards
    1.0 if the action equals the label, else 0.0. The step info holds ``"correct"`` (bool);
    never the label.

    ## Starting State
    An image index drawn uniformly from the split (with replacement), using a 64-bit key taken
    from ``np_random`` when the environment is seeded and a per-environment draw counter, so
    draws are reproducible and match :class:`MNISTBanditVectorEnv` sub-environment by
    sub-environment. ``reset(options={"index": i})`` shows image ``i`` instead (no draw is
    consumed).

    ## Episode End
    After one step: ``terminated=True``, ``truncated=False``. ``step`` or
    ``score_candidates`` before ``reset()`` or after that step raise
    :class:`MNISTResetNeeded`; an invalid action raises ``ValueError``.

    ## Arguments
    ```python
    gym.make("MNISTBandit-v0", dataset="mnist", split="train", data_dir=None)
    ```
    - ``dataset``: ``"mnist"``, ``"fashion-mnist"`` or ``"digits"`` (scikit-learn's 8x8
      digits, needs no files). Files are never downloaded; see
      :func:`tpo_gym.datasets.find_image_classification_files` for where they are looked up
      (``$TPO_MNIST_DIR`` / ``$TPO_FASHION_MNIST_DIR``, usual cache folders).
    - ``split``: ``"train"`` or ``"test"``; evaluate on ``split="test"``, or take the whole
      split at once with :meth:`dataset_arrays`.
    - ``data_dir``: the folder holding the dataset files (or a torchvision root). When given,
      it is the only place searched and must exist; ``None`` searches the environment
      variable and the usual folders.
    - ``render_mode``: ``None`` or ``"rgb_array"`` (the current image as ``[h, w, 3]`` uint8).

    ## Attributes
    ``data_dir`` (str) is where the split was read from: the absolute folder of the IDX
    files, the absolute path of Keras' ``mnist.npz``, or
    :data:`tpo_gym.datasets.DIGITS_SOURCE` for ``"digits"``. ``dataset``, ``split``,
    ``num_images`` and ``image_dim`` describe the split.

    ## Version History
    - v0: initial version.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 4, "tpo_group_mode": "all_actions"}

    def __init__(
        self,
        dataset: str = "mnist",
        split: str = "train",
        data_dir: str | os.PathLike | None = None,
        render_mode: str | None = None,
    ) -> None:
        self.render_mode = check_render_mode(render_mode, self.metadata["render_modes"])
        self.observation_space = self._load_split(dataset, split, data_dir)
        self.action_space = spaces.Discrete(NUM_CLASSES)
        self._streams = CounterStreams(1)  # image draws (tpo_gym.rng)
        self._index: int | None = None
        self._done = False

    # ------------------------------------------------------------------ data access
    def dataset_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """The whole split: read-only float32 images ``[n, d]`` and int64 labels ``[n]``.

        For evaluation code (e.g. the test error of a policy on ``split="test"``); the agent
        interface (observations, rewards) never exposes labels.
        """
        return self._images, self._labels

    @property
    def current_index(self) -> int | None:
        """Index of the image shown in this episode (``None`` before the first reset)."""
        return self._index

    def _require_live(self, what: str) -> None:
        if self._index is None:
            raise MNISTResetNeeded(f"call reset() before {what}")
        if self._done:
            raise MNISTResetNeeded(
                f"the episode has terminated (every episode is one step); call reset() before {what}"
            )

    # ------------------------------------------------------------------ Gymnasium API
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self._streams.seed_single(self.np_random, seeded=seed is not None)
        options = check_reset_options(options, ["index"])
        if options.get("index") is not None:
            self._index = int(_check_index(options["index"], self.num_images, 1)[0])
        else:
            self._index = int(self._streams.draw(self.num_images)[0, 0])
        self._done = False
        return self._images[self._index].copy(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self._require_live("step()")
        correct = bool(check_scalar_action(action, NUM_CLASSES) == self._labels[self._index])
        self._done = True
        return self._images[self._index].copy(), float(correct), True, False, {"correct": correct}

    def score_candidates(self, actions: Any) -> np.ndarray:
        """Reward each candidate class would get for the current image; no state change.

        Args:
            actions: integer classes, shape ``[K]`` (repeats allowed).

        Returns:
            float64 ``[K]``: 1.0 where the candidate is the label, else 0.0.

        Raises:
            MNISTResetNeeded: before ``reset()`` or after the episode's step.
            ValueError: invalid candidates (see ``tpo_gym.candidates.check_candidate_actions``).
        """
        self._require_live("score_candidates()")
        a = check_candidate_actions(actions, NUM_CLASSES, ())
        return (a == self._labels[self._index]).astype(np.float64)

    def render(self) -> np.ndarray | None:
        if self.render_mode is None:
            gym.logger.warn(
                "MNISTBanditEnv.render() called without a render_mode; "
                'pass render_mode="rgb_array" to the constructor or gym.make'
            )
            return None
        if self._index is None:
            return np.zeros((*_to_rgb(self._images[0]).shape,), dtype=np.uint8)
        return _to_rgb(self._images[self._index])


class MNISTBanditVectorEnv(StateSnapshot, VectorEnv, _ImageSplit):
    """``num_envs`` independent :class:`MNISTBanditEnv` in one numpy batch.

    Built by ``gym.make_vec("MNISTBandit-v0", num_envs=n, dataset=..., split=...)``.
    Every step ends every sub-episode, so autoreset is ``AutoresetMode.SAME_STEP``: the
    returned observations are the next images, and, as in Gymnasium's ``SyncVectorEnv``,
    ``info["final_obs"]`` (object array of the images acted on) and ``info["final_info"]``
    (``{"correct": bool[n], "_correct": ...}``) hold the finished episodes, with masks
    ``info["_final_obs"]`` and ``info["_final_info"]``.

    Seeding follows Gymnasium: ``reset(seed=s)`` seeds sub-environment ``i`` with ``s + i``
    (or ``reset(seed=[s_0, ..., s_{n-1}])``), and sub-environment ``i`` then shows the same
    images, draw after draw, as ``MNISTBanditEnv`` reset with seed ``s + i`` and reset after
    every step. ``reset(options={"index": idx})`` shows images ``idx`` (int or ``[n]``).

    ``score_candidates(actions [n, K]) -> float64 [n, K]`` scores candidate classes for the
    current images; ``dataset_arrays()`` returns the whole split for evaluation;
    ``data_dir`` is where the split was read from, as on :class:`MNISTBanditEnv`.
    """

    _shared_state = ("_images", "_labels")  # the dataset split: data, not state

    metadata = {
        "render_modes": ["rgb_array"],
        "render_fps": 4,
        "autoreset_mode": AutoresetMode.SAME_STEP,
        "tpo_group_mode": "all_actions",
    }

    def __init__(
        self,
        num_envs: int = 1,
        dataset: str = "mnist",
        split: str = "train",
        data_dir: str | os.PathLike | None = None,
        render_mode: str | None = None,
        max_episode_steps: int | None = None,
    ) -> None:
        self.num_envs = check_int("num_envs", num_envs, 1)
        if max_episode_steps is not None and max_episode_steps < 1:
            raise ValueError(f"max_episode_steps must be None or >= 1, got {max_episode_steps!r}")
        self.render_mode = check_render_mode(render_mode, self.metadata["render_modes"])
        self.single_observation_space = self._load_split(dataset, split, data_dir)
        self.single_action_space = spaces.Discrete(NUM_CLASSES)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self._streams = CounterStreams(self.num_envs)  # image draws (tpo_gym.rng)
        self._indices: np.ndarray | None = None

    # ------------------------------------------------------------------ data access
    def dataset_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """The whole split: read-only float32 images ``[n, d]`` and int64 labels ``[n]``."""
        return self._images, self._labels

    @property
    def current_indices(self) -> np.ndarray | None:
        """Indices ``[num_envs]`` of the images shown now (``None`` before the first reset)."""
        return None if self._indices is None else self._indices.copy()

    def _seed(self, seed: int | list[int | None] | None) -> None:
        """Sub-env ``i`` gets the key a single env seeded with ``seeds[i]`` would draw."""
        seeds, root = check_vector_seed(seed, self.num_envs)
        if root is not None:
            super().reset(seed=root)
        self._streams.seed_each(seeds, self.np_random)

    # ------------------------------------------------------------------ Gymnasium API
    def reset(
        self,
        *,
        seed: int | list[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[np.ndarray, dict[str, Any]]:
        self._seed(seed)
        options = check_reset_options(options, ["index"])
        if options.get("index") is not None:
            self._indices = _check_index(options["index"], self.num_images, self.num_envs)
        else:
            self._indices = self._streams.draw(self.num_images)[:, 0]
        return self._images[self._indices], {}

    def step(
        self, actions: Any
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        if self._indices is None:
            raise MNISTResetNeeded("call reset() before step()")
        a = check_action_batch(actions, NUM_CLASSES, self.num_envs)
        n = self.num_envs
        correct = a == self._labels[self._indices]
        rewards = correct.astype(np.float64)
        final = self._images[self._indices]
        # Same-step autoreset: draw every sub-environment's next image at once.
        self._indices = self._streams.draw(self.num_images)[:, 0]
        obs = self._images[self._indices]
        final_obs = np.empty(n, dtype=object)
        for i in range(n):
            final_obs[i] = final[i]
        ones = np.ones(n, dtype=np.bool_)
        info = {
            "final_obs": final_obs,
            "_final_obs": ones,
            "final_info": {"correct": correct, "_correct": ones.copy()},
            "_final_info": ones.copy(),
        }
        return obs, rewards, ones.copy(), np.zeros(n, dtype=np.bool_), info

    def score_candidates(self, actions: Any) -> np.ndarray:
        """Rewards ``float64 [num_envs, K]`` of candidate classes ``actions [num_envs, K]``
        for the current images; no state change."""
        if self._indices is None:
            raise MNISTResetNeeded("call reset() before score_candidates()")
        a = check_candidate_actions(actions, NUM_CLASSES, (self.num_envs,))
        return (a == self._labels[self._indices][:, None]).astype(np.float64)

    def render(self) -> tuple[np.ndarray, ...] | None:
        if self.render_mode is None:
            gym.logger.warn(
                "MNISTBanditVectorEnv.render() called without a render_mode; "
                'pass render_mode="rgb_array"'
            )
            return None
        if self._indices is None:
            return None
        return tuple(_to_rgb(self._images[i]) for i in self._indices)
