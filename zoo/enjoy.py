"""``python -m zoo.enjoy``: rl-zoo3's enjoy with our algorithms (:mod:`zoo.rlzoo.enjoy`).

A command-line path that the docs and result files cite; importing it gives :mod:`zoo.rlzoo.enjoy`.
"""

from zoo.cli import alias_module

alias_module(__name__, "zoo.rlzoo.enjoy")
