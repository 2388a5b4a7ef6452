"""``python -m zoo.reproduce``: the paper's experiments by name (:mod:`zoo.paper.reproduce`).

A command-line path that the docs and result files cite; importing it gives :mod:`zoo.paper.reproduce`.
"""

from zoo.cli import alias_module

alias_module(__name__, "zoo.paper.reproduce")
