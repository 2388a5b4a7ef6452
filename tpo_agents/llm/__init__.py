"""Language-model support for the agents (``transformers`` is imported only when used).

* :mod:`~zoo.paper.llm.tiny`: tiny offline causal LMs for tests and examples;
* :mod:`~tpo_agents.llm.logprobs`: completion log-probs given prompts, with padding masks;
* :mod:`~tpo_agents.llm.loading`: offline loading/saving of models, tokenizers, LoRA adapters;
* :mod:`~tpo_agents.llm.vec_env`: :class:`PromptVecEnv`, prompt envs as an SB3 ``VecEnv``;
* :mod:`~tpo_agents.llm.batch`: sampled completions, micro-batching (their group batch,
  ``LMGroupBatch``, is in :mod:`tpo_agents.rollout.batches`);
* :mod:`~tpo_agents.llm.saving`: agent zip + Hugging Face model folder;
* :mod:`~tpo_agents.llm.reference`: the KL to a frozen reference model (``ref_kl_coef``);
* :mod:`~tpo_agents.llm.completions`: sample completions in the logs
  (``log_completions_every``).
"""
