"""``python -m zoo.llm_study``: the LLM RLVR study (:mod:`zoo.paper.llm.study`).

A command-line path that the docs and result files cite; importing it gives :mod:`zoo.paper.llm.study`.
"""

from zoo.cli import alias_module

alias_module(__name__, "zoo.paper.llm.study")
