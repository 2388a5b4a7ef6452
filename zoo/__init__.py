"""Tools around the ``tpo_agents`` agents, in three rooms (docs/architecture.md).

* :mod:`zoo.rlzoo`: the rl-zoo3 bridge: our algorithms and env ids in rl-zoo3's registries,
  ``train`` and ``enjoy``, the hyperparameter files (``zoo/rlzoo/hyperparams/*.yml``), the
  Optuna samplers and the native vector env class (docs/zoo.md);
* :mod:`zoo.paper`: the paper's reproduction: ``reproduce`` (every experiment by name), the
  tabular, MNIST and Token Reversal studies (:mod:`zoo.paper.token`), ``hero``, ``report``,
  the paper's published numbers, and the LLM study with its small pretrained models
  (:mod:`zoo.paper.llm`) (docs/results/README.md);
* :mod:`zoo.jobs`: running many jobs: where they run (processes, Ray), the per-job cache and
  resume, and the result files (summaries, JSON, figures, tables) (docs/sweeps.md).

:mod:`zoo.cli` holds the argparse helpers both sides use. The modules at this level
(``zoo.train``, ``zoo.enjoy``, ``zoo.reproduce``, ``zoo.report``, ``zoo.hero``,
``zoo.pretrain_lm``, ``zoo.llm_study``, ``zoo.llm_difficulty``, ``zoo.llm_recipe``,
``zoo.trl_train``) are the command lines, thin
aliases of the modules that do the work: ``python -m zoo.reproduce terminal``.
"""
