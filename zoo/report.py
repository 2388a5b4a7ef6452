"""``python -m zoo.report``: every result of a folder on one page (:mod:`zoo.paper.report`).

A command-line path that the docs and result files cite; importing it gives :mod:`zoo.paper.report`.
"""

from zoo.cli import alias_module

alias_module(__name__, "zoo.paper.report")
