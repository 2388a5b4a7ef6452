"""Loading and saving a causal LM, its tokenizer and LoRA adapters, offline.

* :func:`load_causal_lm`: a model object (used as is) or a local folder written by
  ``save_pretrained`` (a full model, or a ``peft`` adapter folder whose base model is
  found through its ``adapter_config.json``), or a model id already in the local Hugging
  Face cache. Nothing is downloaded, and no network request is made: a model id is looked
  up in the local cache first (``huggingface_hub.try_to_load_from_cache``) and loaded from
  its snapshot folder, so an id that is not cached fails at once, whatever
  ``HF_HUB_OFFLINE`` says (``from_pretrained(id, local_files_only=True)`` alone still
  retries network requests for ~25 s when offline without ``HF_HUB_OFFLINE=1``).
* :func:`load_tokenizer`, :func:`apply_lora`, :func:`resolve_dtype`.
* :func:`save_causal_lm`: ``save_pretrained`` of the model (or adapter) and tokenizer; an
  adapter whose base model is not a local folder gets its base weights saved next to it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from tpo_gym.extras import needs_extra

__all__ = [
    "BASE_MODEL_SUBFOLDER",
    "REF_MODEL_SUBFOLDER",
    "apply_lora",
    "is_peft_model",
    "load_causal_lm",
    "load_tokenizer",
    "resolve_dtype",
    "save_causal_lm",
]

BASE_MODEL_SUBFOLDER = "base_model"
"""Where :func:`save_causal_lm` puts the base weights of an adapter that has no base folder."""

REF_MODEL_SUBFOLDER = "ref_model"
"""Where ``CausalLMPolicy.save_pretrained`` puts a separate reference model (``ref_model``)."""

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def resolve_dtype(dtype: Any) -> torch.dtype:
    """``None``/``"auto"``: bfloat16 when CUDA is available, else float32; or a name/dtype."""
    if dtype is None or dtype == "auto":
        return torch.bfloat16 if torch.cuda.is_available() else torch.float32
    if isinstance(dtype, torch.dtype) and dtype in _DTYPES.values():
        return dtype
    if isinstance(dtype, str) and dtype in _DTYPES:
        return _DTYPES[dtype]
    raise ValueError(f"dtype must be None, 'auto', or one of {sorted(_DTYPES)}; got {dtype!r}")


def is_peft_model(model: Any) -> bool:
    try:
        from peft import PeftModel
    except ImportError:  # pragma: no cover - peft is a dependency of the llm extra
        return False
    return isinstance(model, PeftModel)


# Where a user without a model folder gets one; nothing here downloads.
GET_A_MODEL_FOLDER = (
    "to make one, on a machine with internet access run `hf download Qwen/Qwen3-1.7B "
    "--local-dir /models/Qwen3-1.7B` (huggingface_hub's CLI) and copy the folder here; "
    "offline, `python -m zoo.pretrain_lm --task arithmetic` builds a small model and prints "
    "its folder"
)


def _missing(source: Any, what: str = "model") -> ValueError:
    return ValueError(
        f"{what} {str(source)!r} does not exist: expected a local folder written by "
        "save_pretrained (or a model id already in the local Hugging Face cache); "
        f"CausalLMPolicy never downloads; {GET_A_MODEL_FOLDER}"
    )


def _not_cached(source: str, what: str) -> ValueError:
    from huggingface_hub import constants

    return ValueError(
        f"{what} {source!r} is not available locally: there is no folder of that name and it "
        f"is not in the local Hugging Face cache ({constants.HF_HUB_CACHE}); CausalLMPolicy "
        "never downloads. Pass the path of a local folder written by save_pretrained, or put "
        "the model in the cache once on a machine with network access (HF_HUB_OFFLINE unset "
        f'or HF_HUB_OFFLINE=0), e.g. `hf download {source}`, or `python -c "import '
        f"transformers as t; t.AutoModelForCausalLM.from_pretrained('{source}'); "
        f"t.AutoTokenizer.from_pretrained('{source}')\"`"
    )


def _local_folder(
    source: str | Path, what: str = "model", markers: tuple[str, ...] = ("config.json",)
) -> str:
    """A local folder holding ``source``: the folder itself, or the snapshot folder of a
    model id in the local Hugging Face cache (found by the first of ``markers`` cached).
    Makes no network request.

    Raises:
        ValueError: ``source`` is neither a folder nor a valid model id (``_missing``), or a
            model id that is not in the local cache (``_not_cached``).
    """
    path = Path(source).expanduser()
    if path.is_dir():
        return str(path)
    from huggingface_hub import try_to_load_from_cache

    source = str(source)
    for marker in markers:
        try:
            cached = try_to_load_from_cache(source, marker)
        except ValueError as err:  # HFValidationError: not a valid repo id (a missing path)
            raise _missing(source, what) from err
        if isinstance(cached, str):  # else None (not cached) or _CACHED_NO_EXIST
            return str(Path(cached).parent)
    raise _not_cached(source, what)


def _from_pretrained(source: str, dtype: torch.dtype, what: str = "model"):
    folder = _local_folder(source, what)  # before importing transformers: fails fast
    from transformers import AutoModelForCausalLM

    try:
        return AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, local_files_only=True)
    except (OSError, ValueError) as err:
        if Path(source).expanduser().is_dir():
            if what == "model":
                raise
            raise _missing(source, what) from err
        raise ValueError(
            f"{what} {source!r} is in the local Hugging Face cache ({folder}) but could not be "
            f"loaded from it ({err}); the cached snapshot may be incomplete: download it again "
            "with network access, or pass a local folder written by save_pretrained"
        ) from err


def _adapter_base(adapter_dir: Path) -> tuple[str, bool]:
    """The base model of an adapter folder and whether it lives inside the folder."""
    config = json.loads((adapter_dir / "adapter_config.json").read_text())
    base = config.get("base_model_name_or_path")
    if not base:
        raise ValueError(f"adapter folder {str(adapter_dir)!r} names no base_model_name_or_path")
    inside = adapter_dir / base
    if not Path(base).is_absolute() and inside.is_dir():
        return str(inside), True
    return base, False


@needs_extra("llm", "tpo_agents.llm.loading.load_causal_lm")
def load_causal_lm(model: Any, dtype: Any = None) -> tuple[Any, str | None, str | None]:
    """``(model, source, base_source)`` from a model object or a local path.

    ``source`` is the folder (or cached id) the model was read from (``None`` for an
    object). ``base_source`` is the path of the frozen base weights to reference when the
    model is saved with an adapter: the given folder, or the external base folder of a
    loaded adapter; ``None`` when the base weights must be saved along (in-memory models,
    adapters whose base was saved inside their folder).
    """
    if isinstance(model, torch.nn.Module):
        if dtype is not None and dtype != "auto":
            model = model.to(resolve_dtype(dtype))
        return model, None, None
    if not isinstance(model, str | Path):
        raise ValueError(
            "model must be a transformers causal LM object or a local folder path; "
            f"got {type(model).__name__}"
        )
    dtype = resolve_dtype(dtype)
    path = Path(model).expanduser()
    if path.is_dir():
        if (path / "adapter_config.json").is_file():
            from peft import PeftModel

            base, inside = _adapter_base(path)
            base_model = _from_pretrained(base, dtype, f"base model of adapter {str(path)!r}")
            return (
                PeftModel.from_pretrained(base_model, str(path), is_trainable=True),
                str(path),
                None if inside else base,
            )
        return _from_pretrained(str(path), dtype), str(path.resolve()), str(path.resolve())
    if path.exists():
        raise ValueError(
            f"model path {str(model)!r} is a file; expected a folder written by save_pretrained"
        )
    return _from_pretrained(str(model), dtype), str(model), str(model)


@needs_extra("llm", "tpo_agents.llm.loading.load_tokenizer")
def load_tokenizer(tokenizer: Any, model_source: str | None, model: Any):
    """The tokenizer object, ready for batched generation (left padding, a pad token).

    ``tokenizer`` may be an object, a path, or ``None`` (read from the model's folder).
    """
    from transformers import AutoTokenizer

    if tokenizer is None:
        source = model_source
        if source is None:
            name = getattr(model, "name_or_path", "") or ""
            source = name if name and Path(name).is_dir() else None
        if source is None:
            raise ValueError(
                "pass tokenizer= (an object or a folder) with a model object: "
                "it has no folder to read one from"
            )
        if (Path(source) / "adapter_config.json").is_file() and not (
            Path(source) / "tokenizer_config.json"
        ).is_file():
            source = _adapter_base(Path(source))[0]
        tokenizer = source
    if isinstance(tokenizer, str | Path):
        folder = _local_folder(
            tokenizer, "tokenizer", ("tokenizer_config.json", "tokenizer.json", "config.json")
        )
        try:
            tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        except (OSError, ValueError) as err:
            raise _missing(tokenizer, "tokenizer") from err
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ValueError("the tokenizer has neither a pad token nor an EOS token to pad with")
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


@needs_extra("llm", "tpo_agents.llm.loading.apply_lora")
def apply_lora(model: Any, lora: dict[str, Any] | None):
    """Wrap ``model`` with LoRA adapters (``peft.LoraConfig(task_type="CAUSAL_LM", **lora)``).

    A model that already is a ``peft`` model (e.g. a loaded adapter) is returned as is.
    """
    if lora is None or is_peft_model(model):
        return model
    if not isinstance(lora, dict):
        raise ValueError(f"lora must be a dict of peft.LoraConfig arguments or None; got {lora!r}")
    from peft import LoraConfig, get_peft_model

    try:
        config = LoraConfig(**{"task_type": "CAUSAL_LM", **lora})
    except TypeError as err:
        raise ValueError(f"lora={lora!r} is not a valid peft.LoraConfig: {err}") from err
    return get_peft_model(model, config)


def _clean_base_state(base) -> dict[str, torch.Tensor]:
    """The base model's weights without LoRA modules, under their original names."""
    state = {}
    for key, value in base.state_dict().items():
        if "lora_" in key or ".modules_to_save." in key:
            continue
        state[key.replace(".base_layer.", ".").replace(".original_module.", ".")] = value
    return state


@needs_extra("llm", "tpo_agents.llm.loading.save_causal_lm")
def save_causal_lm(
    model: Any, tokenizer: Any, directory: str | Path, base_source: str | None
) -> Path:
    """``save_pretrained`` of the model (or adapter) and tokenizer into ``directory``.

    An adapter records its base in ``adapter_config.json``: ``base_source`` when given,
    else the base weights are saved to ``directory/base_model`` (relative reference).
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    inside = is_peft_model(model) and base_source is None
    if inside:
        base = model.get_base_model()
        base.save_pretrained(directory / BASE_MODEL_SUBFOLDER, state_dict=_clean_base_state(base))
    if is_peft_model(model):
        # peft reads the base folder while saving; the folder is then named relative to the
        # adapter's so that the pair can move.
        base_path = str((directory / BASE_MODEL_SUBFOLDER).resolve()) if inside else base_source
        for config in model.peft_config.values():
            config.base_model_name_or_path = base_path
    model.save_pretrained(directory)
    if inside:
        config_file = directory / "adapter_config.json"
        config = json.loads(config_file.read_text())
        config["base_model_name_or_path"] = BASE_MODEL_SUBFOLDER
        config_file.write_text(json.dumps(config, indent=2, sort_keys=True))
    tokenizer.save_pretrained(directory)
    return directory
