"""Saving and loading agents whose policy is a language model.

``model.save("run/tpo")`` writes two things side by side:

* ``run/tpo.zip``: the SB3 agent state (hyperparameters, counters, RNG, the optimizer
  state, the policy options), but not the model weights;
* ``run/tpo_hf/``: the model (or its LoRA adapter) and tokenizer, written with
  ``save_pretrained`` and loadable by ``transformers``/``peft`` directly.
  A separate reference model (the policy's ``ref_model``) is saved in
  ``run/tpo_hf/ref_model/`` the same way.

``TPO.load("run/tpo")`` rebuilds the policy from ``run/tpo_hf/`` (wherever the pair has
been moved) and restores the optimizer state.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["load_kwargs", "model_folder", "save_agent"]

HF_SUFFIX = "_hf"


def model_folder(path: Any) -> Path:
    """The model folder that goes with an agent file: ``run/tpo(.zip)`` -> ``run/tpo_hf``."""
    if isinstance(path, io.IOBase):
        raise ValueError(
            "an agent with a language-model policy must be saved to a path (its model folder "
            f"goes next to the file); got a file object {path!r}"
        )
    text = str(path)
    return Path((text[: -len(".zip")] if text.endswith(".zip") else text) + HF_SUFFIX)


def save_agent(algo, path: Any, save_zip: Callable[[], None]) -> None:
    """Write the model folder, then the agent zip (``save_zip``) with ``policy_kwargs``
    pointing at that folder (no model or tokenizer objects are pickled)."""
    from tpo_agents.atomic import atomic_folder

    folder = model_folder(path)
    with atomic_folder(folder) as tmp:  # a crash leaves the previous folder in place
        algo.policy.save_pretrained(tmp)
    from tpo_agents.llm.loading import REF_MODEL_SUBFOLDER

    original = algo.policy_kwargs
    algo.policy_kwargs = {
        **algo.policy.options(),
        "model": str(folder.resolve()),
        "tokenizer": None,
    }
    if getattr(algo.policy, "ref_model", None) is not None:  # saved in the folder
        algo.policy_kwargs["ref_model"] = str((folder / REF_MODEL_SUBFOLDER).resolve())
    try:
        save_zip()
    finally:
        algo.policy_kwargs = original


def _zip_path(path: Any) -> Path | None:
    for candidate in (Path(str(path)), Path(f"{path}.zip")):
        if candidate.is_file():
            return candidate
    return None


def load_kwargs(path: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` of SB3's ``load`` so that a language-model policy is rebuilt from the
    model folder next to ``path`` (unchanged for other agents)."""
    if isinstance(path, io.IOBase):
        return kwargs
    folder = model_folder(path)
    archive = _zip_path(path)
    if not folder.is_dir() or archive is None:
        return kwargs
    from stable_baselines3.common.save_util import json_to_data

    custom = dict(kwargs.get("custom_objects") or {})
    with zipfile.ZipFile(archive) as z:
        data = json_to_data(z.read("data").decode(), custom_objects=custom)
    policy_class = data.get("policy_class")
    if not getattr(policy_class, "language_model", False):
        return kwargs
    from tpo_agents.llm.loading import REF_MODEL_SUBFOLDER

    policy_kwargs = {**data.get("policy_kwargs", {}), "model": str(folder), "tokenizer": None}
    saved_ref = policy_kwargs.get("ref_model")
    ref_folder = folder / REF_MODEL_SUBFOLDER
    if (
        isinstance(saved_ref, str)
        and Path(saved_ref).name == REF_MODEL_SUBFOLDER
        and ref_folder.is_dir()
    ):
        policy_kwargs["ref_model"] = str(ref_folder)  # saved with the model: wherever it is now
    custom["policy_kwargs"] = policy_kwargs
    return {**kwargs, "custom_objects": custom}
