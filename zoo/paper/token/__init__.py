"""Token Reversal studies: the paper's Tables 1, 2, 3, 5 and the sparse-reward diagnostics.

One module a job: :mod:`~zoo.paper.token.methods` (method table and aliases),
:mod:`~zoo.paper.token.experiments` (each experiment's methods and settings),
:mod:`~zoo.paper.token.grid` (command line -> jobs), :mod:`~zoo.paper.token.jobs` (one
job: spec, agent, record, summaries), :mod:`~zoo.paper.token.tables` and
:mod:`~zoo.paper.token.plots` (markdown and figure), :mod:`~zoo.paper.token.study` (runs an
experiment and writes its outputs). Import each name from the module that defines it.
"""
