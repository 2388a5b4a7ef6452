"""Tools around the ``tpo_agents`` agents: the rl-zoo3 bridge and the paper's reproduction.

The rl-zoo3 bridge (``python -m zoo.train`` / ``zoo.enjoy``; docs/zoo.md):

* :mod:`zoo.rlzoo`: our algorithms (``tpo``, ``grpo``, ``dg``, ``pg``, ``cfppo``) and env ids
  in rl-zoo3's registries;
* :mod:`zoo.train`, :mod:`zoo.enjoy`: rl-zoo3's ``train`` and ``enjoy`` entry points;
* :mod:`zoo.hyperparams` (and the files in ``zoo/hyperparams/``): the hyperparameter files;
* :mod:`zoo.samplers`: the Optuna samplers for ``-optimize``;
* :mod:`zoo.vec_env`: the native vector env class for rl-zoo3.

The paper reproduction (``python -m zoo.reproduce NAME``; docs/results/README.md):

* :mod:`zoo.reproduce`: the command line, every experiment by name;
* :mod:`zoo.tabular`, :mod:`zoo.mnist_study`: the tabular bandit and MNIST studies;
* the Token Reversal studies: :mod:`zoo.token_study` (the entry: runs an experiment and writes
  its outputs) composed of :mod:`zoo.token_methods` (the method table and its aliases),
  :mod:`zoo.token_experiments` (each experiment's methods and settings),
  :mod:`zoo.paper_numbers` (the paper's published values), :mod:`zoo.token_grid` (the
  command line -> jobs), :mod:`zoo.token_jobs` (one job: spec, agent, per-iteration record,
  summaries), :mod:`zoo.token_tables` and :mod:`zoo.token_plots` (the markdown and figure);
* :mod:`zoo.hero`: Table 3 at H = 10 beside the artifact's published curves;
* :mod:`zoo.llm_recipe`: the LLM RLVR comparison with TRL;
* :mod:`zoo.report`: every result of a folder on one page;
* shared by the studies: :mod:`zoo.results` (summaries, JSON, figures, tables),
  :mod:`zoo.sweep` (cached sweeps of jobs) and :mod:`zoo.backends` (where jobs run).

:mod:`zoo.cli` holds argparse helpers that both sides use.
"""
