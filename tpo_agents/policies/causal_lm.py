"""``CausalLMPolicy``: any Hugging Face causal LM as a policy of the grouped agents.

Observations are prompts and actions are completions (``gymnasium.spaces.Text``, the
prompt envs of :mod:`tpo_gym.prompts`). The policy samples K completions per prompt with
``generate`` (batched over prompts, left padding, stop at EOS; by default each prompt is
pre-filled once and its key/value cache shared by its K completions,
:func:`tpo_agents.llm.generation.generate_shared_prefix`), and computes the
sequence log-probs of completions in one batched forward pass
(:func:`tpo_agents.llm.logprobs.completion_log_probs`), which TPO, GRPO and PG train
through the usual :class:`~tpo_agents.base.GroupedAlgorithm` loop.

Which distribution the log-probs belong to: that of the temperature-scaled logits,
``softmax(logits / temperature)``, i.e. exactly the sampling distribution when
``top_p = 1`` and ``top_k = 0`` (the defaults). With top-p / top-k truncation the samples
come from the truncated distribution while the log-probs stay those of the untruncated
temperature-scaled one (the convention of TRL). Sampling ignores the model's own
``generation_config`` sampling settings (repetition penalty, top-k, ...): only this
policy's options shape the distribution, so the log-probs match it.

Reference model (``ref_model``): a frozen model whose completion log-probs
(:meth:`CausalLMPolicy.reference_log_probs`, same temperature) the agents use for the KL
penalty ``ref_kl_coef`` and the ``train/kl_ref`` metric
(:mod:`tpo_agents.llm.reference`).

``transformers`` and ``peft`` are imported when a policy is built, not at import time.
"""

from __future__ import annotations

import contextlib
import copy
import warnings
from collections.abc import Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.type_aliases import Schedule

from tpo_agents.llm.batch import Completions, rowwise_with_recompute
from tpo_agents.llm.generation import generate_shared_prefix
from tpo_agents.llm.logprobs import completion_log_probs, completion_mask_after_eos
from tpo_agents.llm.vec_env import check_text_spaces
from tpo_gym.extras import needs_extra

CHAT_TEMPLATE_OPTIONS = ("auto", True, False)


def _check_number(name: str, value: Any, low: float, high: float, low_open: bool) -> float:
    ok = isinstance(value, int | float | np.integer | np.floating) and not isinstance(value, bool)
    if ok:
        value = float(value)
        ok = np.isfinite(value) and (value > low if low_open else value >= low) and value <= high
    if not ok:
        bound = f"{'(' if low_open else '['}{low}, {high}]"
        raise ValueError(f"{name} must be a number in {bound}; got {value!r}")
    return value


def _check_int(name: str, value: Any, minimum: int, allow_none: bool = False) -> int | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        extra = " or None" if allow_none else ""
        raise ValueError(f"{name} must be an integer >= {minimum}{extra}; got {value!r}")
    return int(value)


