"""``python -m zoo.hero``: Table 3 at H = 10 beside the artifact (:mod:`zoo.paper.hero`).

A command-line path that the docs and result files cite; importing it gives :mod:`zoo.paper.hero`.
"""

from zoo.cli import alias_module

alias_module(__name__, "zoo.paper.hero")
