"""``python -m zoo.train``: rl-zoo3's train with our algorithms (:mod:`zoo.rlzoo.train`).

A command-line path that the docs and result files cite; importing it gives :mod:`zoo.rlzoo.train`.
"""

from zoo.cli import alias_module

alias_module(__name__, "zoo.rlzoo.train")