class CausalLMPolicy(BasePolicy):
    """A ``transformers`` causal LM (optionally with LoRA adapters) as a text policy.

    Pass options through the agent's ``policy_kwargs``::

        TPO("CausalLMPolicy", env, policy_kwargs={"model": "path/to/model", "max_new_tokens": 256})

    :param model: a causal LM object or a local folder written by ``save_pretrained`` (a
        full model or a ``peft`` adapter folder), or a model id already in the local
        Hugging Face cache; loaded offline. A missing path raises ``ValueError``.
    :param tokenizer: a tokenizer object or folder (default: the model's folder). It is
        switched to left padding; a missing pad token becomes the EOS token.
    :param max_new_tokens: longest completion in tokens.
    :param temperature: sampling temperature (> 0); log-probs use the same scaling.
    :param top_p: nucleus sampling mass in (0, 1] (1: off; see the module note on log-probs).
    :param top_k: top-k sampling (0: off).
    :param use_chat_template: ``"auto"`` (when the tokenizer has a chat template), True
        or False. With a template the prompt becomes the user message (after the system
        prompt, if any) with the generation prompt appended; without, the prompt text is
        fed as is (after ``system_prompt + "\\n"`` when a system prompt is set).
    :param system_prompt: system message (default None; the agents adopt the env's
        ``system_prompt`` when this is None).
    :param chat_template_kwargs: extra arguments of ``apply_chat_template`` (e.g.
        ``{"enable_thinking": False}``).
    :param lora: a dict of ``peft.LoraConfig`` arguments (``task_type`` is CAUSAL_LM),
        e.g. ``{"r": 32, "lora_alpha": 64}``: only the adapters train. Ignored when the
        model already carries adapters (a loaded adapter folder). A model object is
        wrapped in place (``peft`` injects the adapter layers into it).
    :param gradient_checkpointing: enable the model's gradient checkpointing (training
        forward passes only; non-reentrant).
    :param dtype: weights dtype for models loaded from a path: None/"auto" (bfloat16 when
        CUDA is available, else float32), "float32", "bfloat16" or "float16"; a model
        object is cast only when this is given explicitly.
    :param micro_batch_size: sequences per ``generate`` call and per forward pass (None:
        all at once). Training then accumulates gradients micro-batch by micro-batch
        (one extra forward per micro-batch, as gradient checkpointing), so memory is
        that of one micro-batch; the update is the same.
    :param optimizer_class: default ``torch.optim.AdamW`` over the trainable parameters,
        learning rate from the agent (``learning_rate``; use ~1e-5 for real models).
    :param optimizer_kwargs: its extra arguments.
    :param shared_prompt_cache: pre-fill each prompt once and share its key/value cache
        among its K completions (:func:`~tpo_agents.llm.generation.generate_shared_prefix`;
        same sampling distribution, cheaper prefill); False: plain ``generate`` with
        ``num_return_sequences=K``, which pre-fills every prompt K times.
    :param ref_model: a frozen reference model for the agents' KL penalty (``ref_kl_coef``,
        which sets ``True`` when this is not given) and the ``train/kl_ref`` metric. None or
        False (default): none. True: the model as it is when the policy is built; with LoRA
        adapters (``lora``, or an adapter folder) that is the same model with its adapters
        disabled, which costs no memory, otherwise a frozen copy of the model. Or a model
        object, local folder or cached model id (loaded as ``model``, with this ``dtype``),
        which must share the policy's tokenizer. A separate reference model is saved with
        the agent (``<path>_hf/ref_model/``).
    """

    language_model = True
    """Marks the policy for the agents: prompt vector envs and text collectors."""

    @needs_extra("llm", "CausalLMPolicy")  # builds the model with transformers (and peft)
    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        lr_schedule: Schedule,
        model: Any = None,
        tokenizer: Any = None,
        max_new_tokens: int = 64,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        use_chat_template: bool | str = "auto",
        system_prompt: str | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
        lora: dict[str, Any] | None = None,
        gradient_checkpointing: bool = False,
        dtype: Any = None,
        micro_batch_size: int | None = None,
        optimizer_class: type[torch.optim.Optimizer] | None = None,
        optimizer_kwargs: dict[str, Any] | None = None,
        shared_prompt_cache: bool = True,
        ref_model: Any = None,
    ):
        from tpo_agents.llm.loading import (
            apply_lora,
            is_peft_model,
            load_causal_lm,
            load_tokenizer,
            resolve_dtype,
        )

        check_text_spaces(observation_space, action_space)
        if model is None:
            raise ValueError(
                'CausalLMPolicy needs policy_kwargs={"model": <a local folder or a model object>}'
            )
        max_new_tokens = _check_int("max_new_tokens", max_new_tokens, 1)
        temperature = _check_number("temperature", temperature, 0.0, float("inf"), low_open=True)
        top_p = _check_number("top_p", top_p, 0.0, 1.0, low_open=True)
        top_k = _check_int("top_k", top_k, 0)
        if not (use_chat_template == "auto" or isinstance(use_chat_template, bool)):
            raise ValueError(
                f"use_chat_template must be one of {CHAT_TEMPLATE_OPTIONS}; "
                f"got {use_chat_template!r}"
            )
        if system_prompt is not None and not isinstance(system_prompt, str):
            raise ValueError(f"system_prompt must be a str or None; got {system_prompt!r}")
        if chat_template_kwargs is not None and not isinstance(chat_template_kwargs, dict):
            raise ValueError(
                f"chat_template_kwargs must be a dict or None; got {chat_template_kwargs!r}"
            )
        micro_batch_size = _check_int("micro_batch_size", micro_batch_size, 1, allow_none=True)
        if not isinstance(shared_prompt_cache, bool | np.bool_):
            raise ValueError(f"shared_prompt_cache must be a bool; got {shared_prompt_cache!r}")
        if dtype is not None:
            resolve_dtype(dtype)  # validate
        if ref_model is False:
            ref_model = None
        if not (ref_model is None or isinstance(ref_model, bool | str | Path | torch.nn.Module)):
            raise ValueError(
                "ref_model must be None, True, a model object or a local folder; "
                f"got {type(ref_model).__name__} {ref_model!r:.100}"
            )
        if isinstance(ref_model, torch.nn.Module) and ref_model is model:
            raise ValueError(
                "ref_model is the policy's own model object, which training changes; pass "
                "ref_model=True for a frozen copy of it"
            )
        super().__init__(
            observation_space,
            action_space,
            optimizer_class=torch.optim.AdamW if optimizer_class is None else optimizer_class,
            optimizer_kwargs=optimizer_kwargs,
            normalize_images=False,
        )
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.top_p = top_p
        self.top_k = top_k
        self.micro_batch_size = micro_batch_size
        self.shared_prompt_cache = bool(shared_prompt_cache)
        net, self.model_source, self.base_source = load_causal_lm(model, dtype)
        self.tokenizer = load_tokenizer(tokenizer, self.model_source, net)
        self.model = apply_lora(net, lora)
        # The reference: adapters disabled (PEFT), a copy made before any training, or a
        # model of its own; frozen and always in eval mode (see train()).
        self._ref_option = ref_model
        self._ref_adapters_disabled = ref_model is True and is_peft_model(self.model)
        self._log_prob_record: list[torch.Tensor] | None = None
        if ref_model is None or self._ref_adapters_disabled:
            ref = None
        elif ref_model is True:
            ref = copy.deepcopy(self.model)
        else:
            ref = load_causal_lm(ref_model, dtype)[0]
            self._check_vocabulary(ref)
        if ref is not None:
            ref.requires_grad_(False)
            ref.eval()
        self.ref_model = ref
        """The separate frozen reference model (None without one, or when it is this
        model with its adapters disabled)."""
        self.use_chat_template = use_chat_template
        self.system_prompt = system_prompt
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.lora = None if lora is None else dict(lora)
        self.gradient_checkpointing = bool(gradient_checkpointing)
        self.dtype = dtype
        if self.gradient_checkpointing:
            base = (
                self.model.get_base_model() if hasattr(self.model, "get_base_model") else self.model
            )
            kwargs = {"use_reentrant": False}
            if hasattr(base, "activation_checkpointing_enable"):  # transformers >= 5.2x
                base.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
            else:
                base.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
        self._eos_ids = self._eos_token_ids()
        self._warned_cut = False
        trainable = [p for p in self.parameters() if p.requires_grad]
        if not trainable:
            raise ValueError("the model has no trainable parameters")
        self.optimizer = self.optimizer_class(trainable, lr=lr_schedule(1), **self.optimizer_kwargs)

    # ------------------------------------------------------------------ setup
    def _eos_token_ids(self) -> list[int]:
        ids: set[int] = set()
        config = getattr(self.model, "generation_config", None)
        eos = getattr(config, "eos_token_id", None)
        if isinstance(eos, int):
            ids.add(eos)
        elif eos is not None:
            ids.update(int(e) for e in eos)
        if self.tokenizer.eos_token_id is not None:
            ids.add(int(self.tokenizer.eos_token_id))
        if not ids:
            raise ValueError(
                "neither the model's generation_config nor the tokenizer defines an EOS token"
            )
        return sorted(ids)

    def _check_vocabulary(self, ref: torch.nn.Module) -> None:
        def vocab(m):
            base = m.get_base_model() if hasattr(m, "get_base_model") else m
            return getattr(base.config, "vocab_size", None)

        if vocab(ref) != vocab(self.model):
            raise ValueError(
                f"ref_model has a vocabulary of {vocab(ref)} tokens and the policy's model "
                f"{vocab(self.model)}: the reference must share the policy's tokenizer"
            )

    @property
    def has_reference(self) -> bool:
        """Whether the policy has a reference model (``ref_model``)."""
        return self.ref_model is not None or self._ref_adapters_disabled

    def train(self, mode: bool = True) -> CausalLMPolicy:
        """``nn.Module.train``; the reference model stays in eval mode."""
        super().train(mode)
        if self.ref_model is not None:
            self.ref_model.eval()
        return self

    @property
    def chat(self) -> bool:
        """Whether prompts go through the tokenizer's chat template."""
        if self.use_chat_template == "auto":
            return bool(getattr(self.tokenizer, "chat_template", None))
        return bool(self.use_chat_template)

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        """The parameters the optimizer updates (the LoRA adapters with ``lora``)."""
        return [p for p in self.parameters() if p.requires_grad]

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        data.update(self.options())
        data.update(lr_schedule=self._dummy_schedule, model=self.model_source, tokenizer=None)
        return data

    def options(self) -> dict[str, Any]:
        """The policy's options (``policy_kwargs`` without ``model`` and ``tokenizer``)."""
        return dict(
            max_new_tokens=self.max_new_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            use_chat_template=self.use_chat_template,
            system_prompt=self.system_prompt,
            chat_template_kwargs=dict(self.chat_template_kwargs),
            lora=None if self.lora is None else dict(self.lora),
            gradient_checkpointing=self.gradient_checkpointing,
            dtype=self.dtype
            if self.dtype is None or isinstance(self.dtype, str)
            else str(self.dtype).split(".")[-1],
            micro_batch_size=self.micro_batch_size,
            optimizer_class=self.optimizer_class,
            optimizer_kwargs=dict(self.optimizer_kwargs),
            shared_prompt_cache=self.shared_prompt_cache,
            ref_model=self._ref_option,
        )

    def save_pretrained(self, directory: str | Path) -> Path:
        """Write the model (or its LoRA adapter) and tokenizer with ``save_pretrained``; a
        separate reference model goes to ``directory/ref_model`` the same way."""
        from tpo_agents.llm.loading import REF_MODEL_SUBFOLDER, save_causal_lm

        folder = save_causal_lm(self.model, self.tokenizer, directory, self.base_source)
        if self.ref_model is not None:
            save_causal_lm(self.ref_model, self.tokenizer, folder / REF_MODEL_SUBFOLDER, None)
        return folder

    # ---------------------------------------------------------------- prompts
    def format_prompts(self, prompts: Sequence[str]) -> list[str]:
        """The model's input text for each prompt (chat template / system prompt applied)."""
        texts = []
        for prompt in prompts:
            if not isinstance(prompt, str):
                raise ValueError(
                    f"prompts must be str; got {type(prompt).__name__} {prompt!r:.100}"
                )
            if self.chat:
                messages = (
                    [{"role": "system", "content": self.system_prompt}]
                    if self.system_prompt
                    else []
                )
                messages.append({"role": "user", "content": prompt})
                texts.append(
                    self.tokenizer.apply_chat_template(
                        messages,
                        tokenize=False,
                        add_generation_prompt=True,
                        **self.chat_template_kwargs,
                    )
                )
            else:
                texts.append(f"{self.system_prompt}\n{prompt}" if self.system_prompt else prompt)
        return texts

    def encode_prompts(self, prompts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Left-padded prompt ids and bool mask ``[B, P]`` on the policy's device."""
        enc = self.tokenizer(
            self.format_prompts(prompts),
            return_tensors="pt",
            padding=True,
            add_special_tokens=not self.chat,
        )
        ids, mask = enc["input_ids"], enc["attention_mask"].bool()
        if ids.shape[1] == 0 or not bool(mask.any(-1).all()):
            empty = int((~mask.any(-1)).nonzero()[0]) if ids.shape[1] else 0
            raise ValueError(
                f"prompt {prompts[empty]!r} encodes to no tokens; the model needs at least one"
            )
        return ids.to(self.device), mask.to(self.device)

    # --------------------------------------------------------------- sampling
    @contextlib.contextmanager
    def _own_generation_config(self):
        """Generate with only this policy's settings: the model's generation_config may
        carry sampling defaults (repetition penalty, top-k, ...) that would change the
        distribution away from the one the log-probs describe."""
        from transformers import GenerationConfig

        base = self.model.get_base_model() if hasattr(self.model, "get_base_model") else self.model
        saved = base.generation_config
        base.generation_config = GenerationConfig(
            pad_token_id=self.tokenizer.pad_token_id,
            eos_token_id=self._eos_ids,
            bos_token_id=getattr(saved, "bos_token_id", None),
        )
        try:
            yield
        finally:
            base.generation_config = saved

    @torch.no_grad()
    def _generate(self, prompts: Sequence[str], n: int, greedy: bool) -> Completions:
        prompt_ids, prompt_mask = self.encode_prompts(prompts)
        sampling = (
            {} if greedy else dict(temperature=self.temperature, top_p=self.top_p, top_k=self.top_k)
        )
        # Both paths run generate with the same settings, so they sample the same distribution.
        generate = (
            partial(generate_shared_prefix, self.model)
            if self.shared_prompt_cache
            else self.model.generate
        )
        with self._own_generation_config():
            out = generate(
                input_ids=prompt_ids,
                attention_mask=prompt_mask.long(),
                do_sample=not greedy,
                num_return_sequences=n,
                max_new_tokens=self.max_new_tokens,
                **sampling,
            )
        completion_ids = out[:, prompt_ids.shape[1] :]
        completion_mask = completion_mask_after_eos(completion_ids, self._eos_ids)
        completion_ids = completion_ids.masked_fill(~completion_mask, self.tokenizer.pad_token_id)
        return Completions(
            prompt_ids=prompt_ids.repeat_interleave(n, 0).cpu(),
            prompt_mask=prompt_mask.repeat_interleave(n, 0).cpu(),
            completion_ids=completion_ids.cpu(),
            completion_mask=completion_mask.cpu(),
            texts=self.decode(completion_ids, completion_mask),
        )

    def decode(self, completion_ids: torch.Tensor, completion_mask: torch.Tensor) -> list[str]:
        """Completion texts (special tokens dropped), cut to the action space's ``max_length``
        characters (with a one-time warning) so the env accepts them."""
        texts = [
            self.tokenizer.decode(row[m].tolist(), skip_special_tokens=True)
            for row, m in zip(completion_ids, completion_mask)
        ]
        limit = self.action_space.max_length
        if any(len(t) > limit for t in texts):
            if not self._warned_cut:
                warnings.warn(
                    f"completions longer than the action space's max_length ({limit} "
                    "characters) are cut to it; "
                    "lower max_new_tokens or raise the env's max_completion_length",
                    stacklevel=3,
                )
                self._warned_cut = True
            texts = [t[:limit] for t in texts]
        return texts

    def sample_completions(
        self, prompts: Sequence[str], n: int = 1, greedy: bool = False
    ) -> Completions:
        """``n`` completions per prompt (rows ``b * n + k``), sampled (or greedy).

        Prompts are batched into ``generate`` calls of at most ``micro_batch_size``
        sequences (at least one prompt per call).
        """
        n = _check_int("n", n, 1)
        prompts = list(prompts)
        if not prompts:
            raise ValueError("sample_completions needs at least one prompt")
        per_call = (
            len(prompts) if self.micro_batch_size is None else max(1, self.micro_batch_size // n)
        )
        parts = [
            self._generate(prompts[i : i + per_call], n, greedy)
            for i in range(0, len(prompts), per_call)
        ]
        return Completions.cat(parts, self.tokenizer.pad_token_id)

    # -------------------------------------------------------------- log-probs
    def completion_log_probs(
        self,
        prompt_ids: torch.Tensor,
        prompt_mask: torch.Tensor,
        completion_ids: torch.Tensor,
        completion_mask: torch.Tensor,
    ) -> torch.Tensor:
        """``[N, T]`` token log-probs of completions under the sampling distribution
        (temperature-scaled), 0 on padding; with gradient when grad is enabled.

        Runs in micro-batches of ``micro_batch_size`` rows with gradient accumulation
        (see :func:`tpo_agents.llm.batch.rowwise_with_recompute`).
        """
        device = self.device
        tensors = [t.to(device) for t in (prompt_ids, prompt_mask, completion_ids, completion_mask)]

        def rows(start: int, stop: int) -> torch.Tensor:
            return completion_log_probs(
                self.model, *(t[start:stop] for t in tensors), temperature=self.temperature
            )

        out = rowwise_with_recompute(rows, len(tensors[0]), self.micro_batch_size)
        if self._log_prob_record is not None:
            self._log_prob_record.append(out)
        return out

    @contextlib.contextmanager
    def record_log_probs(self) -> Iterator[list[torch.Tensor]]:
        """A list that collects what :meth:`completion_log_probs` returns inside the block
        (the agents reuse an epoch's token log-probs for the KL to the reference)."""
        record: list[torch.Tensor] = []
        previous, self._log_prob_record = self._log_prob_record, record
        try:
            yield record
        finally:
            self._log_prob_record = previous

    @torch.no_grad()
    def reference_log_probs(
        self,
        prompt_ids: torch.Tensor,
        prompt_mask: torch.Tensor,
        completion_ids: torch.Tensor,
        completion_mask: torch.Tensor,
    ) -> torch.Tensor:
        """``[N, T]`` token log-probs of completions under the reference model (same
        temperature as :meth:`completion_log_probs`, 0 on padding, no gradient), in
        micro-batches of ``micro_batch_size`` rows. With LoRA and ``ref_model=True`` the
        model runs with its adapters disabled (and dropout off)."""
        if not self.has_reference:
            raise ValueError("this policy has no reference model: build it with ref_model=...")
        device = self.device
        tensors = [t.to(device) for t in (prompt_ids, prompt_mask, completion_ids, completion_mask)]
        net = self.model if self.ref_model is None else self.ref_model

        def rows(start: int, stop: int) -> torch.Tensor:
            return completion_log_probs(
                net, *(t[start:stop] for t in tensors), temperature=self.temperature
            )

        if self.ref_model is not None:
            return rowwise_with_recompute(rows, len(tensors[0]), self.micro_batch_size)
        training = self.model.training
        self.model.eval()
        try:
            with self.model.disable_adapter():
                return rowwise_with_recompute(rows, len(tensors[0]), self.micro_batch_size)
        finally:
            self.model.train(training)

    # ---------------------------------------------------------------- predict
    def predict(
        self,
        observation: str | Sequence[str] | np.ndarray,
        state: Any = None,
        episode_start: Any = None,
        deterministic: bool = False,
    ) -> tuple[str | list[str], Any]:
        """Completion(s) for a prompt or a batch of prompts: greedy when ``deterministic``,
        else sampled. A single str gives a str; a sequence gives a list of str."""
        single = isinstance(observation, str)
        prompts = (
            [observation]
            if single
            else [str(o) if isinstance(o, np.str_) else o for o in list(observation)]
        )
        self.set_training_mode(False)
        texts = self.sample_completions(prompts, 1, greedy=deterministic).texts
        return (texts[0] if single else texts), state

    def _predict(self, observation, deterministic: bool = False):
        return self.predict(observation, deterministic=deterministic)[0]

    def forward(self, observation, deterministic: bool = False):
        return self._predict(observation, deterministic)
